package com.google.android.gms.tasks;

public interface OnFailureListener {
    void onFailure(Exception e);
}
