// Prints Apache Kafka's broker config definitions as JSON lines, one key a line:
// name, type, default (as Kafka renders it), whether it is internal, its
// dynamic update mode (read-only / per-broker / cluster-wide, Kafka's
// DynamicBrokerConfig), whether it is dynamic per listener only, its synonyms, and its validator as data (Range bounds,
// allowed strings). No documentation text is printed.
//
// Run with the reference classpath (tools/dump_kafka_broker_configs.py does):
//   java -cp <kafka 4.4 jars> compat_tests/java/tools/DumpBrokerConfigDef.java
import com.fasterxml.jackson.databind.ObjectMapper;
import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.server.config.AbstractKafkaConfig;
import org.apache.kafka.server.config.DynamicBrokerConfig;

public class DumpBrokerConfigDef {
    static Object field(Object o, String name) throws Exception {
        Field f = o.getClass().getDeclaredField(name);
        f.setAccessible(true);
        return f.get(o);
    }

    static Map<String, Object> validator(ConfigDef.Validator v) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        if (v == null) return null;
        out.put("class", v.getClass().getName());
        out.put("text", String.valueOf(v));
        if (v instanceof ConfigDef.Range) {
            Object min = field(v, "min"), max = field(v, "max");
            out.put("min", min == null ? null : String.valueOf(min));
            out.put("max", max == null ? null : String.valueOf(max));
        } else if (v instanceof ConfigDef.ValidString) {
            out.put("strings", field(v, "validStrings"));
        } else if (v instanceof ConfigDef.CaseInsensitiveValidString) {
            out.put("strings", new ArrayList<>((java.util.Collection<?>) field(v, "validStrings")));
            out.put("case_insensitive", true);
        } else if (v instanceof ConfigDef.ValidList) {
            Object vs = field(v, "validString");
            out.put("strings", vs == null ? null : field(vs, "validStrings"));
            out.put("empty_allowed", field(v, "isEmptyAllowed"));
            out.put("null_allowed", field(v, "isNullAllowed"));
        }
        return out;
    }

    public static void main(String[] args) throws Exception {
        ObjectMapper json = new ObjectMapper();
        Map<String, String> modes = DynamicBrokerConfig.dynamicConfigUpdateModes();
        for (ConfigDef.ConfigKey key : AbstractKafkaConfig.CONFIG_DEF.configKeys().values()) {
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("name", key.name);
            row.put("type", key.type.name());
            boolean hasDefault = key.defaultValue != ConfigDef.NO_DEFAULT_VALUE;
            row.put("has_default", hasDefault);
            row.put("default", hasDefault && key.defaultValue != null
                    ? ConfigDef.convertToString(key.defaultValue, key.type) : null);
            row.put("internal", key.internalConfig);
            row.put("mode", modes.getOrDefault(key.name, "read-only"));
            row.put("listener_only", DynamicBrokerConfig.DYNAMIC_SECURITY_CONFIGS.contains(key.name));
            List<String> synonyms = DynamicBrokerConfig.brokerConfigSynonyms(key.name, true);
            row.put("synonyms", synonyms);
            row.put("validator", validator(key.validator));
            System.out.println(json.writeValueAsString(row));
        }
    }
}
