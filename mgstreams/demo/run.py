"""The whole run: spawn the stream host, chain the steps and their checks, shut the host down in any case.

The one place the demo starts a host process (the launcher is imported here only).
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable

from stream_registry import StreamError
from stream_registry.graph.sinks import OUTPUT_DIRS_ENV

from ..host_process import HostProcess
from ..query_module import QueryModule
from ..samples import generate_transfers
from .calls import partition_offsets, run_cli, stream_row
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
from .records import read_cypherl
from .reporter import SILENT, Reporter
from .results import Check, DemoResult
from .settings import DemoSettings
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


def run_demo(settings: DemoSettings, bootstrap_servers: str, spark_factory: Callable[[], object],
             reporter: Reporter = SILENT) -> DemoResult:
    """Steps 1 (producing) to 6, on a cluster where `settings.topic` exists. A step that raises
    becomes a failed check and ends the run; the stream is stopped and the host terminated in any case."""
    result = DemoResult(settings)

    def add(check: Check) -> Check:
        result.checks.append(check)
        reporter.check(check)
        return check

    prepare_out(settings)
    # The live sink, <out>/live.cypherl, is outside the host's default output directory (<state>/output).
    output_dirs = os.pathsep.join(filter(None, (os.environ.get(OUTPUT_DIRS_ENV), str(settings.out_dir))))
    host = HostProcess(settings.state_dir, log_path=settings.host_log,
                       env={OUTPUT_DIRS_ENV: output_dirs}).spawn()   # imports while we produce
    streams: QueryModule | None = None
    step = "produce"
    try:
        transfers = generate_transfers(settings.seed, settings.events, settings.accounts)
        result.produced = produced = produce_transfers(bootstrap_servers, settings.topic, transfers,
                                                       configs=settings.producer_configs)
        report_produced(produced, reporter)
        if not add(check_produced(produced, settings)).ok:
            return result

        step = "create stream"
        result.host_url = url = host.wait_ready()
        reporter.step(2, "a stream that builds the graph, created from Cypher")
        reporter.say(f"stream host: `mgstreams serve` (pid {host.proc.pid}) at {url}; "
                     f"the query module {settings.query_module.name} calls it (MGSTREAMS_URL)")
        # the module sends the token the host generated in its state directory (host.token read it there)
        streams = QueryModule(settings.query_module, url, token=host.token, on_call=reporter.call).open()
        create_stream(streams, settings, bootstrap_servers, reporter)

        step = "rebalance race"
        reporter.step(3, "set_stream_offset during the rebalance, then while running")
        result.race = start_and_set_offset(streams, settings, reporter)
        add(check_race(result.race))
        wait_caught_up(streams, settings.stream, produced.log_end, settings.timeout_s)
        live = live_records(settings)
        add(check_first_delivered(live, produced, settings.live_from, settings.bolt))

        step = "rewind while running"
        result.rewind = rewind_running(streams, settings, len(live), reporter)
        wait_caught_up(streams, settings.stream, produced.log_end, settings.timeout_s)
        live = live_records(settings)
        add(check_rewind(result.rewind, live, produced, settings))

        step = "offsets and lag"
        reporter.step(4, "offsets, lag and history: the operator's CLI, the same host")
        run_cli(url, "describe", settings.stream, reporter=reporter)
        add(check_offsets([partition_offsets(r) for r in streams.call("offsets", settings.stream)], produced))
        step = "history"
        run_cli(url, "history", settings.stream, reporter=reporter)
        add(check_history(streams.call("history", settings.stream), result.race.changes + result.rewind.changes))

        step = "backfill"
        reporter.step(5, "Spark backfill up to the committed offsets")
        result.backfill = run_backfill_step(spark_factory(), backfill_job(settings), settings, reporter)
        reporter.backfill(result.backfill)
        backfilled = read_cypherl(result.backfill.files)
        add(check_backfill_range(result.backfill, produced, backfilled, settings))
        add(check_backfill_matches_live(live, backfilled))
    except (StreamError, OSError, subprocess.SubprocessError, KeyError, ValueError) as exc:
        add(Check(step, False, " ".join(str(exc).split())))
    finally:
        reporter.backfill_progress(-1, -1)    # closes a progress bar a failed backfill left open
        reporter.step(6, "shutdown")
        result.host_exit, check = shut_down(host, streams, settings, reporter)
        add(check)
        if streams is not None:
            streams.close()
    return result


def shut_down(host: HostProcess, streams: QueryModule | None, settings: DemoSettings,
              reporter: Reporter = SILENT) -> tuple[int | None, Check]:
    """Stop the stream if it runs (its offsets stay committed), then SIGTERM the host: exit 0 expected."""
    with contextlib.suppress(StreamError):
        host.wait_ready()        # a run that failed early: let the host finish starting, then stop it as usual
    if streams is not None:
        with contextlib.suppress(StreamError):
            if stream_row(streams, settings.stream, quiet=True)["status"] in ("starting", "running"):
                reporter.rows(streams.call("stop", settings.stream))
    started = time.monotonic()
    code = host.stop()
    seconds = time.monotonic() - started
    reporter.say(f"SIGTERM → the host exited with status {code} after {seconds:.1f} s")
    if code == 0:
        return code, Check("host shutdown", True, f"SIGTERM: exit status 0 after {seconds:.1f} s")
    tail = " | ".join(host.log().strip().splitlines()[-2:])
    return code, Check("host shutdown", False, f"SIGTERM: exit status {code} (log {host.log_path}: {tail})")
