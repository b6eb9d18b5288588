"""An offset spec as typed in a shell, for every command that takes one (set-offset, check, backfill's
--from and --until): one reading, so a spec means the same in each."""
from __future__ import annotations

import json
import re

from stream_registry.errors import ConfigError

_INTEGER = re.compile(r"-?[0-9]{1,30}")   # ASCII digits, matched whole; longer runs are the parser's to refuse


def parse_spec_argument(text: str) -> object:
    """SPEC as typed in a shell: JSON when it starts with `{` or `"`, an integer, else the string.

    An integer is Memgraph's dialect (-1 beginning, -2 end); below -2 it cannot
    be an offset, so `-50` is a move back by 50, as `+50` is one forward. A move
    back by 1 or 2 is the quoted '"-1"', '"-2"'; maps name topics or topic:partition.
    """
    stripped = text.strip()
    if stripped.startswith(("{", '"')):
        try:
            return json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"SPEC: {_shown(text)} is not valid JSON: {exc.msg} at column {exc.colno}") from None
        except ValueError:   # a number of more than 4300 digits, which Python refuses to convert
            raise ConfigError(f"SPEC: {_shown(text)} holds a number too long to be an offset") from None
        except RecursionError:
            raise ConfigError(f"SPEC: {_shown(text)} is nested too deeply") from None
    if _INTEGER.fullmatch(stripped):
        number = int(stripped)
        return number if number >= -2 else stripped   # -N (N >= 3): a move back, as "+N" is one forward
    return text   # the offset parser refuses, naming the value, what is no spec (longer numbers too)


def option_spec(text: str, option: str) -> object:
    """A spec given to an option (`--from`, `--until`): as above, its errors named after the option."""
    try:
        return parse_spec_argument(text)
    except ConfigError as exc:
        raise ConfigError(f"{option}: {exc}") from None


def _shown(text: str, limit: int = 80) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else f"{shown[:limit - 20]}...{shown[-10:]} ({len(text)} characters)"
