package kanal.spark.jvm;

import java.util.Set;

/** `kanal-metadata`: the metadata log as records (kanal.spark.metadata_source); read-only, and a stream. */
public final class MetadataSource extends KanalSource {
  @Override
  String name() {
    return "kanal-metadata";
  }

  @Override
  String kind() {
    return "read-only";
  }

  @Override
  boolean streams() {
    return true;
  }

  @Override
  Set<String> pushable() {
    return Set.of("offset");
  }
}
