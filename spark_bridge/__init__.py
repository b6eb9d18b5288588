"""The Spark bridge: replay Kafka offset ranges through a stream's transformation into graph loads.

- `range_plan`: which offsets to read, as printable `OffsetRange` values (plain Python).
- `source_options`, `range_reader`, `kafka_source`: the `mgstreams_kafka` PySpark data source
  (options and row schema of Spark's JVM Kafka source; one confluent-kafka reader per range).
- `backfill`, `cli`, `backfill_main`: the backfill job, `mgstreams backfill` and its
  spark-submit entry point.

Importing this package imports neither pyspark nor a Kafka client.
"""
