package com.google.android.play.core.aipacks;

/** Stand-in: abstract as in the library; tests subclass it. */
public abstract class AiPackState {
    public AiPackState() {}
    public abstract long bytesDownloaded();
    public abstract int errorCode();
    public abstract String name();
    public abstract int status();
    public abstract long totalBytesToDownload();
    public abstract int transferProgressPercentage();
}
