package com.google.android.play.core.listener;

public interface StateUpdatedListener<StateT> {
    void onStateUpdate(StateT state);
}
