"""A stream as a Structured Streaming query: the `mgstreams_kafka` streaming reader, whose tasks write their
ranges on the executors (stream_source), into the `noop` sink.

    query = start_stream_query(spark, StreamQuery(...))
    ControlChannel(control_dir).request(change_id, {PartitionKey("orders", 0): 100})   # applied between batches

Works on a classic session (`local[N]`, a cluster master) and under Spark Connect alike (only the DataFrame
and DataSource APIs are used; the server's Python workers must import this package and the transformation).
`progress` reads what describe, metrics and top show of a running query.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .micro_batch import StreamWriting
from .stream_offsets import offsets_read
from .stream_source import register_writing_source


@dataclass(frozen=True)
class StreamQuery:
    """One Spark stream: the source's options (kafka.*, subscribe, startingOffsets, maxOffsetsPerTrigger,
    controlDir, resumeFrom, sink, sinkStream), what each micro-batch does, where the checkpoint lives and how
    often a micro-batch is planned."""
    source: Mapping[str, str] = field(repr=False)
    writing: StreamWriting
    checkpoint: str
    name: str
    trigger: str = "0 seconds"


def start_stream_query(spark, query: StreamQuery):
    """Start the query (the checkpoint decides whether it resumes); returns Spark's StreamingQuery. Each
    micro-batch's tasks read, transform and write their ranges (stream_source); its output, one stats row per
    range, goes to the `noop` sink (no foreachBatch: no Python process per query on the driver or the Connect
    server, and nothing but the ranges and the stats crosses the JVM)."""
    source = register_writing_source(spark, query.writing)
    frame = spark.readStream.format(source).options(**dict(query.source)).load()
    return (frame.writeStream.format("noop").queryName(query.name)
            .option("checkpointLocation", query.checkpoint).trigger(processingTime=query.trigger).start())


def progress(streaming_query) -> dict:
    """The query's id, run, last batch and its rates: what a Spark stream shows beside the usual fields. Rows
    are records (Kafka offsets read): Spark's own counts are the stats rows, one per range (stream_offsets)."""
    last = streaming_query.lastProgress or {}
    exception = streaming_query.exception()
    sources = last.get("sources") or [{}]
    records = offsets_read(sources[0].get("startOffset"), sources[0].get("endOffset"))
    rows = last.get("numInputRows")

    def per_record(rate):
        if rate is None or not rows:
            return rate
        return rate * records / rows if records is not None else None
    return {"query_id": str(streaming_query.id), "run_id": str(streaming_query.runId),
            "active": streaming_query.isActive, "last_batch_id": last.get("batchId"),
            "input_rows_per_second": per_record(last.get("inputRowsPerSecond")),
            "processed_rows_per_second": per_record(last.get("processedRowsPerSecond")),
            "batch_duration_ms": (last.get("durationMs") or {}).get("triggerExecution"),
            "num_input_rows": records if rows else rows,
            "error": str(exception) if exception is not None else None}
