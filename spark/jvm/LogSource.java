package kanal.spark.jvm;

import java.util.Map;
import java.util.Set;

/** `kanal-log`: partition logs as records (kanal.spark.log_source); batch-only. */
public final class LogSource extends KanalSource {
  @Override
  String name() {
    return "kanal-log";
  }

  @Override
  String kind() {
    return "batch-only";
  }

  @Override
  boolean streams() {
    return false;
  }

  @Override
  Set<String> pushable() {
    return Set.of("topic", "partition", "offset", "timestamp");
  }

  /** valueFormat / keyFormat make value / key the registry's types (kanal.spark.decoded_columns). */
  @Override
  boolean shapesSchema(Map<String, String> options) {
    for (String key : options.keySet()) {
      if (key.equalsIgnoreCase("valueFormat") || key.equalsIgnoreCase("keyFormat")) {
        return true;
      }
    }
    return false;
  }
}
