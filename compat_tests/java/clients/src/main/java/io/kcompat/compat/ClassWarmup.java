package io.kcompat.compat;

import java.io.File;
import java.util.Enumeration;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;

/**
 * Loads every class of the jars on the class path, without initializing any, so that a JVM
 * started with -XX:ArchiveClassesAtExit writes them all to a class-data archive. The suite's
 * client JVMs map that archive (-XX:SharedArchiveFile, compat_tests/java/_jvm.py) instead of
 * reading, parsing and verifying the same classes again at every start. Usage: ClassWarmup.
 * Prints {"loaded":N,"failed":M} (a class whose optional dependency is absent fails to load).
 */
public final class ClassWarmup {
    public static void main(String[] args) throws Exception {
        ClassLoader loader = ClassWarmup.class.getClassLoader();
        int loaded = 0;
        int failed = 0;
        for (String entry : System.getProperty("java.class.path").split(File.pathSeparator)) {
            if (!entry.endsWith(".jar")) {
                continue;
            }
            try (JarFile jar = new JarFile(entry)) {
                for (Enumeration<JarEntry> e = jar.entries(); e.hasMoreElements(); ) {
                    String name = e.nextElement().getName();
                    // module-info and multi-release variants are not classes of the class path
                    if (!name.endsWith(".class") || name.startsWith("META-INF/")
                            || name.endsWith("module-info.class")) {
                        continue;
                    }
                    String cls = name.substring(0, name.length() - ".class".length()).replace('/', '.');
                    try {
                        Class.forName(cls, false, loader);
                        loaded++;
                    } catch (Throwable t) {
                        failed++;
                    }
                }
            }
        }
        System.out.println("{\"loaded\":" + loaded + ",\"failed\":" + failed + "}");
    }
}
