package android.widget;

import android.content.Context;
import android.view.View;

public class TextView extends View {
    public TextView(Context context) { super(context); }
    public CharSequence getText() { throw new RuntimeException("Stub!"); }
    public final void setText(CharSequence text) { throw new RuntimeException("Stub!"); }
}
