package android.widget;

import android.content.Context;

public class ScrollView extends FrameLayout {
    public ScrollView(Context context) { super(context); }
}
