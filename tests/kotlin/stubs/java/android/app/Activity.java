package android.app;

import android.content.Context;
import android.content.pm.ApplicationInfo;
import android.content.pm.PackageManager;
import android.content.res.AssetManager;
import android.os.Bundle;
import android.view.View;
import java.io.File;

/** Stand-in: in android.jar Activity extends ContextThemeWrapper, a Context. */
public class Activity extends Context {
    protected void onCreate(Bundle savedInstanceState) { throw new RuntimeException("Stub!"); }
    protected void onDestroy() { throw new RuntimeException("Stub!"); }
    public void setContentView(View view) { throw new RuntimeException("Stub!"); }
    public final void runOnUiThread(Runnable action) { throw new RuntimeException("Stub!"); }
    public boolean isFinishing() { throw new RuntimeException("Stub!"); }

    @Override public File getFilesDir() { throw new RuntimeException("Stub!"); }
    @Override public AssetManager getAssets() { throw new RuntimeException("Stub!"); }
    @Override public ApplicationInfo getApplicationInfo() { throw new RuntimeException("Stub!"); }
    @Override public PackageManager getPackageManager() { throw new RuntimeException("Stub!"); }
    @Override public String getPackageName() { throw new RuntimeException("Stub!"); }
    @Override public Context getApplicationContext() { throw new RuntimeException("Stub!"); }
}
