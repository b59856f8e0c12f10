"""Spark: the session, Confluent Avro in the JVM, declared topics as DataFrames, side outputs, Delta sinks and views."""
