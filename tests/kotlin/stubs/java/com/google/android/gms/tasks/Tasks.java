package com.google.android.gms.tasks;

/** Stand-in: forResult and forException give finished tasks whose listeners run at once (no executor here). */
public final class Tasks {
    private Tasks() {}

    public static <TResult> Task<TResult> forResult(TResult result) { return new Done<>(result, null); }

    public static <TResult> Task<TResult> forException(Exception e) { return new Done<>(null, e); }

    private static final class Done<TResult> extends Task<TResult> {
        private final TResult result;
        private final Exception error;

        Done(TResult result, Exception error) { this.result = result; this.error = error; }

        @Override public boolean isComplete() { return true; }
        @Override public boolean isSuccessful() { return error == null; }
        @Override public TResult getResult() {
            if (error != null) throw new RuntimeException(error);
            return result;
        }
        @Override public Exception getException() { return error; }
        @Override public Task<TResult> addOnSuccessListener(OnSuccessListener<? super TResult> listener) {
            if (error == null) listener.onSuccess(result);
            return this;
        }
        @Override public Task<TResult> addOnFailureListener(OnFailureListener listener) {
            if (error != null) listener.onFailure(error);
            return this;
        }
    }
}
