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
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * kanal's file sources on the JVM (`kanal-log`: LogSource, `kanal-metadata`: MetadataSource): DataSource
 * V2 tables with column pruning and columnar reads, whose rows are made by kanal's Python readers
 * (kanal.spark.log_source, kanal.spark.metadata_source) in worker processes (PythonWorkers).
 *
 * Why a JVM table at all: PySpark's Python data source API has no column pruning and turns every Arrow
 * batch into rows, copying each column (docs/benchmarks.md, Spark sources); here the scan hands Spark the
 * worker's Arrow vectors as they are, and builds only the columns a query uses. What the rows are (the
 * committed-copy plan, stand-ins for damage, notices, read_committed, Fetch) stays in Python, once: the
 * planner's InputPartitions and the reader's batches are the same objects as the Python source's.
 *
 * A source's full schema is its Python table's (kanal.spark.columns), written into the jar as
 * `<name>.ddl` when it is built (kanal.spark.jvm_jar); a user schema must name its columns with those
 * types. Where options shape the schema (kanal-log's decoded keys and values, whose types are the
 * registry's reader schemas: kanal.spark.decoded_columns), a worker says it (`schema`), and plans and reads
 * carry the schema wanted, so the Python reader builds those very types. A stream (kanal-metadata's) is the Python source's own stream reader, reached through Spark's
 * Python data source table under the name `<name>-python`.
 */
public abstract class KanalSource implements TableProvider, DataSourceRegister {
  /** The format name; also the Python source the worker runs, and the .ddl resource's name. */
  abstract String name();

  /** What the refusals call the source: "batch-only" or "read-only" (as kanal.spark.batch_only). */
  abstract String kind();

  /** Whether readStream is the Python source's stream (else refused). */
  abstract boolean streams();

  /** The columns whose predicates narrow a read (kanal.spark.pushdown). */
  abstract Set<String> pushable();

  /** Whether these options change the full schema (then the Python source says what it is). */
  boolean shapesSchema(Map<String, String> options) {
    return false;
  }

  /** The schema inferSchema gave, for getTable's check of the same DataFrame (Spark calls both on one
   *  provider instance): asking the worker again could meet a newer reader schema. */
  private StructType inferred;

  @Override
  public String shortName() {
    return name();
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    inferred = fullSchema(options.asCaseSensitiveMap());
    return inferred;
  }

  /** The full schema for these options: the jar's `.ddl`, or the Python source's answer. */
  StructType fullSchema(Map<String, String> options) {
    if (!shapesSchema(options)) {
      return ddlSchema(name());
    }
    String json = PythonWorkers.schema(PythonWorkers.pythonExecutable(), name(), options);
    return json == null ? ddlSchema(name()) : (StructType) DataType.fromJson(json);
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    StructType full = inferred != null ? inferred : fullSchema(properties);
    return new SourceTable(this, schema, schemaProblem(schema, full), new HashMap<>(properties));
  }

  /** Why a user schema cannot be read (a column this source lacks, or has with another type), or null.
   *  Told when a read is planned, not here: a write is refused first, whatever the DataFrame's columns. */
  String schemaProblem(StructType schema, StructType full) {
    Map<String, StructField> byName = new HashMap<>();
    for (StructField f : full.fields()) {
      byName.put(f.name(), f);
    }
    for (StructField f : schema.fields()) {
      StructField known = byName.get(f.name());
      if (known == null) {
        return "unknown columns [" + f.name() + "]; " + name() + " has " + String.join(", ", full.fieldNames());
      }
      if (!known.dataType().sameType(f.dataType())) {
        return name() + "'s column " + f.name() + " is " + known.dataType().simpleString() + ", not "
            + f.dataType().simpleString();
      }
    }
    return null;
  }

  static StructType ddlSchema(String name) {
    try (InputStream in = KanalSource.class.getResourceAsStream("/" + name + ".ddl")) {
      if (in == null) {
        throw new IllegalStateException(name + ".ddl is missing from the kanal-spark jar: rebuild it");
      }
      return StructType.fromDDL(new String(in.readAllBytes(), StandardCharsets.UTF_8).trim());
    } catch (IOException e) {
      throw new IllegalStateException("cannot read " + name + ".ddl from the kanal-spark jar", e);
    }
  }

  /** The refusal the Python source gives (kanal.spark.batch_only), so both paths say the same. */
  UnsupportedOperationException refuse(String what) {
    return new UnsupportedOperationException("the " + name() + " source is " + kind() + ": " + what
        + " is not supported; read it with spark.read.format(\"" + name() + "\"), or stream and write "
        + "through brokers with format(\"kanal\")");
  }

  static final class SourceTable implements SupportsRead, SupportsWrite {
    private final KanalSource source;
    private final StructType schema;
    private final String schemaProblem;
    private final Map<String, String> options;

    SourceTable(KanalSource source, StructType schema, String schemaProblem, Map<String, String> options) {
      this.source = source;
      this.schema = schema;
      this.schemaProblem = schemaProblem;
      this.options = options;
    }

    @Override
    public String name() {
      return source.name();
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
      if (schemaProblem != null) {
        throw new IllegalArgumentException(schemaProblem);
      }
      Map<String, String> all = new HashMap<>(options);
      all.putAll(scanOptions.asCaseSensitiveMap());
      return new SourceScanBuilder(source, schema, all);
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
      return new WriteBuilder() {
        @Override
        public Write build() {
          return new Write() {
            @Override
            public BatchWrite toBatch() {
              throw source.refuse("writing (df.write)");
            }

            @Override
            public StreamingWrite toStreaming() {
              throw source.refuse("writing a stream (df.writeStream)");
            }
          };
        }
      };
    }
  }

  static final class SourceScanBuilder
      implements ScanBuilder, SupportsPushDownRequiredColumns, SupportsPushDownFilters {
    private final KanalSource source;
    private final StructType schema;
    private StructType required;
    private final Map<String, String> options;
    private Filter[] pushed = new Filter[0];
    private final ArrayList<HashMap<String, Object>> predicates = new ArrayList<>();

    SourceScanBuilder(KanalSource source, StructType schema, Map<String, String> options) {
      this.source = source;
      this.schema = schema;
      this.required = schema;
      this.options = options;
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
      this.required = requiredSchema;
    }

    /** Keeps the predicates kanal.spark.pushdown can narrow a read with, and gives every filter back:
     *  Spark evaluates them all on the rows read, so a pushed one only has to keep the rows it passes. */
    @Override
    public Filter[] pushFilters(Filter[] filters) {
      List<Filter> kept = new ArrayList<>();
      for (Filter f : filters) {
        List<HashMap<String, Object>> found = new ArrayList<>();
        if (PushedFilters.collect(f, source.pushable(), found)) {
          kept.add(f);
          predicates.addAll(found);
        }
      }
      pushed = kept.toArray(new Filter[0]);
      return filters;
    }

    @Override
    public Filter[] pushedFilters() {
      return pushed;
    }

    @Override
    public Scan build() {
      return new SourceScan(source, schema, required, options, predicates, pushed);
    }
  }

  static final class SourceScan implements Scan, Batch {
    private final KanalSource source;
    private final StructType schema;
    private final StructType readSchema;
    private final Map<String, String> options;
    private final ArrayList<HashMap<String, Object>> predicates;
    private final Filter[] pushed;

    SourceScan(KanalSource source, StructType schema, StructType readSchema, Map<String, String> options,
        ArrayList<HashMap<String, Object>> predicates, Filter[] pushed) {
      this.source = source;
      this.schema = schema;
      this.readSchema = readSchema;
      this.options = options;
      this.predicates = predicates;
      this.pushed = pushed;
    }

    @Override
    public StructType readSchema() {
      return readSchema;
    }

    @Override
    public String description() {
      return source.name() + " " + options.getOrDefault("path", options.getOrDefault("bootstrap", ""))
          + " PushedFilters: " + java.util.Arrays.toString(pushed);
    }

    @Override
    public Batch toBatch() {
      return this;
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
      if (!source.streams()) {
        throw source.refuse("spark.readStream");
      }
      // The Python source's own stream: Spark's table for a Python data source, under the name the
      // session registered the Python class as (kanal.spark.session.register_sources).
      PythonDataSourceV2 python = new PythonDataSourceV2();
      python.setShortName(source.name() + "-python");
      SupportsRead table = (SupportsRead) python.getTable(schema, new Transform[0], options);
      return table.newScanBuilder(new CaseInsensitiveStringMap(options)).build()
          .toMicroBatchStream(checkpointLocation);
    }

    @Override
    public InputPartition[] planInputPartitions() {
      List<String> parts = PythonWorkers.plan(PythonWorkers.pythonExecutable(), source.name(), options,
          predicates, readSchema.json());
      List<InputPartition> out = new ArrayList<>(parts.size());
      for (String p : parts) {
        out.add(new WorkerPartition(p));
      }
      return out.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return new WorkerReaderFactory(PythonWorkers.pythonExecutable(), source.name(), options,
          readSchema.fieldNames(), schemaJson(readSchema), predicates);
    }
  }

  /** The columns a scan's reads want as Spark's JSON, for the worker to build their types from; null for
   *  none (a count(): the worker reads its cheapest column). A plan sends the read schema as it is: with
   *  no column, nothing is decoded. */
  static String schemaJson(StructType readSchema) {
    return readSchema.fields().length == 0 ? null : readSchema.json();
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
