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
 * "@@STEP i code", the stdout, "@@ERR", the stderr, "@@END i".
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
        PrintStream realErr = System.err;
        for (int i = 0; i < steps.size(); i++) {
            List<String> step = steps.get(i);
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
            realOut.println("@@STEP " + i + " " + code);
            realOut.print(out.toString(StandardCharsets.UTF_8));
            realOut.println();
            realOut.println("@@ERR");
            realOut.print(err.toString(StandardCharsets.UTF_8));
            realOut.println();
            realOut.println("@@END " + i);
            realOut.flush();
        }
        System.exit(0);
    }
}
