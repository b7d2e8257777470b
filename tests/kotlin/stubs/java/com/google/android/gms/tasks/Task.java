package com.google.android.gms.tasks;

/** Stand-in for play-services-tasks' Task (what AiPackManager's methods return): the members the glue uses. */
public abstract class Task<TResult> {
    public Task() {}
    public abstract boolean isComplete();
    public abstract boolean isSuccessful();
    public abstract TResult getResult();
    public abstract Exception getException();
    public abstract Task<TResult> addOnSuccessListener(OnSuccessListener<? super TResult> listener);
    public abstract Task<TResult> addOnFailureListener(OnFailureListener listener);
}
