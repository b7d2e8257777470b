package androidx.activity;

import android.app.Activity;
import androidx.lifecycle.Lifecycle;
import androidx.lifecycle.LifecycleOwner;

/** Stand-in: androidx.activity's ComponentActivity, an Activity that is a LifecycleOwner. */
public class ComponentActivity extends Activity implements LifecycleOwner {
    @Override public Lifecycle getLifecycle() { throw new RuntimeException("Stub!"); }
}
