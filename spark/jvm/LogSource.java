package kanal.spark.jvm;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The `kanal-log` source on the JVM: a DataSource V2 table with column pruning and columnar reads, whose
 * rows are made by kanal's Python reader (kanal.spark.log_source) in worker processes (PythonWorkers).
 *
 * Why a JVM table at all: PySpark's Python data source API has no column pruning and turns every Arrow
 * batch into rows, copying each column (docs/benchmarks.md, Spark sources); here the scan hands Spark the
 * worker's Arrow vectors as they are, and builds only the columns a query uses. What the rows are (the
 * committed-copy plan, stand-ins for damage, notices, read_committed, Fetch) stays in Python, once: the
 * planner's InputPartitions and the reader's batches are the same objects as the Python source's.
 *
 * The full schema is the Python table's (columns.LOG_TABLE), written into the jar as kanal-log.ddl when it
 * is built (kanal.spark.jvm_jar); a user schema must name its columns with those types.
 */
public final class LogSource implements TableProvider, DataSourceRegister {
  static final String NAME = "kanal-log";

  @Override
  public String shortName() {
    return NAME;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return fullSchema();
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    StructType full = fullSchema();
    Map<String, StructField> byName = new HashMap<>();
    for (StructField f : full.fields()) {
      byName.put(f.name(), f);
    }
    for (StructField f : schema.fields()) {
      StructField known = byName.get(f.name());
      if (known == null) {
        throw new IllegalArgumentException("unknown columns [" + f.name() + "]; kanal-log has "
            + String.join(", ", full.fieldNames()));
      }
      if (!known.dataType().sameType(f.dataType())) {
        throw new IllegalArgumentException("kanal-log's column " + f.name() + " is "
            + known.dataType().simpleString() + ", not " + f.dataType().simpleString());
      }
    }
    return new LogTable(schema, new HashMap<>(properties));
  }

  static StructType fullSchema() {
    try (InputStream in = LogSource.class.getResourceAsStream("/kanal-log.ddl")) {
      if (in == null) {
        throw new IllegalStateException("kanal-log.ddl is missing from the kanal-spark jar: rebuild it");
      }
      return StructType.fromDDL(new String(in.readAllBytes(), StandardCharsets.UTF_8).trim());
    } catch (IOException e) {
      throw new IllegalStateException("cannot read kanal-log.ddl from the kanal-spark jar", e);
    }
  }

  /** The refusal the Python source gives (kanal.spark.batch_only), so both paths say the same. */
  static UnsupportedOperationException refuse(String what) {
    return new UnsupportedOperationException("the " + NAME + " source is batch-only: " + what
        + " is not supported; read it with spark.read.format(\"" + NAME + "\"), or stream and write "
        + "through brokers with format(\"kanal\")");
  }

  static final class LogTable implements SupportsRead, SupportsWrite {
    private final StructType schema;
    private final Map<String, String> options;

    LogTable(StructType schema, Map<String, String> options) {
      this.schema = schema;
      this.options = options;
    }

    @Override
    public String name() {
      return NAME;
    }

    @Override
    public StructType schema() {
      return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
      // Streaming and writes are declared only to be refused with a sentence that names the source:
      // without them Spark's own error reads like a bug in the source.
      return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ,
          TableCapability.BATCH_WRITE, TableCapability.STREAMING_WRITE);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap scanOptions) {
      Map<String, String> all = new HashMap<>(options);
      all.putAll(scanOptions.asCaseSensitiveMap());
      return new LogScanBuilder(schema, all);
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
      return new WriteBuilder() {
        @Override
        public Write build() {
          return new Write() {
            @Override
            public BatchWrite toBatch() {
              throw refuse("writing (df.write)");
            }

            @Override
            public StreamingWrite toStreaming() {
              throw refuse("writing a stream (df.writeStream)");
            }
          };
        }
      };
    }
  }

  static final class LogScanBuilder implements ScanBuilder, SupportsPushDownRequiredColumns {
    private StructType required;
    private final Map<String, String> options;

    LogScanBuilder(StructType schema, Map<String, String> options) {
      this.required = schema;
      this.options = options;
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
      this.required = requiredSchema;
    }

    @Override
    public Scan build() {
      return new LogScan(required, options);
    }
  }

  static final class LogScan implements Scan, Batch {
    private final StructType readSchema;
    private final Map<String, String> options;

    LogScan(StructType readSchema, Map<String, String> options) {
      this.readSchema = readSchema;
      this.options = options;
    }

    @Override
    public StructType readSchema() {
      return readSchema;
    }

    @Override
    public String description() {
      return NAME + " " + options.getOrDefault("path", options.getOrDefault("bootstrap", ""));
    }

    @Override
    public Batch toBatch() {
      return this;
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
      throw refuse("spark.readStream");
    }

    @Override
    public InputPartition[] planInputPartitions() {
      List<String> parts = PythonWorkers.plan(PythonWorkers.pythonExecutable(), options);
      List<InputPartition> out = new ArrayList<>(parts.size());
      for (String p : parts) {
        out.add(new WorkerPartition(p));
      }
      return out.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return new WorkerReaderFactory(PythonWorkers.pythonExecutable(), options, readSchema.fieldNames());
    }
  }

  /** One Spark task's part of the read: the Python InputPartition, pickled (base64). */
  static final class WorkerPartition implements InputPartition {
    private static final long serialVersionUID = 1L;
    final String payload;

    WorkerPartition(String payload) {
      this.payload = payload;
    }
  }
}
