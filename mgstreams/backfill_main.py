"""spark-submit entry point: `spark-submit [spark options] mgstreams/backfill_main.py BACKFILL-ARGS...`

Takes the arguments of `mgstreams backfill`; the master, executors and
configuration come from spark-submit, and the engine is Spark unless the
arguments say otherwise (`--engine auto` lets the plan's size decide). Executors need `spark_bridge`,
`stream_registry` and `mgstreams` (and the transformation's module) importable: install the
package on the cluster's Python, or ship a zip with `--py-files`.
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    try:
        import mgstreams  # noqa: F401
    except ImportError:  # run from a checkout: spark-submit puts this file's directory on sys.path
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from mgstreams.cli.backfill import backfill

    args = sys.argv[1:]
    if not any(a == "--engine" or a.startswith("--engine=") for a in args):
        args = ["--engine", "spark", *args]   # spark-submit was asked to run Spark
    backfill.main(args=args, prog_name="backfill_main.py")
