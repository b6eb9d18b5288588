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
from ..samples import generate_transfers
from .calls import offset_change, partition_offsets, run_cli, stream_row
from .checks import (
    check_backfill_matches_live,
    check_backfill_range,
    check_first_delivered,
    check_history,
    check_offsets,
    check_produced,
    check_race,
    check_rewind,
)
from .command import demonstrate, main
from .graph import clear_graph, read_graph
from .printing import RichReporter, print_outputs, shown_path
from .records import normalize, read_cypherl
from .reporter import Reporter
from .results import BackfillResult, Check, DemoResult, Produced, RaceResult, Record, RewindResult
from .run import run_demo, shut_down
from .settings import SCHEMA, TRANSFORM, DemoSettings
from .steps import (
    backfill_job,
    create_stream,
    live_records,
    prepare_out,
    produce_transfers,
    report_produced,
    rewind_running,
    run_backfill_step,
    start_and_set_offset,
    wait_caught_up,
)

__all__ = [
    "SCHEMA", "TRANSFORM", "BackfillResult", "Check", "DemoResult", "DemoSettings", "Produced", "RaceResult",
    "Record", "Reporter", "RewindResult", "RichReporter", "backfill_job", "check_backfill_matches_live",
    "check_backfill_range", "check_first_delivered", "check_history", "check_offsets", "check_produced",
    "check_race", "check_rewind", "clear_graph", "create_stream", "demonstrate", "generate_transfers",
    "live_records", "main", "normalize", "offset_change", "partition_offsets", "prepare_out", "print_outputs",
    "produce_transfers", "read_cypherl", "read_graph", "report_produced", "rewind_running", "run_backfill_step",
    "run_cli", "run_demo", "shown_path", "shut_down", "start_and_set_offset", "stream_row", "wait_caught_up",
]
