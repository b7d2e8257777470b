package android.app;

import android.content.ContextWrapper;

/**
 * Stand-in: android.app's Application, the app's own Context (AndroidViewModel's argument). Android attaches its base
 * context (attachBaseContext); a JVM test's subclass attaches one of its own.
 */
public class Application extends ContextWrapper {
    public Application() { super(null); }
}
