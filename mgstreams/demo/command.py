"""`python -m mgstreams.demo`: the command line (click, like the `mgstreams` CLI), Spark's start and the summary."""
from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

import click
from rich.console import Console

from .printing import RichReporter, console_width, print_outputs, shown_path
from .run import run_demo
from .settings import DemoSettings


@contextlib.contextmanager
def stderr_to(path: Path):
    """Point fd 2 at `path` while the Spark JVM starts; the JVM keeps it for its own logs."""
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(target, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120},
               help="The mgstreams main job on an embedded Kafka cluster.")
@click.option("--out", default="demo-out", show_default=True, type=click.Path(file_okay=False), metavar="DIR",
              help="Directory for everything the demo writes.")
@click.option("--seed", type=int, default=DemoSettings.seed, show_default=True, metavar="N",
              help="Event generator seed.")
@click.option("--events", type=click.IntRange(min=1), default=DemoSettings.events, show_default=True, metavar="N",
              help="Transfers to produce.")
@click.option("--memgraph-uri", envvar="MEMGRAPH_URI", show_envvar=True, default=None, metavar="URI",
              help="Write the live stream to Memgraph over Bolt, e.g. bolt://localhost:7687 (credentials from "
                   "$MEMGRAPH_USERNAME, $MEMGRAPH_PASSWORD).")
@click.option("--master", default=DemoSettings.spark_master, show_default=True, help="Spark master for the backfill.")
def main(out: str, seed: int, events: int, memgraph_uri: str | None, master: str) -> None:
    credentials = {key: value for key, value in (("bolt.username", os.environ.get("MEMGRAPH_USERNAME")),
                                                 ("bolt.password", os.environ.get("MEMGRAPH_PASSWORD"))) if value}
    settings = DemoSettings(out=Path(out), seed=seed, events=events, memgraph_uri=memgraph_uri or None,
                            memgraph_credentials=credentials, spark_master=master)
    sys.exit(demonstrate(settings))


def demonstrate(settings: DemoSettings) -> int:
    """The run as `make demo` shows it: on a 3-broker embedded cluster, printed with rich; 1 if a check failed."""
    from spark_bridge.spark_session import build_session

    from ..embedded_kafka import EmbeddedKafka

    console = Console(highlight=False, width=console_width())
    reporter = RichReporter(console)
    began = time.monotonic()
    console.print(f"[bold]mgstreams demo[/] · seed {settings.seed} · {settings.events:,} transfers · "
                  f"output in {shown_path(settings.out_dir)}/")
    settings.out_dir.mkdir(parents=True, exist_ok=True)
    settings.spark_log.unlink(missing_ok=True)
    spark = None

    def spark_factory():
        nonlocal spark
        with console.status(f"starting Spark {settings.spark_master} (log: {shown_path(settings.spark_log)})"), \
                stderr_to(settings.spark_log):
            spark = build_session(settings.spark_master, app_name="mgstreams-demo",
                                  conf={"spark.ui.enabled": "false"})
        return spark

    reporter.step(1, "embedded Kafka, a stream host and an account-transfer stream")
    try:
        with EmbeddedKafka(brokers=3) as cluster:
            cluster.create_topic(settings.topic, settings.partitions, replication=3)
            reporter.say(f"embedded Kafka: {cluster.broker_count} brokers at {cluster.bootstrap_servers} "
                         f"(librdkafka's mock cluster; initial rebalance delay 3 s, as on brokers)")
            reporter.say(f"topic {settings.topic}: {settings.partitions} partitions, "
                         f"replication {min(3, cluster.broker_count)}")
            result = run_demo(settings, cluster.bootstrap_servers, spark_factory, reporter)
    finally:
        if spark is not None:
            with stderr_to(settings.spark_log):
                spark.stop()
    reporter.step(7, f"what the demo wrote ({shown_path(settings.out_dir)}/)")
    print_outputs(console, settings)
    console.print()
    failed = [c for c in result.checks if c.ok is False]
    skipped = [c for c in result.checks if c.ok is None]
    passed = len(result.checks) - len(failed) - len(skipped)
    elapsed = time.monotonic() - began
    if result.ok:
        console.print(f"[green bold]✓ {passed} checks passed[/]"
                      + (f", {len(skipped)} not observable here" if skipped else "") + f" ({elapsed:.0f} s)")
        return 0
    console.print(f"[red bold]✗ {len(failed)} of {len(result.checks)} checks failed[/] ({elapsed:.0f} s): "
                  + ", ".join(c.name for c in failed))
    return 1
