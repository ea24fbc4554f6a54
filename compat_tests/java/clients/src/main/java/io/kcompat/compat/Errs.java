package io.kcompat.compat;

import java.util.Map;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.common.protocol.Errors;

/** Turns a client exception into what the tests compare: Kafka's error name and code. */
public final class Errs {
    private Errs() {}

    public static Throwable unwrap(Throwable t) {
        while ((t instanceof ExecutionException || t instanceof java.util.concurrent.CompletionException)
                && t.getCause() != null) {
            t = t.getCause();
        }
        return t;
    }

    public static Map<String, Object> describe(Throwable t) {
        Throwable e = unwrap(t);
        Errors err = Errors.forException(e);
        return Json.obj(
                "error", err.name(),
                "code", (int) err.code(),
                "exception", e.getClass().getSimpleName(),
                "message", String.valueOf(e.getMessage()));
    }
}
