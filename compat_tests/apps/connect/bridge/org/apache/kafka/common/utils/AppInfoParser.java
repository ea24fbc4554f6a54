/*
 * Bridge for connect-file 4.3.1 on a Kafka 4.4.0 classpath (compat_tests/apps/connect).
 *
 * Maven Central here serves connect-file (the FileStream connectors) up to 4.3.1 only.
 * Its connectors answer version() through AppInfoParser.getVersion(), a class that
 * kafka-clients 4.4.0 moved to org.apache.kafka.common.utils.internals, so the 4.3.1
 * plugin fails with NoClassDefFoundError in a 4.4.0 worker. This one method, in the
 * old place, forwards to the new one; nothing else of the plugin or worker changes.
 */
package org.apache.kafka.common.utils;

public final class AppInfoParser {
    private AppInfoParser() {
    }

    public static String getVersion() {
        return org.apache.kafka.common.utils.internals.AppInfoParser.getVersion();
    }
}
