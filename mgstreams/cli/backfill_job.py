"""`mgstreams backfill`'s job, built from its options: the topics, cluster and settings given, or a
registered stream's (read from the host's state directory, secrets included)."""
from __future__ import annotations

import os
from pathlib import Path

from spark_bridge.bolt_load import DEFAULT_WRITERS
from spark_bridge.job import BackfillJob
from stream_registry.errors import ConfigError
from stream_registry.graph.sinks import PASSWORD_KEY, USERNAME_KEY
from stream_registry.offset_spec import parse_offset_spec
from stream_registry.redaction import is_secret_key

from ..settings import SINK_PASSWORD_ENV, default_state_dir
from ..transform_dirs import recorded
from .spec_argument import option_spec


def build_job(stream_name, state_dir, topics, bootstrap_servers, group_id, configs, start, until, transform,
              modules_dirs, sink, sink_username, min_partitions, batch_size, fail_on_data_loss,
              writers: int = DEFAULT_WRITERS, config_file: str | None = None) -> BackfillJob:
    from stream_registry.registry.runners.runner import query_module_dirs

    start_spec = parse_offset_spec(option_spec(start, "--from"))
    until_spec = parse_offset_spec(option_spec(until, "--until"))
    credentials = {}
    if sink_username:
        credentials[USERNAME_KEY] = sink_username
        if os.environ.get(SINK_PASSWORD_ENV):
            credentials[PASSWORD_KEY] = os.environ[SINK_PASSWORD_ENV]
    search_dirs = (*modules_dirs, *query_module_dirs())
    if stream_name:
        if topics or bootstrap_servers or group_id or configs or config_file:
            raise ConfigError("--stream: takes the topics, servers, group and settings from the stream; "
                              "drop --topics/--bootstrap-servers/--group/--config")
        return _stream_job(stream_name, state_dir, start_spec, until_spec, transform, search_dirs, sink,
                           credentials, min_partitions, batch_size, fail_on_data_loss, writers)
    if not topics or not bootstrap_servers:
        raise ConfigError("--topics: give --stream NAME, or --topics with --bootstrap-servers")
    if not transform:
        raise ConfigError("--transform: required with --topics (MODULE.FUNCTION)")
    client_config = {**_settings_file(config_file), **dict(_argv_setting(c) for c in configs)}
    if group_id:
        client_config["group.id"] = group_id
    return BackfillJob(bootstrap_servers, tuple(t.strip() for t in topics.split(",") if t.strip()), start_spec,
                       until_spec, transform, sink, client_config, credentials, search_dirs, batch_size,
                       min_partitions, fail_on_data_loss, writers)


def _stream_job(name, state_dir, start_spec, until_spec, transform, search_dirs, sink, credentials,
                min_partitions, batch_size, fail_on_data_loss, writers) -> BackfillJob:
    """A job over a registered stream: its config, secrets included, read from the host's state directory;
    `committed` in the specs is the stream's resume point."""
    from spark_bridge.handoff import stream_resume_offsets, uses_committed
    from spark_bridge.job import decoding_of
    from stream_registry.registry.registry import stored_config

    state_dir = state_dir or default_state_dir()
    config = stored_config(state_dir, name).with_group()
    search_dirs = (*search_dirs, *(d for d in recorded(state_dir) if d not in search_dirs))   # the host's too
    if not credentials and sink == config.sink:
        credentials = config.sink_credentials()
    client_config = config.client_config()
    resume = stream_resume_offsets(state_dir, config) if uses_committed(start_spec, until_spec) else None
    return BackfillJob(client_config.pop("bootstrap.servers"), tuple(config.topics), start_spec, until_spec,
                       transform or config.transform, sink, client_config, credentials, search_dirs, batch_size,
                       min_partitions, fail_on_data_loss, writers, resume, decoding=decoding_of(config),
                       transform_options=config.transform_options if not transform else {})


def _setting(text: str, option: str = "--config") -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        shown = f", got {text!r}" if option == "--config" else ""    # a file's line may hold a secret
        raise ConfigError(f"{option}: expected KEY=VALUE{shown}")
    return key.strip(), value


def _argv_setting(text: str) -> tuple[str, str]:
    """A --config setting; a secret there is refused: argv is readable by every local user (ps, /proc)."""
    key, value = _setting(text)
    if is_secret_key(key):
        raise ConfigError(f"--config: {key!r} is a secret, and a command line is visible to every local user; "
                          f"put it in a --config-file readable only by you")
    return key, value


def _settings_file(path: str | None) -> dict[str, str]:
    """KEY=VALUE lines of a --config-file (blank lines and # comments skipped); values never echoed."""
    if not path:
        return {}
    settings = {}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--config-file: cannot read {path!r}: {getattr(exc, 'strerror', None) or exc}") from None
    for number, line in enumerate(lines, 1):
        if line.strip() and not line.lstrip().startswith("#"):
            key, value = _setting(line, f"--config-file: line {number} of {path!r}")
            settings[key] = value.strip()
    return settings
