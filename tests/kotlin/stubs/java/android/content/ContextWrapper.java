package android.content;

import android.content.pm.ApplicationInfo;
import android.content.pm.PackageManager;
import android.content.res.AssetManager;
import java.io.File;

/** Stand-in: android.content's ContextWrapper, a Context that passes every call to its base context. */
public class ContextWrapper extends Context {
    private Context base;

    public ContextWrapper(Context base) { this.base = base; }

    protected void attachBaseContext(Context base) {
        if (this.base != null) throw new IllegalStateException("Base context already set");
        this.base = base;
    }

    public Context getBaseContext() { return base; }

    @Override public File getFilesDir() { return base.getFilesDir(); }
    @Override public AssetManager getAssets() { return base.getAssets(); }
    @Override public ApplicationInfo getApplicationInfo() { return base.getApplicationInfo(); }
    @Override public PackageManager getPackageManager() { return base.getPackageManager(); }
    @Override public String getPackageName() { return base.getPackageName(); }
    @Override public Context getApplicationContext() { return base.getApplicationContext(); }
}
