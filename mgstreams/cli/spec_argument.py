"""An offset spec as typed in a shell, for every command that takes one (set-offset, check, backfill's
--from and --until): one reading, so a spec means the same in each."""
from __future__ import annotations

import json
import re

from stream_registry.errors import ConfigError

_INTEGER = re.compile(r"-?[0-9]{1,30}")   # ASCII digits, matched whole; longer runs are the parser's to refuse


# A bare -1, -2 or -0 has two readings at a shell prompt: Memgraph's dialect (-1 beginning, -2 end, what Cypher
# keeps) and a move back (-N, as -3 is). Typed in a shell they are refused, naming both and the words to use.
_AMBIGUOUS = {
    "-1": "Memgraph's dialect reads it as the beginning, a shell as one back: say earliest for the beginning, "
          "or '\"-1\"' (quoted) to move back 1",
    "-2": "Memgraph's dialect reads it as the end, a shell as two back: say latest for the end, "
          "or '\"-2\"' (quoted) to move back 2",
    "-0": "it reads as offset 0 or as no move back: say 0 (or earliest) for the first offset",
}


def parse_spec_argument(text: str) -> object:
    """SPEC as typed in a shell: JSON when it starts with `{` or `"`, an integer, else the string.

    A non-negative integer is an offset; `-N` (N >= 3) is a move back by N, as `+N`
    is one forward. A bare -1, -2 or -0 is refused (ConfigError naming both readings
    and what to type instead): Memgraph's -1 (beginning) and -2 (end) are `earliest`
    and `latest` here, a move back by 1 or 2 the quoted '"-1"', '"-2"'. Maps name
    topics or topic:partition.
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
        ambiguous = _AMBIGUOUS.get(re.sub(r"^-0+(?=[0-9])", "-", stripped))
        if ambiguous:
            raise ConfigError(f"SPEC: {stripped} is ambiguous at a shell prompt: {ambiguous}")
        number = int(stripped)
        return number if number >= 0 else stripped   # -N (N >= 3): a move back, as "+N" is one forward
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
