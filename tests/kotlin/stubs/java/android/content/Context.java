package android.content;

import android.content.pm.ApplicationInfo;
import android.content.pm.PackageManager;
import android.content.res.AssetManager;
import java.io.File;

public abstract class Context {
    public abstract File getFilesDir();
    public abstract AssetManager getAssets();
    public abstract ApplicationInfo getApplicationInfo();
    public abstract PackageManager getPackageManager();
    public abstract String getPackageName();
    public abstract Context getApplicationContext();
}
