package com.google.android.play.core.aipacks;

import android.content.Context;

/** Stand-in: getInstance returns MANAGER, which JVM tests set (the real factory talks to the Play Store). */
public final class AiPackManagerFactory {
    /** stand-in: what getInstance returns */
    public static AiPackManager MANAGER;

    private AiPackManagerFactory() {}

    public static AiPackManager getInstance(Context applicationContext) {
        if (MANAGER == null) throw new RuntimeException("Stub! (stand-in: set AiPackManagerFactory.MANAGER)");
        return MANAGER;
    }
}
