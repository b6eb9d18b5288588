"""The Spark bridge: replay Kafka offset ranges through a stream's transformation into graph loads.

- `range_plan`: which offsets to read, as printable `OffsetRange` values (plain Python).
- `source_options`, `range_reader`, `kafka_source`: the `mgstreams_kafka` PySpark data source
  (options and row schema of Spark's JVM Kafka source; one confluent-kafka reader per range).
- `job`: the backfill job, loading one range, the report (plain Python: no pyspark, no pyarrow).
- `local_engine`: every range in this process; `backfill`: one Spark task per range
  (classic PySpark and Spark Connect); `engine`: which of the two runs a plan (`--engine auto`).
- `bolt_load`: nodes before relationships (folded into UNWIND by the sink), writer slots per host, `--prepare`.
- `spark_session`: classic sessions and Spark Connect (`sc://…`, `local[N]`).
Live streams on Spark Structured Streaming:
- `stream_offsets`: the streaming source's offsets (epochs: a change applied at a micro-batch boundary) and
  the micro-batch planning (admission control); `stream_control`: the control channel (a directory) through
  which changes reach the running query's reader; `stream_reader`: the source's DataSourceStreamReader;
- `micro_batch`: foreachBatch, each partition's share through the transformation into the sink (exactly-once
  by stored offsets); `stream_query`: starting the query, its progress; `spark_runner`: the engine seam's
  StreamRunner (a registered stream run as a query).
`mgstreams backfill` (mgstreams/cli/backfill.py) and its spark-submit entry point
(mgstreams/backfill_main.py) are the application's.

Importing this package imports neither pyspark nor a Kafka client.
"""
