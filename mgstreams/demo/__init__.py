"""`python -m mgstreams.demo --out demo-out`: the main job end to end, driven as its users drive it.

1. start a 3-broker embedded Kafka cluster and a stream host (`mgstreams serve`
   in a child process, state in `<out>/state`); produce a seeded account-transfer
   stream (6 partitions, keyed by source account);
2. `CALL streams.create`: stream `transfers` runs `transfers.transfer` into
   `<out>/live.cypherl` (or into Memgraph over Bolt when MEMGRAPH_URI is set);
3. `CALL streams.start`, then at once `CALL streams.set_stream_offset`, while the
   group has assigned nothing (the rebalance race); then again while running
   (rewind two partitions);
4. `mgstreams describe` and `mgstreams history`: the operator's CLI against the
   same host, checked against `CALL streams.offsets` / `streams.history`;
5. backfill `[backfill_from, committed)` with Spark into `<out>/backfill/` and
   compare its statements with the live ones over the overlapping offsets;
6. `CALL streams.stop`, then SIGTERM to the host, which must exit 0;
7. say where everything is and how to load it into Memgraph.

Cypher goes through the query module file itself (`query_modules/streams.py`,
loaded as Memgraph loads it: a thin HTTP client of the host), each call printed
as the `CALL streams.…` it stands for.

The modules: settings (what a run is told), results (what steps return, the
checks), steps (1 to 5, each a function returning data), checks (pure), calls
(the operator's CLI, the procedures' rows), records and graph (reading what the
cypherl files or Memgraph hold), run (`run_demo`: the host, the steps in order,
the shutdown), reporter (silent: tests/test_demo_e2e.py runs the same path and
asserts each `Check`), printing (the rich reporter) and command (the click
command `main`, which exits 1 if a check failed).
"""
from .command import main
from .reporter import Reporter
from .results import Check, DemoResult
from .run import run_demo
from .settings import DemoSettings

__all__ = ["Check", "DemoResult", "DemoSettings", "Reporter", "main", "run_demo"]
