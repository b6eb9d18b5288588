"""spark-submit entry point: `spark-submit [spark options] mgstreams/backfill_main.py BACKFILL-ARGS...`

Takes the arguments of `mgstreams backfill`; the master, executors and
configuration come from spark-submit. Executors need `spark_bridge`,
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
    from mgstreams.backfill_cli import backfill

    backfill.main(args=sys.argv[1:], prog_name="backfill_main.py")
