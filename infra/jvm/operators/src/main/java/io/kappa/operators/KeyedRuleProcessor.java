package io.kappa.operators;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.function.Supplier;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.StatefulProcessorHandle;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.StructType;
import scala.jdk.javaapi.CollectionConverters;

/**
 * What every operator does around its rule: dead letters (rows with side_kind set, only under the null key)
 * pass through, the key's other rows of the batch are put in log order (kafka_partition, kafka_offset), and
 * the key's state is one byte value in the state store.
 */
abstract class KeyedRuleProcessor extends StatefulProcessor<String, Row, Row> {
  private static final long serialVersionUID = 1L;

  private final SideRows.Columns common; // the log and SIDE columns
  private final int outputWidth;
  private final int sideOut;
  private transient ValueState<byte[]> state;

  /** {@code input}: the schema of the rows the query gives the processor; columns are found in it by name (the
   * log and SIDE columns here, the rule's by the subclass). */
  KeyedRuleProcessor(StructType input, int outputWidth, int sideOut) {
    this.common = new SideRows.Columns(input);
    this.outputWidth = outputWidth;
    this.sideOut = sideOut;
  }

  @Override
  public final void init(OutputMode outputMode, TimeMode timeMode) {
    state = getHandle().getValueState("state", Encoders.BINARY(), TTLConfig.NONE());
    initMore(getHandle());
  }

  /** The key's state variables beside its one value, for a rule that keeps more (none by default). */
  void initMore(StatefulProcessorHandle handle) {}

  @Override
  public final scala.collection.Iterator<Row> handleInputRows(
      String key, scala.collection.Iterator<Row> rows, TimerValues timerValues) {
    List<Row> out = new ArrayList<>();
    byte[] stored =
        handle(key, CollectionConverters.asJava(rows), () -> state.exists() ? state.get() : null, out);
    if (stored != null) {
      state.update(stored);
    }
    return CollectionConverters.asScala(out.iterator());
  }

  /**
   * One key's rows of a batch: dead letters pass through to {@code out}, the others go through the rule in
   * log order. Returns the key's new state, or null when no row reached the rule (the state is then not read).
   */
  final byte[] handle(String key, Iterator<Row> rows, Supplier<byte[]> stored, List<Row> out) {
    List<Row> ruled = common.ruled(rows, out, outputWidth, sideOut);
    if (ruled.isEmpty()) {
      return null;
    }
    // stable: rows at the same position keep Spark's order, as numpy's lexsort does
    ruled.sort(common::compareInLog);
    return apply(key, stored.get(), ruled, out);
  }

  /** An output row's side columns: input row {@code r} set aside as a late record of {@code kind}. */
  final void markLate(Object[] values, String kind, Row r) {
    common.late(values, sideOut, kind, r);
  }

  /** Apply the rule to one key's rows in log order: append what to emit to {@code out}, return the new
   * state ({@code stored} is null for a key seen the first time). */
  abstract byte[] apply(String key, byte[] stored, List<Row> rows, List<Row> out);
}
