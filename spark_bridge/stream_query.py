"""A stream as a Structured Streaming query: the `mgstreams_kafka` streaming reader, writing on the executors
(stream_source), into `foreachBatch` (which collects the stats rows).

    query = start_stream_query(spark, StreamQuery(...))
    ControlChannel(control_dir).request(change_id, {PartitionKey("orders", 0): 100})   # applied between batches

Works on a classic session (`local[N]`, a cluster master) and under Spark Connect alike (only the DataFrame
and DataSource APIs are used; the server's Python workers must import this package and the transformation).
`progress` reads what describe, metrics and top show of a running query.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .micro_batch import MicroBatchWriter, StreamWriting
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
    """Start the query (the checkpoint decides whether it resumes); returns Spark's StreamingQuery."""
    source = register_writing_source(spark, query.writing)   # each task writes its own range (stream_source)
    frame = spark.readStream.format(source).options(**dict(query.source)).load()
    return (frame.writeStream.foreachBatch(MicroBatchWriter(query.writing)).queryName(query.name)
            .option("checkpointLocation", query.checkpoint).trigger(processingTime=query.trigger).start())


def progress(streaming_query) -> dict:
    """The query's id, run, last batch and its rates: what a Spark stream shows beside the usual fields."""
    last = streaming_query.lastProgress or {}
    exception = streaming_query.exception()
    return {"query_id": str(streaming_query.id), "run_id": str(streaming_query.runId),
            "active": streaming_query.isActive, "last_batch_id": last.get("batchId"),
            "input_rows_per_second": last.get("inputRowsPerSecond"),
            "processed_rows_per_second": last.get("processedRowsPerSecond"),
            "batch_duration_ms": (last.get("durationMs") or {}).get("triggerExecution"),
            "num_input_rows": last.get("numInputRows"),
            "error": str(exception) if exception is not None else None}
