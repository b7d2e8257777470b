package com.google.android.play.core.aipacks.model;

/** Stand-in: the library's @IntDef of download states, with its constant values. */
public @interface AiPackStatus {
    int UNKNOWN = 0;
    int PENDING = 1;
    int DOWNLOADING = 2;
    int TRANSFERRING = 3;
    int COMPLETED = 4;
    int FAILED = 5;
    int CANCELED = 6;
    int WAITING_FOR_WIFI = 7;
    int NOT_INSTALLED = 8;
    int REQUIRES_USER_CONFIRMATION = 9;
}
