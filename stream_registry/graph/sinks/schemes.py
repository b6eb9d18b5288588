"""The scheme registry: a sink URI's scheme names its parser and its opener. Add a scheme by adding an entry
to `SCHEMES` (tests add in-memory ones)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from ...allowlists import check_host
from .bolt import BoltSettings, open_bolt, parse_bolt
from .cypherl import open_cypherl, parse_cypherl
from .null import open_null, parse_null
from .policy import OutputPolicy
from .protocol import Scheme, Sink
from .uri import split_uri

NO_CREDENTIALS: Mapping[str, str] = MappingProxyType({})

SCHEMES: dict[str, Scheme] = {
    "null": Scheme(parse_null, open_null),
    "cypherl": Scheme(parse_cypherl, open_cypherl),
    "bolt": Scheme(parse_bolt, open_bolt),
    "bolt+s": Scheme(parse_bolt, open_bolt),
    "bolt+ssc": Scheme(parse_bolt, open_bolt),
}


def parse_sink_uri(uri: str, output: OutputPolicy | None = None, *, check_hosts: bool = False) -> tuple[str, Any]:
    """(scheme, settings) of `uri`; with `output`, a file sink's settings as the policy admits them; with
    `check_hosts`, a Bolt sink's parsed host as the operator's host allowlist admits it (the value checked is
    the value connected to). ConfigError naming field `sink`; never connects, never creates."""
    scheme, parts, query = split_uri(uri, SCHEMES)
    settings = SCHEMES[scheme].parse(parts, query, uri)
    if check_hosts and isinstance(settings, BoltSettings) and settings.address is not None:
        check_host("sink", settings.address)
    if output is not None:
        settings = output.admit(settings, uri)
    return scheme, settings


def validate_sink_uri(uri: str, output: OutputPolicy | None = None, *, check_hosts: bool = False) -> None:
    """Raise ConfigError naming field `sink` if `uri` cannot be opened; never connects, never creates.

    With `output`, a file sink must also lie under one of its directories; with `check_hosts`, a Bolt
    sink's host must be one the operator allows.
    """
    parse_sink_uri(uri, output, check_hosts=check_hosts)


def open_sink(uri: str, credentials: Mapping[str, str] = NO_CREDENTIALS,
              output: OutputPolicy | None = None, *, bolt_unwind: bool = True, check_hosts: bool = False) -> Sink:
    """Open the sink `uri` names; with `output`, the checks of validate_sink_uri are made again first
    (the file system may have changed since the stream was created). `bolt_unwind=False`: a Bolt sink
    runs a batch's statements one at a time instead of folding them (unwind.py)."""
    scheme, settings = parse_sink_uri(uri, output, check_hosts=check_hosts)
    if isinstance(settings, BoltSettings) and not bolt_unwind:
        settings = replace(settings, unwind=False)
    return SCHEMES[scheme].open(settings, credentials or NO_CREDENTIALS)
