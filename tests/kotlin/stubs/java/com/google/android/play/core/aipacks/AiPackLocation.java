package com.google.android.play.core.aipacks;

/** Stand-in: abstract as in the library; tests subclass it. */
public abstract class AiPackLocation {
    public AiPackLocation() {}
    public abstract String assetsPath();
    public abstract int packStorageMethod();
    public abstract String path();
}
