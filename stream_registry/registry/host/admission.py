"""Admitting a stream's config at create and alter, and saying in the log what was admitted.

What a create checks beyond the config's own validation, before anything is
stored: the transformation imports, the sink URI is allowed (and a Bolt sink
answers and logs in: sink_check), the brokers answer with the topics. An alter re-checks only what it changes. The registry runs
these with no lock held (they may wait for the cluster or a child's import).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

from ...config import StreamConfig
from ...errors import ConfigError, StreamError, TransformError
from ...graph.sinks.policy import OutputPolicy
from ...graph.sinks.schemes import validate_sink_uri
from ...graph.transform import is_builtin
from ...kafka.queries import PartitionQuery
from ...model import CHECK_IMPORT_TIMEOUT_S
from ...redaction import mask_secrets, redact, redact_error
from ..runners.one_shot import call_in_child
from ..runners.runner import Isolation, check_stream_transformation, locate_stream_transformation
from .sink_check import check_sink


def admit(config: StreamConfig, before: StreamConfig | None, isolation: Isolation,
          output: Callable[[], OutputPolicy], open_query: Callable[[StreamConfig], PartitionQuery]) -> None:
    """ConfigError (or the cluster's error) unless `config` can run: all of it at create (`before` None),
    what differs from `before` at an alter."""
    if before is None or (config.transform, config.transform_options) != (before.transform, before.transform_options):
        check_transformation(config, isolation)
    if before is None or config.sink != before.sink:
        try:
            validate_sink_uri(config.sink, output(), check_hosts=True)
        except StreamError as exc:
            raise ConfigError(redact_error(str(exc), config.secret_values())) from None
        check_sink(config, isolation, output())
    if before is None or config.configs != before.configs:
        with open_query(config) as query:
            query.partitions(config.topics)


def check_transformation(config: StreamConfig, isolation: Isolation) -> None:
    """Import the transformation to refuse a bad one at create. A stream host imports a user's module in a
    child process (its top-level code runs there, never in the host); the built-ins are the project's own."""
    if isolation == Isolation.PROCESS and not is_builtin(config.transform):
        locate_stream_transformation(config)
        what = f"transform: importing {config.transform!r}"
        try:
            call_in_child(check_stream_transformation, config, timeout=CHECK_IMPORT_TIMEOUT_S, what=what,
                          secrets=config.secret_values())
        except TransformError as exc:   # it died: a bad transformation all the same
            raise ConfigError(str(exc)) from None
    else:
        check_stream_transformation(config)


def described(config: StreamConfig) -> str:
    """A stream's identity for a log line (secrets redacted)."""
    return redact(f"topics {','.join(config.topics)}, group {config.group_id}, bootstrap {config.bootstrap_servers}, "
                  f"transform {config.transform}, sink {config.sink}", config.secret_values())


def shown_change(config: StreamConfig, key: str, before: object, after: object) -> str:
    """`batch_size 1000 -> 50` for a log line; configs by key, secret values masked."""
    if key == "configs" and isinstance(before, Mapping) and isinstance(after, Mapping):
        shown_before, shown_after = mask_secrets(before, config.secret_values()), config.shown_configs()
        keys = sorted(k for k in {*before, *after} if before.get(k) != after.get(k))
        return "{" + ", ".join(f"{k}: {shown_before.get(k, '(unset)')} -> {shown_after.get(k, '(unset)')}"
                               for k in keys) + "}"
    if key == "credentials" and isinstance(before, Mapping) and isinstance(after, Mapping):   # names, never values
        return "{" + ", ".join(f"{k}: {'set' if k not in before else 'removed' if k not in after else 'changed'}"
                               for k in sorted(k for k in {*before, *after} if before.get(k) != after.get(k))) + "}"
    return redact(f"{before} -> {after}", config.secret_values())
