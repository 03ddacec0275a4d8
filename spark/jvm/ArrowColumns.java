package kanal.spark.jvm;

import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.vector.BaseFixedWidthVector;
import org.apache.arrow.vector.BaseVariableWidthVector;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.TimeStampVector;
import org.apache.arrow.vector.ValueVector;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.complex.ListVector;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Spark's ArrowColumnVector, with the checks done once per batch instead of once per value.
 *
 * Spark asks isNullAt before every value and then the value; Arrow answers each through bounds- and
 * reference-checked reads of the validity bitmap, the offsets and the data (and its get() checks the
 * bitmap again). In a profile of a 14-column scan into rows, those checks were most of the JVM's time.
 * Here, after each batch is loaded (refresh()): the batch's nulls are counted once, so a column with no
 * null or only nulls answers isNullAt without the bitmap; the buffers' sizes and the offsets of binary,
 * string and list columns are checked whole (rising, inside the data); and values are then read from the
 * buffers' addresses, each read checked only against the batch's row count. (Arrow's validateFull does
 * the offset check too, but through checked reads and with a UTF-8 pass: a fifth of the JVM's time.) Other types (boolean, the headers' struct) go through Spark's accessors as before.
 */
final class ArrowColumns extends ArrowColumnVector {
  private enum Kind { LONG, INT, VARIABLE, LIST, OTHER }

  private final Kind kind;
  private final ArrowColumns elements;  // a list's items
  private int rows;
  private int nulls;
  private long dataAddress;
  private long offsetAddress;

  ArrowColumns(ValueVector vector) {
    super(vector);
    if (vector instanceof BigIntVector || vector instanceof TimeStampVector) {
      kind = Kind.LONG;
    } else if (vector instanceof IntVector) {
      kind = Kind.INT;
    } else if (vector instanceof VarBinaryVector || vector instanceof VarCharVector) {
      kind = Kind.VARIABLE;
    } else if (vector instanceof ListVector) {
      kind = Kind.LIST;
    } else {
      kind = Kind.OTHER;
    }
    elements = kind == Kind.LIST ? new ArrowColumns(((ListVector) vector).getDataVector()) : null;
  }

  void refresh() {
    ValueVector vector = getValueVector();
    rows = vector.getValueCount();
    nulls = vector.getNullCount();
    switch (kind) {
      case LONG:
      case INT:
        ArrowBuf data = ((BaseFixedWidthVector) vector).getDataBuffer();
        require(rows == 0 || data.capacity() >= (kind == Kind.LONG ? 8L : 4L) * rows, "data buffer");
        dataAddress = data.memoryAddress();
        break;
      case VARIABLE:
        BaseVariableWidthVector variable = (BaseVariableWidthVector) vector;
        offsetAddress = checkOffsets(variable.getOffsetBuffer(), variable.getDataBuffer().capacity());
        dataAddress = variable.getDataBuffer().memoryAddress();
        break;
      case LIST:
        ListVector list = (ListVector) vector;
        elements.refresh();
        offsetAddress = checkOffsets(list.getOffsetBuffer(), list.getDataVector().getValueCount());
        break;
      default:
        break;
    }
  }

  /** The offsets' address, once they are known to rise from 0 or more to at most `limit`. */
  private long checkOffsets(ArrowBuf offsets, long limit) {
    if (rows == 0) {
      return 0;
    }
    require(offsets.capacity() >= 4L * (rows + 1), "offset buffer");
    long address = offsets.memoryAddress();
    int previous = Platform.getInt(null, address);
    require(previous >= 0, "first offset");
    for (int i = 1; i <= rows; i++) {
      int next = Platform.getInt(null, address + 4L * i);
      require(next >= previous, "offsets");
      previous = next;
    }
    require(previous <= limit, "last offset");
    return address;
  }

  private void require(boolean ok, String what) {
    if (!ok) {
      throw new IllegalStateException("kanal: a batch from the Python worker has a bad " + what + " in "
          + getValueVector().getField());
    }
  }

  private void check(int rowId) {
    if (rowId < 0 || rowId >= rows) {
      throw new IndexOutOfBoundsException("row " + rowId + " of a batch of " + rows);
    }
  }

  /** Where the row's value starts in the data (binary, string) or in the items (list). */
  private int start(int rowId) {
    check(rowId);
    return Platform.getInt(null, offsetAddress + 4L * rowId);
  }

  @Override
  public boolean hasNull() {
    return nulls > 0;
  }

  @Override
  public int numNulls() {
    return nulls;
  }

  @Override
  public boolean isNullAt(int rowId) {
    if (nulls == 0) {
      return false;
    }
    if (nulls == rows) {
      return true;
    }
    return super.isNullAt(rowId);
  }

  @Override
  public long getLong(int rowId) {
    if (kind != Kind.LONG) {
      return super.getLong(rowId);
    }
    check(rowId);
    return Platform.getLong(null, dataAddress + 8L * rowId);
  }

  @Override
  public int getInt(int rowId) {
    if (kind != Kind.INT) {
      return super.getInt(rowId);
    }
    check(rowId);
    return Platform.getInt(null, dataAddress + 4L * rowId);
  }

  @Override
  public byte[] getBinary(int rowId) {
    if (kind != Kind.VARIABLE) {
      return super.getBinary(rowId);
    }
    int start = start(rowId);
    int end = Platform.getInt(null, offsetAddress + 4L * rowId + 4);
    byte[] out = new byte[end - start];
    Platform.copyMemory(null, dataAddress + start, out, Platform.BYTE_ARRAY_OFFSET, end - start);
    return out;
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    if (kind != Kind.VARIABLE) {
      return super.getUTF8String(rowId);
    }
    int start = start(rowId);
    return UTF8String.fromAddress(null, dataAddress + start,
        Platform.getInt(null, offsetAddress + 4L * rowId + 4) - start);
  }

  @Override
  public ColumnarArray getArray(int rowId) {
    if (kind != Kind.LIST) {
      return super.getArray(rowId);
    }
    int start = start(rowId);
    return new ColumnarArray(elements, start, Platform.getInt(null, offsetAddress + 4L * rowId + 4) - start);
  }
}
