"""Avro contracts: schema files, compatibility rules, Confluent wire format in Python and in Spark."""
