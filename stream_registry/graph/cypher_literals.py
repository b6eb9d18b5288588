"""Cypher literals: turn a parameterised statement into one self-contained line.

The `cypherl://` sink writes files that `mgconsole` imports line by line, so
every value is rendered as a Cypher literal that cannot break out of its quotes
or its line, whatever it holds. Choices where Memgraph has no direct literal:

- int outside int64 (Memgraph's integer) -> error naming the parameter, never a
  silently wrapped or stringified value; int64's minimum is written
  `(-9223372036854775807 - 1)` because Memgraph parses the sign separately.
- float nan/inf -> error (Cypher has no literal for them).
- bytes -> decoded as UTF-8 text (Memgraph has no byte type); not UTF-8 -> error.
- str: `\\ ' " \\n \\r \\t` escaped, every other control or line-separator
  character as `\\uXXXX`; lone surrogates -> error (not storable as UTF-8).
- date -> `date("…")`, naive datetime -> `localDateTime("…")`, aware datetime
  -> `datetime("…+HH:MM")` (the UTC offset is kept, a zone name is not; an
  offset with seconds, such as a zone's local mean time before 1900, which
  Memgraph cannot read, is written as UTC: the same instant), naive time ->
  `localTime("…")`, timedelta -> `duration({day:…, second:…, microsecond:…})`
  within Memgraph's duration (int64 microseconds). Aware times, durations
  beyond that range and other types -> error.
- map keys: bare when a plain identifier, else `backticked` (backticks doubled);
  keys with control characters -> error (a name cannot escape them).
"""
from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from numbers import Integral, Real
from typing import Any, NamedTuple

from ..errors import SinkError

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
_MAX_DURATION = dt.timedelta(microseconds=INT64_MAX)   # Memgraph's Duration counts int64 microseconds

_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Words that read as syntax; backticking a property name is always allowed.
_RESERVED = frozenset("""
    all and any as asc ascending by call case contains create delete desc descending detach distinct
    else end ends exists false foreach from in is limit load match merge none not null on optional or
    order remove return set single skip starts then to true union unwind when where with xor yield
""".split())
_STR_ESCAPES = {"\\": "\\\\", "'": "\\'", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Everything that could end a line for some reader, every control character, lone surrogates.
_NEEDS_ESCAPE = re.compile("[\\\\'\"\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
# Only quotes and backslashes: the common case for JSON payloads, escaped without a regex callback.
_NEEDS_SLOW_ESCAPE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_LINE_BREAKS = "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def to_cypher_literal(value: Any, name: str = "value") -> str:
    """Render one Python value as a Cypher literal; `name` is used in errors."""
    kind = type(value)
    exact = _BY_EXACT_TYPE.get(kind)
    if exact is not None:
        return exact(value, name)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_key(k, name)}: {to_cypher_literal(v, f'{name}.{k}')}"
                               for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(to_cypher_literal(v, f"{name}[{i}]") for i, v in enumerate(value)) + "]"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _string(text_of_bytes(value, name), name)
    if isinstance(value, (dt.date, dt.time, dt.timedelta)):
        return _temporal(value, name)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Integral):
        return _integer(int(value), name)
    if isinstance(value, Real):
        try:
            number = float(value)
        except OverflowError:   # e.g. a Fraction beyond the float range
            raise SinkError(f"parameter {name}: {_short(value)} is beyond the float range; send it as a "
                            f"string") from None
        return _float(number, name)
    if isinstance(value, str):
        return _string(str(value), name)
    raise SinkError(f"parameter {name}: {_short(value)} of type {kind.__name__} has no Cypher literal "
                    f"(use null, bool, int, float, str, list, map, date/time or timedelta)")


def text_of_bytes(value: bytes | bytearray | memoryview, name: str = "value") -> str:
    """Bytes as text: Memgraph stores no bytes, and both sinks must agree."""
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SinkError(f"parameter {name}: {_short(bytes(value))} is not UTF-8 text ({exc.reason} at byte "
                        f"{exc.start}); decode or base64-encode it in the transformation") from None


def _string(text: str, name: str) -> str:
    # isprintable() is False for every character _NEEDS_SLOW_ESCAPE finds (controls, line separators,
    # surrogates) and faster than the search; then only quotes and backslashes are left, and replace() is a
    # quick no-op on a text without them
    if text.isprintable() or _NEEDS_SLOW_ESCAPE.search(text) is None:
        return '"' + text.replace("\\", "\\\\").replace("'", "\\'").replace('"', '\\"') + '"'
    return '"' + _NEEDS_ESCAPE.sub(lambda m: _escape_char(m.group(), name), text) + '"'


def _escape_char(char: str, name: str) -> str:
    escaped = _STR_ESCAPES.get(char)
    if escaped is not None:
        return escaped
    if "\ud800" <= char <= "\udfff":
        raise SinkError(f"parameter {name}: string holds a lone surrogate U+{ord(char):04X}, "
                        f"which cannot be stored as UTF-8")
    return f"\\u{ord(char):04X}"


def _integer(value: int, name: str) -> str:
    if INT64_MIN < value <= INT64_MAX:
        return str(value)
    if value == INT64_MIN:
        return f"({INT64_MIN + 1} - 1)"
    raise SinkError(f"parameter {name}: integer {_short(value)} is outside Memgraph's int64 range "
                    f"[{INT64_MIN}, {INT64_MAX}]; send it as a string or a float")


def _float(value: float, name: str) -> str:
    if not math.isfinite(value):
        raise SinkError(f"parameter {name}: float {value!r} has no Cypher literal; use null or a string")
    return repr(value).replace("e+", "e")


def _null(value: None, name: str) -> str:
    return "null"


def _boolean(value: bool, name: str) -> str:
    return "true" if value else "false"


# The common types, by exact type (a subclass takes to_cypher_literal's isinstance chain).
_BY_EXACT_TYPE: dict[type, Callable[[Any, str], str]] = {
    str: _string, int: _integer, float: _float, bool: _boolean, type(None): _null}


def _key(key: Any, name: str) -> str:
    if not isinstance(key, str):
        raise SinkError(f"parameter {name}: map key {_short(key)} is a {type(key).__name__}, "
                        f"Cypher map keys are strings")
    if _PLAIN_NAME.match(key) and key.lower() not in _RESERVED:
        return key
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c in _LINE_BREAKS or "\ud800" <= c <= "\udfff"
           for c in key):
        raise SinkError(f"parameter {name}: map key {key!r} holds a control character, "
                        f"which a Cypher name cannot escape")
    return console_safe_name("`" + key.replace("`", "``") + "`", f"parameter {name}")


def console_safe_name(backticked: str, field: str) -> str:
    """A backticked name that mgconsole splits where Memgraph does.

    mgconsole's line splitter (`ParseLine` in memgraph/mgconsole) knows quotes
    and backslash escapes but not backticks: a `;` in a name ends its statement
    there, a quote in it opens a string. So, when the name needs it, a comment
    holding one quote character (`/*"*/`, which Memgraph skips) is put before
    it, to have mgconsole read the name as quoted, and another after it, to
    close what the name left open. A name no such prefix can carry (it has a
    `;` outside every quoting it can start in) is an error naming `field`.
    """
    if not any(c in backticked for c in ";'\"\\"):
        return backticked
    for opening in ("", '"', "'"):
        closing = _console_state_after(backticked, opening)
        if closing is not None:
            return "".join((f"/*{opening}*/" if opening else "", backticked, f"/*{closing}*/" if closing else ""))
    raise SinkError(f"{field}: name {backticked} cannot be written so that mgconsole reads it "
                    f"(a ';' outside every quote its line splitter can be in); rename it")


def _console_state_after(text: str, quote: str) -> str | None:
    """The quote mgconsole is in after `text`, entering in `quote` ('' for none); None if it would end the
    statement inside `text` (mgconsole's ParseLine, memgraph/mgconsole src/utils/utils.cpp)."""
    escaped = False
    for c in text:
        if quote and c == "\\":
            escaped = not escaped
            continue
        if (not quote and c in "\"'") or (not escaped and c == quote):
            quote = "" if quote else c
        elif not quote and c == ";":
            return None
        escaped = False
    return quote


def _temporal(value: dt.date | dt.time | dt.timedelta, name: str) -> str:
    if isinstance(value, dt.datetime):
        offset = value.utcoffset()
        if offset is None:
            return f'localDateTime("{value.isoformat()}")'
        if offset % dt.timedelta(minutes=1):
            try:
                value, offset = value.astimezone(dt.UTC), dt.timedelta(0)
            except OverflowError:
                raise SinkError(f"parameter {name}: datetime {value.isoformat()!r} has a UTC offset with "
                                f"seconds, which Memgraph cannot read, and is out of range in UTC") from None
        return f'datetime("{value.replace(tzinfo=dt.timezone(offset)).isoformat()}")'
    if isinstance(value, dt.date):
        return f'date("{value.isoformat()}")'
    if isinstance(value, dt.time):
        if value.utcoffset() is not None:
            raise SinkError(f"parameter {name}: time {value.isoformat()!r} has a time zone; Memgraph has "
                            f"no zoned time type (use a naive time or a datetime)")
        return f'localTime("{value.isoformat()}")'
    if abs(value) > _MAX_DURATION:
        raise SinkError(f"parameter {name}: duration {value} is beyond Memgraph's duration range "
                        f"(±{_MAX_DURATION}); send it as a number or a string")
    return f"duration({{day: {value.days}, second: {value.seconds}, microsecond: {value.microseconds}}})"


def _short(value: Any) -> str:
    """A value for a message, cut short; never an error itself (Python refuses to print an int of more
    than 4300 digits, and a user's __repr__ may raise)."""
    if type(value) is int and value.bit_length() > 256:
        return f"a {'negative ' if value < 0 else ''}{value.bit_length()}-bit integer"
    try:
        text = repr(value)
    except Exception:
        return f"<a {type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


# -- statements -------------------------------------------------------------
_TOKEN = re.compile(r"""
    (?P<string> '(?:[^'\\]|\\.)*' | "(?:[^"\\]|\\.)*" )
  | (?P<name> `(?:[^`]|``)*` )
  | (?P<comment> //[^\r\n]* | /\*.*?\*/ )
  | (?P<param> \$(?:[^\W\d]\w*|\d+|`(?:[^`]|``)*`) )
  | (?P<unterminated> ['"`] | /\* )
  | (?P<semicolon> ; )
  | (?P<other> [^'"`/$;]+ | . )
""", re.S | re.X)
_QUOTE_COMMENTS = frozenset({'/*"*/', "/*'*/"})
_BREAK_RUN = re.compile(f"[{_LINE_BREAKS}]+")
_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPED = re.compile(r"\\(.)", re.S)   # the escape pairs of a string literal, left to right


def render_statement(query: str, parameters: Mapping[str, Any] | None = None) -> str:
    """One line of Cypher: `$name` references replaced by literals, ending in `;`.

    Only references outside string literals, comments and backticked names are
    replaced; comments are dropped and line breaks become spaces so the result
    stays on one line. A referenced parameter that is missing is an error.
    """
    if not isinstance(query, str):
        raise SinkError(f"query: expected a string, got {type(query).__name__} {_short(query)}")
    if parameters is not None and type(parameters) is not dict and not isinstance(parameters, Mapping):
        raise SinkError(f"parameters: expected a map of names to values, got {type(parameters).__name__} "
                        f"{_short(parameters)}")
    template = _template(query)
    parameters = parameters or {}
    values = None
    if type(parameters) is dict:   # the common case: every value looked up at once (KeyError: one is missing)
        try:
            values = list(map(parameters.__getitem__, template.names))
        except KeyError:
            pass
    if values is not None:   # the common types' literals dispatched here, without a call to to_cypher_literal
        literals = [(_BY_EXACT_TYPE.get(type(value)) or to_cypher_literal)(value, label)
                    for value, label in zip(values, template.labels, strict=True)]
    else:   # one by one, so that the first problem in the query's order is the one reported
        literals = []
        for name, label in zip(template.names, template.labels, strict=True):
            if name not in parameters:
                raise SinkError(f"parameter {label}: referenced by the query but not given "
                                f"(given: {sorted(parameters)!r}); query: {_short(query)}")
            literals.append(to_cypher_literal(parameters[name], label))
    pieces = list(template.pieces)
    pieces[1::2] = literals
    return "".join(pieces)


class _Template(NamedTuple):
    """A query split into its text and its parameter references, which alternate in `pieces`: text (perhaps
    empty), a parameter's name, text, ...; `names` are the references in order, `labels` their `$name`."""
    pieces: tuple[str, ...]
    names: tuple[str, ...]
    labels: tuple[str, ...]


@lru_cache(maxsize=512)
def _template(query: str) -> _Template:
    """Check and split a query once (queries repeat per batch)."""
    surrogate = _SURROGATE.search(query)
    if surrogate is not None:
        raise SinkError(f"query: holds a lone surrogate U+{ord(surrogate.group()):04X} at character "
                        f"{surrogate.start()}, which cannot be written as UTF-8: {_short(query)}")
    pieces = [""]
    ended_at = None
    for match in _TOKEN.finditer(query):
        kind, text = match.lastgroup, match.group()
        if ended_at is not None and kind != "comment" and not text.isspace():
            raise SinkError(f"query: holds more than one statement (text after ';' at {ended_at}): "
                            f"{_short(query)}")
        if kind == "unterminated":
            what = "block comment" if text == "/*" else "backticked name" if text == "`" else "string"
            raise SinkError(f"query: unterminated {what} at character {match.start()}: {_short(query)}")
        if kind == "semicolon":
            ended_at = match.start()
        elif kind == "comment":
            # a quote comment beside a backticked name is console_safe_name's (a rendered statement rendered
            # again stays the same): it goes without a space; any other comment becomes one
            beside_name = text in _QUOTE_COMMENTS and "`" in (query[match.start() - 1:match.start()] +
                                                            query[match.end():match.end() + 1])
            pieces[-1] += "" if beside_name else " "
        elif kind == "param":
            pieces += (_param_name(text[1:]), "")
        elif kind == "string":
            if any(escaped in _LINE_BREAKS for escaped in _ESCAPED.findall(text[1:-1])):
                raise SinkError(f"query: string literal at character {match.start()} escapes a line break "
                                f"(a backslash before it): {_short(query)}")
            pieces[-1] += _one_line_string(text)
        elif kind == "name":
            if any(c in _LINE_BREAKS for c in text):
                raise SinkError(f"query: backticked name {text!r} spans lines: {_short(query)}")
            pieces[-1] += console_safe_name(text, "query")
        else:
            pieces[-1] += _BREAK_RUN.sub(" ", text)
    # the statement stripped and ended with ';' (a literal neither starts nor ends with a space, and is never
    # empty: stripping the ends of the query's text is stripping the statement)
    pieces[0] = pieces[0].lstrip()
    pieces[-1] = pieces[-1].rstrip() + ";"
    names = tuple(pieces[1::2])
    return _Template(tuple(pieces), names, tuple(f"${_printable(name)}" for name in names))


def _printable(name: str) -> str:
    """A parameter's name as errors show it: on one line, whatever a backticked name holds (a carriage return)."""
    return name if name.isprintable() else name.encode("unicode_escape").decode("ascii")


def _param_name(token: str) -> str:
    if token.startswith("`"):
        return token[1:-1].replace("``", "`")
    return token


def _one_line_string(literal: str) -> str:
    """A string literal of the query itself, with raw line breaks turned into escapes."""
    return re.sub(f"[{_LINE_BREAKS}]", lambda m: f"\\u{ord(m.group()):04X}", literal)
