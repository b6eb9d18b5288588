"""Sink URIs: the checks every scheme shares (printable text with nothing around it, no credentials, no
fragment, a well-formed query) and the helpers a scheme's parser uses. Pure: nothing here connects or touches
a file."""
from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any
from urllib.parse import SplitResult, parse_qsl

from ...addresses import clean_text, escaped, split
from ...errors import ConfigError
from ...redaction import MASK

USERNAME_KEY = "bolt.username"
PASSWORD_KEY = "bolt.password"


def split_uri(uri: object, known: Collection[str]) -> tuple[str, SplitResult, dict[str, str]]:
    """(scheme, parts, query options) of `uri`, a scheme of `known`; ConfigError naming field `sink` otherwise."""
    if not isinstance(uri, str) or "://" not in uri:
        raise ConfigError(f"sink: expected a URI like cypherl:///abs/file.cypherl, bolt://host:port or "
                          f"null://, got {shown_uri(uri)!r}")
    clean_text("sink", shown_uri(uri), "URI")   # urlsplit would strip what a reader of the text sees
    if "\\" in uri:
        raise ConfigError(f"sink: {escaped(shown_uri(uri))} contains a backslash; percent-encode it in a path")
    parts = split("sink", uri)
    scheme = parts.scheme.lower()
    if scheme not in known:
        raise ConfigError(f"sink: unknown scheme {scheme!r} in {shown_uri(uri)!r} "
                          f"(known: {', '.join(sorted(known))})")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(f"sink: {shown_uri(uri)!r} carries credentials; pass them as credentials "
                          f"{USERNAME_KEY!r} and {PASSWORD_KEY!r} instead")
    if parts.fragment:
        raise ConfigError(f"sink: {shown_uri(uri)!r} has a fragment, which no sink understands")
    try:
        query = dict(parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query)))
    except ValueError:
        raise ConfigError(f"sink: malformed query string in {shown_uri(uri)!r}") from None
    return scheme, parts, query


def shown_uri(uri: Any) -> Any:
    """The URI with any user:password part masked, for messages."""
    if not isinstance(uri, str):
        return uri
    return re.sub(r"(://)[^/@?#]*@", rf"\1{MASK}@", uri)


def check_options(query: dict[str, str], allowed: set[str], uri: str) -> None:
    """ConfigError naming the first option of `query` that is not `allowed`."""
    unknown = sorted(set(query) - allowed)
    if unknown:
        raise ConfigError(f"sink: unknown option {unknown[0]!r} in {shown_uri(uri)!r} "
                          f"(allowed: {sorted(allowed) or 'none'})")


def flag(query: dict[str, str], name: str, uri: str) -> bool:
    """The boolean option `name` (false when absent)."""
    value = query.get(name, "false").lower()
    if value not in ("true", "false", "1", "0", "yes", "no"):
        raise ConfigError(f"sink: option {name}={query[name]!r} in {shown_uri(uri)!r} is not a boolean")
    return value in ("true", "1", "yes")
