package com.google.android.play.core.aipacks;

import com.google.android.gms.tasks.Task;
import java.util.List;

/** Stand-in for the ai-delivery library's AiPackManager: the members the glue uses; tests implement it. */
public interface AiPackManager {
    Task<AiPackStates> fetch(List<String> packNames);
    AiPackLocation getPackLocation(String packName);
    void registerListener(AiPackStateUpdateListener listener);
}
