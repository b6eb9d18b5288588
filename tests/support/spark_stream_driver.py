"""A Spark stream's driver in a process of its own (a classic local[2] session), for tests that kill it.

    python spark_stream_driver.py SPEC_JSON

SPEC_JSON: {"source": {...the mgstreams_kafka options}, "transform", "sink", "batch_size", "stream",
"exactly_once", "checkpoint"}. It prints `started <query id>` and then runs until killed. Its Spark workers
inherit this process's environment (the pymgclient stand-in's variables and PYTHONPATH, when a test sets them).
"""
from __future__ import annotations

import json
import os
import sys

from pyspark.sql import SparkSession

from spark_bridge.job import Loading
from spark_bridge.micro_batch import StreamWriting
from spark_bridge.spark_session import ensure_worker_python
from spark_bridge.stream_query import StreamQuery, start_stream_query


def main(spec: dict) -> None:
    ensure_worker_python()
    spark = (SparkSession.builder.master("local[2]").appName("mgstreams-stream-driver")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.executorEnv.PYTHONPATH", os.environ.get("PYTHONPATH", "")).getOrCreate())
    writing = StreamWriting(Loading(spec["transform"], (), spec["sink"], batch_size=spec["batch_size"]),
                            spec["stream"], spec["exactly_once"])
    query = start_stream_query(spark, StreamQuery(spec["source"], writing, spec["checkpoint"], spec["stream"]))
    print(f"started {query.id}", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
