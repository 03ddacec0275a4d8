package kanal.spark.jvm;

import java.io.FilterInputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** Reads one task's part of a kanal source from a Python worker as Arrow batches (PythonWorkers). */
final class WorkerReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;
  private final String python;
  private final String source;
  private final HashMap<String, String> options;
  private final String[] columns;
  private final String schemaJson;  // the columns with their types (KanalSource.schemaJson), or null
  private final ArrayList<HashMap<String, Object>> filters;

  WorkerReaderFactory(String python, String source, Map<String, String> options, String[] columns,
      String schemaJson, ArrayList<HashMap<String, Object>> filters) {
    this.python = python;
    this.source = source;
    this.options = new HashMap<>(options);
    this.columns = columns;
    this.schemaJson = schemaJson;
    this.filters = filters;
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return true;
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    throw new UnsupportedOperationException(source + " reads columnar batches only");
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    return new WorkerReader(python, source, options, columns, schemaJson, filters,
        ((KanalSource.WorkerPartition) partition).payload);
  }

  static final class WorkerReader implements PartitionReader<ColumnarBatch> {
    private final PythonWorkers.Worker worker;
    private final String source;
    private final BufferAllocator allocator = new RootAllocator(Long.MAX_VALUE);
    private final int vectors;
    private ArrowStreamReader reader;
    private ColumnarBatch batch;
    private ArrowColumns[] columns;
    private boolean answered;  // the status line after the stream was read: the worker can be reused

    WorkerReader(String python, String source, Map<String, String> options, String[] columns,
        String schemaJson, List<? extends Map<String, Object>> filters, String payload) {
      this.source = source;
      // A query that needs no column (count()) still needs the rows: ask for the cheapest one and hand
      // Spark batches of no vectors.
      this.vectors = columns.length;
      Map<String, Object> request = new LinkedHashMap<>();
      request.put("op", "read");
      request.put("source", source);
      request.put("options", options);
      request.put("filters", filters);
      request.put("columns", columns.length == 0 ? List.of("offset") : Arrays.asList(columns));  // both have it
      request.put("schema", schemaJson);
      request.put("partition", payload);
      this.worker = PythonWorkers.take(python);
      try {
        worker.send(request);
      } catch (IOException e) {
        worker.destroy();
        allocator.close();
        throw new UncheckedIOException(source + ": cannot send a read to the Python worker", e);
      }
    }

    @Override
    public boolean next() throws IOException {
      if (answered) {
        return false;
      }
      if (reader == null) {
        // The worker's stdout carries the next request's answer after this stream: never close it here.
        reader = new ArrowStreamReader(new FilterInputStream(worker.stdout) {
          @Override
          public void close() {}
        }, allocator);
        VectorSchemaRoot root = reader.getVectorSchemaRoot();
        columns = new ArrowColumns[vectors];
        List<FieldVector> fields = root.getFieldVectors();
        for (int i = 0; i < vectors; i++) {
          columns[i] = new ArrowColumns(fields.get(i));
        }
        batch = new ColumnarBatch(columns);
      }
      if (reader.loadNextBatch()) {
        for (ArrowColumns column : columns) {
          column.refresh();
        }
        batch.setNumRows(reader.getVectorSchemaRoot().getRowCount());
        return true;
      }
      JsonNode status = worker.status();
      answered = true;
      PythonWorkers.failIfError(source, status);
      return false;
    }

    @Override
    public ColumnarBatch get() {
      return batch;
    }

    @Override
    public void close() throws IOException {
      try {
        if (reader != null) {
          reader.close();  // the vectors (the batch only wraps them)
        }
      } finally {
        allocator.close();
        if (answered) {
          PythonWorkers.give(worker);
        } else {
          worker.destroy();
        }
      }
    }
  }
}
