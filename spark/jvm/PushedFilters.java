package kanal.spark.jvm;

import java.sql.Timestamp;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.sources.And;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;

/**
 * Spark's filters as the predicates kanal.spark.pushdown reads: {"column", "op", "value"} or
 * {"column", "op": "in", "values"}, timestamps in microseconds since the epoch. Only comparisons of a
 * pushable column with a literal, and conjunctions of them; anything else is not pushed (Spark still
 * evaluates every filter on the rows read, pushed or not).
 */
final class PushedFilters {
  private PushedFilters() {}

  /** Adds f's predicates to `out` and returns true when the whole of f can be pushed. */
  static boolean collect(Filter f, Set<String> columns, List<HashMap<String, Object>> out) {
    if (f instanceof And) {
      List<HashMap<String, Object>> both = new ArrayList<>();
      if (collect(((And) f).left(), columns, both) && collect(((And) f).right(), columns, both)) {
        out.addAll(both);
        return true;
      }
      return false;
    }
    String column;
    String op;
    Object value;
    if (f instanceof EqualTo) {
      column = ((EqualTo) f).attribute();
      op = "=";
      value = ((EqualTo) f).value();
    } else if (f instanceof GreaterThan) {
      column = ((GreaterThan) f).attribute();
      op = ">";
      value = ((GreaterThan) f).value();
    } else if (f instanceof GreaterThanOrEqual) {
      column = ((GreaterThanOrEqual) f).attribute();
      op = ">=";
      value = ((GreaterThanOrEqual) f).value();
    } else if (f instanceof LessThan) {
      column = ((LessThan) f).attribute();
      op = "<";
      value = ((LessThan) f).value();
    } else if (f instanceof LessThanOrEqual) {
      column = ((LessThanOrEqual) f).attribute();
      op = "<=";
      value = ((LessThanOrEqual) f).value();
    } else if (f instanceof In) {
      column = ((In) f).attribute();
      op = "in";
      value = ((In) f).values();
    } else {
      return false;
    }
    if (!columns.contains(column)) {
      return false;
    }
    HashMap<String, Object> predicate = new HashMap<>();
    predicate.put("column", column);
    predicate.put("op", op);
    if (value instanceof Object[]) {
      ArrayList<Object> values = new ArrayList<>();
      for (Object v : (Object[]) value) {
        Object literal = literal(v);
        if (literal == null) {
          return false;
        }
        values.add(literal);
      }
      predicate.put("values", values);
    } else {
      Object literal = literal(value);
      if (literal == null) {
        return false;
      }
      predicate.put("value", literal);
    }
    out.add(predicate);
    return true;
  }

  /** A JSON-able literal (timestamps as epoch microseconds), or null for one that is not pushed. */
  private static Object literal(Object v) {
    if (v instanceof String || v instanceof Integer || v instanceof Long) {
      return v;
    }
    if (v instanceof Short || v instanceof Byte) {
      return ((Number) v).longValue();
    }
    if (v instanceof Timestamp) {
      Timestamp t = (Timestamp) v;
      return Math.floorDiv(t.getTime(), 1000L) * 1_000_000L + t.getNanos() / 1000;
    }
    if (v instanceof Instant) {
      Instant t = (Instant) v;
      return t.getEpochSecond() * 1_000_000L + t.getNano() / 1000;
    }
    return null;
  }
}
