import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.apache.kafka.common.utils.internals.Exit;

/**
 * Runs several of Kafka's command-line tools (their unmodified main classes from the
 * kafka-tools jar) one after the other in one JVM, so a test pays one JVM start for
 * many tool runs. Arguments are steps separated by "--next--"; each step is a main
 * class and its arguments. A tool's first Exit.exit becomes its step's exit code
 * (Kafka's tools exit through org.apache.kafka.common.utils.internals.Exit, which
 * tests may redirect). Each step's captured stdout and stderr are printed between markers:
 * "@@STEP i code runs", the stdout, "@@ERR", the stderr, "@@END i".
 *
 * A step that starts with "--until--", a text and a number of seconds waits for a
 * condition with the tool itself: it runs again (200 ms apart) while it exits 0 and
 * its stdout lacks the text, for at most that long; the last run is reported, with
 * the number of runs.
 */
public final class ToolBatch {
    static final class ExitCalled extends RuntimeException {
        final int code;
        ExitCalled(int code) { super("exit(" + code + ")", null, false, false); this.code = code; }
    }

    /** The first exit code a step asked for: some tools catch every Throwable around
     * their own Exit.exit(0) and exit again with 1. */
    static volatile Integer firstExit;

    public static void main(String[] args) throws Exception {
        List<List<String>> steps = new ArrayList<>();
        List<String> current = new ArrayList<>();
        for (String a : args) {
            if (a.equals("--next--")) { steps.add(current); current = new ArrayList<>(); }
            else current.add(a);
        }
        steps.add(current);
        Exit.Procedure exit = (code, message) -> {
            if (firstExit == null) firstExit = code;
            throw new ExitCalled(code);
        };
        Exit.setExitProcedure(exit);
        Exit.setHaltProcedure(exit);
        PrintStream realOut = System.out;
        for (int i = 0; i < steps.size(); i++) {
            List<String> step = steps.get(i);
            String until = null;
            long deadline = 0;
            if (step.get(0).equals("--until--")) {
                until = step.get(1);
                deadline = System.nanoTime() + (long) (Double.parseDouble(step.get(2)) * 1e9);
                step = step.subList(3, step.size());
            }
            int runs = 0;
            Result result;
            while (true) {
                result = run(step);
                runs++;
                if (until == null || result.code != 0 || result.out.contains(until)
                        || System.nanoTime() > deadline) break;
                Thread.sleep(200);
            }
            realOut.println("@@STEP " + i + " " + result.code + " " + runs);
            realOut.print(result.out);
            realOut.println();
            realOut.println("@@ERR");
            realOut.print(result.err);
            realOut.println();
            realOut.println("@@END " + i);
            realOut.flush();
        }
        System.exit(0);
    }

    record Result(int code, String out, String err) { }

    /** One run of a step's main class, its output captured. */
    static Result run(List<String> step) {
        PrintStream realOut = System.out;
        PrintStream realErr = System.err;
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
        System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
        int code = 0;
        firstExit = null;
        try {
            Method main = Class.forName(step.get(0)).getMethod("main", String[].class);
            main.invoke(null, (Object) step.subList(1, step.size()).toArray(new String[0]));
        } catch (InvocationTargetException e) {
            Throwable cause = e.getCause();
            if (cause instanceof ExitCalled) code = ((ExitCalled) cause).code;
            else { cause.printStackTrace(); code = 99; }
        } catch (ExitCalled e) {
            code = e.code;
        } catch (Throwable t) {
            t.printStackTrace(); code = 98;
        } finally {
            System.out.flush();
            System.err.flush();
            System.setOut(realOut);
            System.setErr(realErr);
        }
        if (firstExit != null) code = firstExit;
        return new Result(code, out.toString(StandardCharsets.UTF_8),
                          err.toString(StandardCharsets.UTF_8));
    }
}
