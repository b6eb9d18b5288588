"""Commands over streams as wholes: list, create, alter, start, stop, drop."""
from __future__ import annotations

from typing import Any

import click

from stream_registry.errors import StreamError, StreamStateError
from stream_registry.model import StreamStatus

from .invocation import bootstrap_option, fail, host_client, json_option, print_json, run
from .render import DETAIL_COLUMN, STREAM_COLUMNS, show, table
from .spec_argument import option_spec
from .usage import UsageCommand


@click.command("list", cls=UsageCommand)
@json_option
def list_streams(as_json: bool) -> None:
    """Every stream, its status and configuration (secrets masked)."""
    streams = run(lambda: host_client().list())
    if as_json:
        print_json(streams)
        return
    detail = any(s.detail for s in streams)
    show(table(STREAM_COLUMNS + ((DETAIL_COLUMN,) if detail else ()), (
        (s.name, s.status.value, ",".join(s.topics), s.consumer_group, s.bootstrap_servers, s.transform, s.sink,
         s.error, *((s.detail,) if detail else ())) for s in streams)))


def _config_pair(ctx, param, values: tuple[str, ...]) -> dict[str, str]:
    """KEY=VALUE settings; a secret is refused (a command line is visible to every local user), and no value is
    ever echoed in an error."""
    from stream_registry.redaction import is_secret_key

    pairs = {}
    for value in values:
        key, sep, setting = value.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter("expected KEY=VALUE (e.g. auto.offset.reset=earliest); the value given is "
                                     "not shown, it may hold a secret")
        if is_secret_key(key.strip()):
            raise click.BadParameter(f"{key.strip()!r} is a secret, and a command line is visible to every local "
                                     f"user: give it through the API (curl with a JSON body) or CALL streams.create")
        pairs[key.strip()] = setting
    return pairs


_BOOLEAN_OPTIONS = ("errors.deadletterqueue.context.headers.enable", "bolt_unwind")


def _split_options(configs: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """--config pairs split into stream options (Kafka Connect's names, as Cypher's `options` and the API take
    them; true/false for the boolean ones) and librdkafka properties."""
    from stream_registry.config import OPTION_FIELDS

    options: dict[str, Any] = {k: v for k, v in configs.items() if k in OPTION_FIELDS}
    for key in _BOOLEAN_OPTIONS:
        if key in options and options[key].lower() in ("true", "false"):
            options[key] = options[key].lower() == "true"
    return options, {k: v for k, v in configs.items() if k not in OPTION_FIELDS}


@click.command(cls=UsageCommand)
@click.argument("name")
@click.option("--topic", "topics", multiple=True, required=True, help="A topic to consume (repeatable).")
@bootstrap_option
@click.option("--transform", default=None, metavar="MODULE.FUNCTION",
              help="The transformation (default: one :KafkaMessage node per message).")
@click.option("--sink", default=None, metavar="URI",
              help="bolt://HOST:PORT, cypherl:///PATH.cypherl or null:// (default: the host's --default-sink).")
@click.option("--group", "consumer_group", default=None, help="Consumer group (default: mgstreams_NAME).")
@click.option("--batch-size", type=click.IntRange(min=1), default=None)
@click.option("--batch-interval-ms", type=click.IntRange(min=1), default=None)
@click.option("--config", "configs", multiple=True, callback=_config_pair, metavar="KEY=VALUE",
              help="A librdkafka property of the consumer, or a stream option (delivery, errors.tolerance, "
                   "errors.deadletterqueue.topic.name, restart, on_data_loss, key.format, value.format, "
                   "schema.registry.url, transform.options as JSON) (repeatable).")
@click.option("--tasks", type=int, default=None, metavar="N",
              help="Member processes of the stream's consumer group, 1 to 32 (default 1).")
@click.option("--start", "start_now", is_flag=True, help="Start the stream once it is created.")
@click.option("--no-check-sink", "no_check_sink", is_flag=True,
              help="Do not connect to a Bolt sink at create (a Memgraph that is not up yet); the stream's start "
                   "fails, naming why, if it is still not there then.")
@json_option
def create(name: str, topics: tuple[str, ...], bootstrap_servers: str, transform: str | None, sink: str | None,
           consumer_group: str | None, batch_size: int | None, batch_interval_ms: int | None,
           configs: dict[str, str], tasks: int | None, start_now: bool, no_check_sink: bool,
           as_json: bool) -> None:
    """Create stream NAME on the host (POST /streams), as `CALL streams.create(...)` does.

    Secrets (sasl.password and the like) given with --config are stored masked in
    every listing, but a command line is visible to other local users: prefer
    the API or Cypher for them."""
    fields: dict[str, Any] = {"name": name, "topics": list(topics), "bootstrap_servers": bootstrap_servers}
    for key, value in (("transform", transform), ("sink", sink), ("consumer_group", consumer_group),
                       ("batch_size", batch_size), ("batch_interval_ms", batch_interval_ms), ("tasks", tasks)):
        if value is not None:
            fields[key] = value
    options, kafka_configs = _split_options(configs)
    if kafka_configs:
        fields["configs"] = kafka_configs
    fields.update(options)
    if no_check_sink:
        fields["check_sink"] = False
    client = host_client()
    info = run(lambda: client.create(**fields))
    if start_now:
        info = run(lambda: client.start(name))
    _print_status(info, as_json)


@click.command(cls=UsageCommand)
@click.argument("name")
@click.option("--batch-size", type=click.IntRange(min=1), default=None)
@click.option("--batch-interval-ms", type=click.IntRange(min=1), default=None)
@click.option("--transform", default=None, metavar="MODULE.FUNCTION", help="The new transformation.")
@click.option("--sink", default=None, metavar="URI", help="The new sink (bolt://, cypherl:///..., null://).")
@click.option("--bootstrap-servers", default=None, metavar="HOST:PORT,...",
              help="Move the stream to another cluster; needs --from (where its partitions start there).")
@click.option("--from", "start_from", default=None, metavar="SPEC",
              help="With --sink: where the new sink starts (an offset spec, as set-offset takes); by default an "
                   "exactly-once stream's new sink continues where the stream stood. With --bootstrap-servers: "
                   "where the new cluster's partitions start (committed: the group's offsets there).")
@click.option("--config", "configs", multiple=True, callback=_config_pair, metavar="KEY=VALUE",
              help="Set a librdkafka property of the consumer, or a stream option as create takes it "
                   "(errors.tolerance, errors.deadletterqueue.topic.name, restart, key.format, value.format, "
                   "schema.registry.url, transform.options as JSON, ...) (repeatable); the others stay.")
@click.option("--unset-config", "unset", multiple=True, metavar="KEY",
              help="Remove a librdkafka property (repeatable): librdkafka's default applies again.")
@click.option("--tasks", type=int, default=None, metavar="N", help="The new number of member processes (1 to 32).")
@json_option
def alter(name: str, batch_size: int | None, batch_interval_ms: int | None, transform: str | None,
          sink: str | None, bootstrap_servers: str | None, start_from: str | None, configs: dict[str, str],
          unset: tuple[str, ...],
          tasks: int | None,
          as_json: bool) -> None:
    """Change stream NAME (PATCH /streams/NAME, as `CALL streams.alter(...)`): what is given changes, the rest
    stays. Checked as a create is; a refusal changes nothing. A running stream restarts to apply it, from its
    committed offsets; pending offset changes and the history stay."""
    changes: dict[str, Any] = {key: value for key, value in (
        ("batch_size", batch_size), ("batch_interval_ms", batch_interval_ms), ("transform", transform),
        ("sink", sink), ("tasks", tasks), ("bootstrap_servers", bootstrap_servers)) if value is not None}
    options, kafka_configs = _split_options(configs)
    changes.update(options)
    if set(unset) & set(_option_keys()):
        key = sorted(set(unset) & set(_option_keys()))[0]
        raise click.BadParameter(f"{key!r} is a stream option, not a Kafka property: set it with --config "
                                 f"{key}=VALUE", param_hint="--unset-config")
    if kafka_configs or unset:
        changes["configs"] = {**kafka_configs, **{key: None for key in unset}}
    if start_from is not None:
        changes["from"] = run(lambda: option_spec(start_from, "--from"))
    if not changes:
        raise click.UsageError("nothing to change: give --batch-size, --batch-interval-ms, --transform, --sink, "
                               "--bootstrap-servers, --tasks, --config or --unset-config")
    info = run(lambda: host_client().alter(name, **changes))
    if as_json:
        print_json(info)
    else:
        click.echo(f"{info.name} altered ({info.status.value})")


def _option_keys() -> tuple[str, ...]:
    from stream_registry.config import OPTION_FIELDS

    return tuple(OPTION_FIELDS)


def _print_status(info, as_json: bool) -> None:
    if as_json:
        print_json({"name": info.name, "status": info.status.value, "error": info.error})
    else:
        click.echo(f"{info.name} {info.status.value}" + (f" ({info.error})" if info.error else ""))


@click.command(cls=UsageCommand)
@click.argument("name")
@json_option
def start(name: str, as_json: bool) -> None:
    """Start stream NAME on the host; it is "starting" until the group assigns partitions. Idempotent, as
    stop is: a stream already starting or running is left alone (exit 0, and it says so)."""
    client = host_client()
    try:
        info = client.start(name)
    except StreamStateError as exc:   # refused: fine if it is because the stream runs already
        info = run(lambda: client.get(name))
        if info.status not in (StreamStatus.STARTING, StreamStatus.RUNNING):
            fail(str(exc))
        if not as_json:
            click.echo(f"{info.name} already {info.status.value}")
            return
    except StreamError as exc:
        fail(str(exc))
    _print_status(info, as_json)


@click.command(cls=UsageCommand)
@click.argument("name")
@json_option
def stop(name: str, as_json: bool) -> None:
    """Stop stream NAME: finish the batch, commit, leave the group; idempotent."""
    _print_status(run(lambda: host_client().stop(name)), as_json)


@click.command("acknowledge-loss", cls=UsageCommand)
@click.argument("name")
@json_option
def acknowledge_loss(name: str, as_json: bool) -> None:
    """Say that the records stream NAME lost (they left the log before it read them) have been seen: its lag
    verdict stops saying ERR for them. The count and the history rows (status lost) stay."""
    info = run(lambda: host_client().acknowledge_loss(name))
    if as_json:
        print_json({"name": info.name, "records_lost": info.records_lost,
                    "records_lost_unacknowledged": info.records_lost_unacknowledged})
    else:
        click.echo(f"{info.name}: {info.records_lost} lost record(s), all acknowledged")


@click.command(cls=UsageCommand)
@click.argument("name")
@json_option
def drop(name: str, as_json: bool) -> None:
    """Stop and forget stream NAME (its committed offsets stay in Kafka); prints `NAME dropped`."""
    info = run(lambda: host_client().drop(name))
    if as_json:
        print_json({"name": info.name, "status": "dropped", "error": None})
    else:
        click.echo(f"{info.name} dropped")


COMMANDS = (list_streams, create, alter, start, stop, acknowledge_loss, drop)
