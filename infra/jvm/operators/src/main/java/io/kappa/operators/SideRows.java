package io.kappa.operators;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * The SIDE columns of kappa.spark.side_outputs, which end every operator's input and output: set on a row the job
 * sets aside (a dead letter of an input, a late record), null otherwise. The timestamp travels as
 * microseconds, so the operators' rows carry no timestamp type.
 */
final class SideRows {
  private SideRows() {}

  static final int WIDTH = 10;
  private static final StructField[] SIDE = {
    field("side_kind", DataTypes.StringType),
    field("side_message", DataTypes.StringType),
    field("side_key", DataTypes.BinaryType),
    field("side_value", DataTypes.BinaryType),
    field("side_topic", DataTypes.StringType),
    field("side_partition", DataTypes.IntegerType),
    field("side_offset", DataTypes.LongType),
    field("side_timestamp_us", DataTypes.LongType),
    field("side_broken", DataTypes.StringType),
    field("side_suite", DataTypes.StringType),
  };
  // Positions within the SIDE columns.
  static final int KIND = 0, MESSAGE = 1, VALUE = 3, TOPIC = 4, PARTITION = 5, OFFSET = 6;

  static StructField field(String name, DataType type) {
    return DataTypes.createStructField(name, type, true);
  }

  /** {@code fields}, then the SIDE columns. */
  static StructType withSide(List<StructField> fields) {
    StructField[] all = new StructField[fields.size() + SIDE.length];
    fields.toArray(all);
    System.arraycopy(SIDE, 0, all, fields.size(), SIDE.length);
    return DataTypes.createStructType(all);
  }

  /** A row's side values as an output row of {@code width} columns, every other column null: for the rows
   * one step of an operator gives the next, whose SIDE columns follow each other from {@code sideIn}. */
  static Row passThrough(Row r, int sideIn, int width, int sideOut) {
    Object[] values = new Object[width];
    for (int i = 0; i < WIDTH; i++) {
      values[sideOut + i] = r.get(sideIn + i);
    }
    return RowFactory.create(values);
  }

  /**
   * The columns of an operator's input that are not its rule's: the SIDE columns and the record's place in the
   * log (kafka_partition, kafka_offset; kafka_topic and raw_value where the input has them, for the records
   * an operator sets aside). Found by name once, when the query is built (on the driver); rows are then read
   * by position.
   */
  static final class Columns implements Serializable {
    private static final long serialVersionUID = 1L;

    private final int[] side = new int[WIDTH]; // in SIDE order
    private final int partition, offset;
    private final int topic, raw; // -1: the input has none (its operator sets no record aside)

    Columns(StructType input) {
      for (int i = 0; i < WIDTH; i++) {
        side[i] = input.fieldIndex(SIDE[i].name());
      }
      partition = input.fieldIndex("kafka_partition");
      offset = input.fieldIndex("kafka_offset");
      List<String> names = Arrays.asList(input.fieldNames());
      topic = names.indexOf("kafka_topic");
      raw = names.indexOf("raw_value");
    }

    /**
     * The rows for the rule, in the order given; the others (the rows set aside before: side_kind set) go to
     * {@code out} as output rows of {@code width} columns with their side values from {@code sideOut}.
     */
    List<Row> ruled(Iterator<Row> rows, List<Row> out, int width, int sideOut) {
      List<Row> ruled = new ArrayList<>();
      while (rows.hasNext()) {
        Row row = rows.next();
        if (row.isNullAt(side[KIND])) {
          ruled.add(row);
        } else {
          out.add(passThrough(row, width, sideOut));
        }
      }
      return ruled;
    }

    /** Whether {@code r} was set aside before the operator (its side_kind is set). */
    boolean isSetAside(Row r) {
      return !r.isNullAt(side[KIND]);
    }

    /** {@code r}'s side values as an output row of {@code width} columns, every other column null. */
    Row passThrough(Row r, int width, int sideOut) {
      Object[] values = new Object[width];
      for (int i = 0; i < WIDTH; i++) {
        values[sideOut + i] = r.get(side[i]);
      }
      return RowFactory.create(values);
    }

    /** The record's offset in its partition. */
    long offset(Row r) {
      return r.getLong(offset);
    }

    /** Log order: (kafka_partition, kafka_offset). */
    int compareInLog(Row a, Row b) {
      int byPartition = Integer.compare(a.getInt(partition), b.getInt(partition));
      return byPartition != 0 ? byPartition : Long.compare(a.getLong(offset), b.getLong(offset));
    }

    /** Sets {@code values}' side columns (from {@code sideOut}): {@code r} set aside as a late record of
     * {@code kind}, with its own bytes and place in the log. */
    void late(Object[] values, int sideOut, String kind, Row r) {
      if (topic < 0 || raw < 0) {
        throw new IllegalStateException("an input without kafka_topic and raw_value sets no record aside");
      }
      values[sideOut + KIND] = kind;
      values[sideOut + VALUE] = r.get(raw);
      values[sideOut + TOPIC] = r.getString(topic);
      values[sideOut + PARTITION] = r.getInt(partition);
      values[sideOut + OFFSET] = r.getLong(offset);
    }
  }

  /**
   * Checks an operator's input against its schema with a clear message: the same column names, each of the
   * same type (ignoring nullability), in any order. The operators find their columns by name
   * ({@link StructType#fieldIndex}) when the query is built, never by position.
   */
  static void check(String operator, StructType expected, StructType actual) {
    List<String> problems = new ArrayList<>();
    Map<String, StructField> given = new HashMap<>();
    for (StructField got : actual.fields()) {
      if (given.put(got.name(), got) != null) {
        problems.add("two columns " + got.name());
      }
    }
    Set<String> wanted = new HashSet<>();
    for (StructField want : expected.fields()) {
      wanted.add(want.name());
      StructField got = given.get(want.name());
      if (got == null) {
        problems.add("no column " + want.name());
      } else if (!got.dataType().sameType(want.dataType())) {
        problems.add(want.name() + " is " + got.dataType().simpleString() + ", not " + want.dataType().simpleString());
      }
    }
    for (StructField got : actual.fields()) {
      if (!wanted.contains(got.name())) {
        problems.add("an unexpected column " + got.name());
      }
    }
    if (!problems.isEmpty()) {
      throw new IllegalArgumentException(
          operator + "'s input must be " + expected.toDDL() + " (in any order): " + String.join("; ", problems)
              + "; got " + actual.toDDL());
    }
  }
}
