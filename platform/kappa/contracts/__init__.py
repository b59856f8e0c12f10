"""What the data looks like: topic declarations, Avro schemas and their registry, the wire format and serde,
data-contract suites, the dead-letter record."""
