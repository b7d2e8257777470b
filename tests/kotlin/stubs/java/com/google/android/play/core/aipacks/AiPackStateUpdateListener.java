package com.google.android.play.core.aipacks;

import com.google.android.play.core.listener.StateUpdatedListener;

public interface AiPackStateUpdateListener extends StateUpdatedListener<AiPackState> {}
