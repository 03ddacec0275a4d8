package kanal.spark.jvm;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedDeque;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.SparkEnv;

/**
 * kanal's Python worker processes (`python -m kanal.spark.jvm_worker`), kept for reuse within this JVM.
 *
 * A worker takes one request at a time, a JSON line on its stdin, and answers on its stdout:
 *
 *   {"op": "plan", "source": "kanal-log", "options": {...}, "filters": [...], "schema": ...}
 *                                                             -> a status line
 *   {"op": "read", "source": ..., "options": {...}, "filters": [...], "columns": [...],
 *    "schema": ..., "partition": "<base64 pickle>"}
 *                                                             -> an Arrow IPC stream, then a status line
 *   {"op": "schema", "source": ..., "options": {...}}           -> a status line with "schema"
 *
 * ("filters": the pushed predicates, PushedFilters / kanal.spark.pushdown; "schema" in a plan or read:
 * the columns wanted as Spark's JSON, or null; in a schema answer: the full schema these options give,
 * or null for the jar's `.ddl`.)
 *
 * A status line is JSON: {"ok": true, ...} or {"ok": false, "error": "<Python type>: <message>"}. The IPC
 * stream always ends with its end-of-stream marker, also when the read failed part way, so the status
 * line that follows is where the next read begins and the worker stays usable. A worker whose answer was
 * not read to the end (a task killed, an I/O error) is destroyed, never reused.
 *
 * Starting Python and importing pyarrow and kanal costs about a second; one worker per concurrent task,
 * reused, pays it once per executor core, as Spark's own Python workers do. Idle workers exit when this
 * JVM does: their stdin closes.
 */
final class PythonWorkers {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Map<String, ConcurrentLinkedDeque<Worker>> IDLE = new ConcurrentHashMap<>();

  static {
    // Idle workers would exit on their own when this JVM's end closes their stdin; ending them here too
    // keeps a stopped JVM from leaving any for the moment that takes.
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      for (ConcurrentLinkedDeque<Worker> idle : IDLE.values()) {
        for (Worker w = idle.pollFirst(); w != null; w = idle.pollFirst()) {
          w.destroy();
        }
      }
    }, "kanal-python-workers-stop"));
  }

  private PythonWorkers() {}

  /** The Python a read runs: Spark's own choice for its Python workers (spark.pyspark.python, then
   *  PYSPARK_PYTHON), else python3. */
  static String pythonExecutable() {
    SparkEnv env = SparkEnv.get();
    String conf = env == null ? null : env.conf().get("spark.pyspark.python", null);
    if (conf != null && !conf.isEmpty()) {
      return conf;
    }
    String fromEnv = System.getenv("PYSPARK_PYTHON");
    return fromEnv != null && !fromEnv.isEmpty() ? fromEnv : "python3";
  }

  /** The Python reader's partitions() for these options, each a base64 pickle. */
  static List<String> plan(String python, String source, Map<String, String> options,
      List<? extends Map<String, Object>> filters, String schemaJson) {
    Map<String, Object> request = new LinkedHashMap<>();
    request.put("op", "plan");
    request.put("source", source);
    request.put("filters", filters);
    request.put("options", options);
    request.put("schema", schemaJson);
    JsonNode status = ask(python, source, request, "planner");
    List<String> parts = new ArrayList<>();
    for (JsonNode p : status.get("partitions")) {
      parts.add(p.asText());
    }
    return parts;
  }

  /** The full schema these options give the source (Spark's JSON), or null for the jar's `.ddl`. */
  static String schema(String python, String source, Map<String, String> options) {
    Map<String, Object> request = new LinkedHashMap<>();
    request.put("op", "schema");
    request.put("source", source);
    request.put("options", options);
    JsonNode schema = ask(python, source, request, "schema").path("schema");
    return schema.isTextual() ? schema.asText() : null;
  }

  /** One request answered by a status line alone; the error it carries raised. */
  private static JsonNode ask(String python, String source, Map<String, Object> request, String what) {
    Worker worker = take(python);
    JsonNode status;
    try {
      worker.send(request);
      status = worker.status();
    } catch (IOException e) {
      worker.destroy();
      throw new UncheckedIOException(source + ": the Python " + what + " failed: " + e.getMessage(), e);
    }
    give(worker);
    failIfError(source, status);
    return status;
  }

  static void failIfError(String source, JsonNode status) {
    if (!status.path("ok").asBoolean(false)) {
      String error = status.path("error").asText("no error text");
      if (error.startsWith("ValueError: ")) {
        throw new IllegalArgumentException(source + ": " + error);
      }
      throw new KanalReadException(source + ": " + error);
    }
  }

  static Worker take(String python) {
    ConcurrentLinkedDeque<Worker> idle = IDLE.computeIfAbsent(python, k -> new ConcurrentLinkedDeque<>());
    for (Worker w = idle.pollFirst(); w != null; w = idle.pollFirst()) {
      if (w.process.isAlive()) {
        return w;
      }
      w.destroy();
    }
    try {
      return new Worker(python);
    } catch (IOException e) {
      throw new UncheckedIOException("kanal's Spark sources: cannot start " + python + " -m kanal.spark.jvm_worker "
          + "(is kanal installed in the executors' Python?): " + e.getMessage(), e);
    }
  }

  static void give(Worker worker) {
    if (worker.process.isAlive()) {
      IDLE.computeIfAbsent(worker.python, k -> new ConcurrentLinkedDeque<>()).offerFirst(worker);
    } else {
      worker.destroy();
    }
  }

  /** An error the Python reader raised (a FAILFAST read of missing offsets, a cluster that cannot be read). */
  static final class KanalReadException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    KanalReadException(String message) {
      super(message);
    }
  }

  static final class Worker {
    final String python;
    final Process process;
    final OutputStream stdin;
    final BufferedInputStream stdout;

    Worker(String python) throws IOException {
      this.python = python;
      ProcessBuilder builder = new ProcessBuilder(python, "-m", "kanal.spark.jvm_worker");
      builder.redirectError(ProcessBuilder.Redirect.INHERIT);
      this.process = builder.start();
      this.stdin = new BufferedOutputStream(process.getOutputStream());
      this.stdout = new BufferedInputStream(process.getInputStream(), 1 << 16);
    }

    void send(Map<String, Object> request) throws IOException {
      stdin.write(JSON.writeValueAsBytes(request));
      stdin.write('\n');
      stdin.flush();
    }

    JsonNode status() throws IOException {
      ByteArrayOutputStream line = new ByteArrayOutputStream();
      for (int b = stdout.read(); b != '\n'; b = stdout.read()) {
        if (b < 0) {
          throw new IOException("kanal's Python worker (" + python + " -m kanal.spark.jvm_worker) exited"
              + exitNote() + "; its stderr is in this executor's log");
        }
        line.write(b);
      }
      return JSON.readTree(line.toByteArray());
    }

    private String exitNote() {
      try {
        if (process.waitFor(1, java.util.concurrent.TimeUnit.SECONDS)) {
          return " with status " + process.exitValue();
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      return "";
    }

    void destroy() {
      process.destroyForcibly();
    }
  }
}
