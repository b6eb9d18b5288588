"""Getting a SparkSession for the backfill CLI and the benchmark.

Under `spark-submit` the master and configuration come from spark-submit;
from a plain `python`/`mgstreams` process the master defaults to `local[*]`.
An `sc://host:port` master means Spark Connect (needs `pyspark[connect]`).
"""
from __future__ import annotations

import os
import sys
from typing import Mapping


def ensure_worker_python() -> None:
    """Make Spark's Python workers run this interpreter (and so see this venv's packages).

    PySpark starts workers with $PYSPARK_PYTHON, else `python3` from PATH, which
    need not be the interpreter that has pyspark, pyarrow and this package.
    Must run before the SparkContext is created; an explicit setting wins.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def build_session(master: str | None = None, app_name: str = "mgstreams-backfill",
                  conf: Mapping[str, str] | None = None):
    from pyspark.sql import SparkSession

    if master and master.startswith("sc://"):
        return SparkSession.builder.remote(master).appName(app_name).getOrCreate()
    ensure_worker_python()
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif not under_spark_submit():
        builder = builder.master("local[*]")
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def under_spark_submit() -> bool:
    """True in a driver launched by spark-submit (its JVM is already running, with the master set)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ
