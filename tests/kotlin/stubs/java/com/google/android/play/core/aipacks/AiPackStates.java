package com.google.android.play.core.aipacks;

import java.util.Map;

/** Stand-in: abstract as in the library; tests subclass it. */
public abstract class AiPackStates {
    public AiPackStates() {}
    public abstract Map<String, AiPackState> packStates();
    public abstract long totalBytes();
}
