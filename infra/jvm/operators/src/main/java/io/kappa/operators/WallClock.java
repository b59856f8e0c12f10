package io.kappa.operators;

import static org.apache.spark.sql.functions.udf;

import org.apache.spark.sql.Column;
import org.apache.spark.sql.api.java.UDF0;
import org.apache.spark.sql.types.DataTypes;

/**
 * The wall clock as a column: milliseconds since the epoch when a row is computed (kappa.spark.clock).
 * Nondeterministic, so the optimizer never folds it into a literal as it does {@code current_timestamp()} in a
 * micro-batch; and compiled into whole-stage code, as {@code reflect()} is not. A live query's generated code is
 * then the same at every batch, and compiles once.
 */
public final class WallClock {
  private WallClock() {}

  public static Column column() {
    return udf((UDF0<Long>) System::currentTimeMillis, DataTypes.LongType)
        .asNondeterministic()
        .withName("kappa_wall_clock_ms")
        .apply();
  }
}
