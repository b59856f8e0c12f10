package io.kappa.operators;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
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
  static final int KIND = 0, VALUE = 3, TOPIC = 4, PARTITION = 5, OFFSET = 6;

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

  /** Where the SIDE columns are in {@code input} (by name, in SIDE order): found once, when a query is built. */
  static int[] positions(StructType input) {
    int[] at = new int[WIDTH];
    for (int i = 0; i < WIDTH; i++) {
      at[i] = input.fieldIndex(SIDE[i].name());
    }
    return at;
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

  /** An input row's side values (at {@code sideIn}) as an output row of {@code width} columns, every other
   * column null. */
  static Row passThrough(Row r, int[] sideIn, int width, int sideOut) {
    Object[] values = new Object[width];
    for (int i = 0; i < WIDTH; i++) {
      values[sideOut + i] = r.get(sideIn[i]);
    }
    return RowFactory.create(values);
  }

  /** Set a record's side values: a late record of {@code kind}, with its original bytes and position. */
  static void late(Object[] values, int sideOut, String kind, Object raw, String topic, int partition, long offset) {
    values[sideOut + KIND] = kind;
    values[sideOut + VALUE] = raw;
    values[sideOut + TOPIC] = topic;
    values[sideOut + PARTITION] = partition;
    values[sideOut + OFFSET] = offset;
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
