package kanal.spark.jvm;

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
}
