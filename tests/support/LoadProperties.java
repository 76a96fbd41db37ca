// The reference reading of a properties file: java.util.Properties.load, as Kafka's own
// tools call it (org.apache.kafka.common.utils.Utils.loadProps hands it an InputStream,
// which it decodes as ISO-8859-1; the Reader below decodes the bytes the same way).
//
//   java tests/support/LoadProperties.java FILE...
//
// prints one JSON line per FILE, in order: {"entries": {KEY: VALUE, ...}} with the keys
// sorted, or {"error": MESSAGE} when load refuses the file (a malformed Unicode escape).
// Every character outside printable ASCII, and '"' and '\', is written as a JSON Unicode
// escape of its UTF-16 code unit, so lone surrogates survive the trip into Python.
// Run by tests/support/java_properties.py (single-file source launch: needs the
// jdk.compiler module, which Debian's default-jre-headless ships).

import java.io.IOException;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Properties;
import java.util.TreeSet;

public class LoadProperties {
    public static void main(String[] args) throws IOException {
        StringBuilder out = new StringBuilder();
        for (String file : args) {
            Properties properties = new Properties();
            try (Reader reader = Files.newBufferedReader(Path.of(file), StandardCharsets.ISO_8859_1)) {
                properties.load(reader);
            } catch (IllegalArgumentException refused) {
                out.append("{\"error\": ").append(json(String.valueOf(refused.getMessage()))).append("}\n");
                continue;
            }
            out.append("{\"entries\": {");
            String comma = "";
            for (String key : new TreeSet<>(properties.stringPropertyNames())) {
                out.append(comma).append(json(key)).append(": ").append(json(properties.getProperty(key)));
                comma = ", ";
            }
            out.append("}}\n");
        }
        System.out.print(out);
    }

    static String json(String text) {
        StringBuilder quoted = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
                quoted.append(c);
            } else {
                quoted.append(String.format("\\u%04x", (int) c));
            }
        }
        return quoted.append('"').toString();
    }
}
