"""Fuzzing (issue 10): every input is accepted or refused with a StreamError naming the field, never a crash.

Property-based tests (hypothesis) over every way a user hands mgstreams a value:

- offset specs (`parse_offset_spec`) and their resolution against partition snapshots;
- `StreamConfig` and its `validate()`;
- Cypher literal rendering (`render_statement`): rendering then reading back round-trips, or is refused;
- the host's HTTP API (a real `mgstreams serve`): POST /streams, PATCH /streams/{name}/offsets, every route;
- the procedures' arguments through the query module (on the mgp test backend, against that host);
- CLI arguments (click's runner against that host, and `parse_spec_argument`);
- librdkafka property names, every one librdkafka documents (its CONFIGURATION.md
  table, read from the installed client at test time), in `configs` and
  `credentials`: only the host's allowlist is ever accepted (issue 26).

A refusal is a StreamError whose message starts with the field it is about (a
400 `{"error": "<field>: ..."}` on the API, one `Exception: <field>: ...` line on
the module, exit 1 with `mgstreams: error: <field>: ...` or a usage error (exit
2) on the CLI); never another exception, a 500 or a traceback. A refusal changes
nothing: after each one the host's stream list and the stream's history are
what they were, and at the end its offsets are too. Each property prints how
many inputs it tried (`pytest -s`) and records it as a test property.

    .venv/bin/python -m pytest -s tests/adversarial/test_fuzz.py
"""
from __future__ import annotations

import datetime as dt
import fractions
import json
import math
import re
import string
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import pytest
from click.testing import CliRunner
from configs import MERGE
from cypher_literal_parser import LiteralParser
from host_helpers import HostProcess
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from mgp_backend import QueryError, query_modules

from mgstreams.cli import cli
from mgstreams.cli.spec_argument import parse_spec_argument
from stream_registry.allowlists import DEFAULT_ALLOWED_CONFIGS, NEVER_SETTABLE, PATH_PROPERTIES
from stream_registry.config import StreamConfig
from stream_registry.errors import ConfigError, OffsetSpecError, SinkError, StreamError
from stream_registry.graph.cypher_literals import (
    INT64_MAX,
    INT64_MIN,
    console_safe_name,
    render_statement,
    to_cypher_literal,
)
from stream_registry.log_lines import one_line
from stream_registry.model import MAX_TIMEOUT_MS, PartitionSnapshot
from stream_registry.offset_spec import (
    Absolute,
    AtTime,
    Earliest,
    GroupOffsets,
    Latest,
    Shift,
    parse_offset_spec,
    parse_target,
    resolve,
)
from stream_registry.redaction import is_secret_key

STREAM = "fuzzed"
CREATE_FIELDS = ("name", "topics", "bootstrap_servers", "transform", "sink", "consumer_group", "batch_size",
                 "batch_interval_ms", "configs", "credentials")
SECRET = "S3CR3T"          # every generated credential value starts with it: it must never be shown
LINE_BREAKS = "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


# -- running a property and counting its inputs -------------------------------------------------------
def fuzz(record_property, name: str, strategy: st.SearchStrategy, check: Callable[[Any], str], *,
         max_examples: int, examples: tuple = ()) -> Counter:
    """Run `check` on `max_examples` generated inputs (plus `examples`, pinned regressions); `check` returns
    "accepted", "refused" (or "skipped"), or raises. Prints and records how many inputs were tried."""
    outcomes: Counter = Counter()

    def body(value):
        outcomes[check(value)] += 1

    run = given(strategy)(body)
    for pinned in examples:
        run = example(pinned)(run)
    run = settings(max_examples=max_examples, deadline=None, database=None, print_blob=True,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                          HealthCheck.filter_too_much, HealthCheck.large_base_example])(run)
    run()
    tried = sum(outcomes.values())
    print(f"\nfuzz {name}: {tried} inputs tried ({outcomes['accepted']} accepted, {outcomes['refused']} refused)")
    record_property(f"{name}.inputs", tried)
    record_property(f"{name}.accepted", outcomes["accepted"])
    record_property(f"{name}.refused", outcomes["refused"])
    assert tried >= max_examples, f"{name}: only {tried} of {max_examples} inputs tried"
    return outcomes


def assert_names_field(message: str, fields: tuple[str, ...]) -> None:
    """One line, starting with the field it is about: `field: ...`, `field[key]: ...` or `field 'x': ...`."""
    assert "\n" not in message and "\r" not in message, f"not one line: {message!r}"
    head = re.match(r"[A-Za-z_$][A-Za-z0-9_]*", message)
    assert head and head.group() in fields, f"does not start with one of {fields}: {message[:300]!r}"
    assert "Traceback" not in message, message


# -- strategies shared by the properties ----------------------------------------------------------------
any_text = st.text(max_size=30)
# Characters of every category, lone surrogates included (Python strings can hold them; JSON escapes them).
wild_text = st.text(st.characters(exclude_categories=()), max_size=30)
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), any_text)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(any_text, inner, max_size=3), max_leaves=6)
# Python refuses to turn an int of more than 4300 digits into text (sys.get_int_max_str_digits), so a test cannot
# send one as JSON; longer digit strings are sent as text by spec_texts (4000 to 6000 nines).
huge_ints = st.integers(min_value=19, max_value=4300).map(lambda n: 10 ** n - 1)

KEYWORDS = ("earliest", "beginning", "smallest", "latest", "end", "largest", "committed")
keyword_texts = st.tuples(st.sampled_from(KEYWORDS), st.randoms(use_true_random=False),
                          st.sampled_from(["", " ", "\t", "\n", "\u00a0"]), st.sampled_from(["", " ", "\n"])).map(
    lambda t: t[2] + "".join(c.upper() if t[1].random() < 0.5 else c for c in t[0]) + t[3])
number_texts = st.one_of(
    st.from_regex(r"\A[+-]?[0-9]{1,25}\Z"),
    st.from_regex(r"\A[+-]?\d{1,4}\Z"),                        # \d: any Unicode decimal digit
    st.integers().map(str),
    st.tuples(st.sampled_from(["", "+", "-"]), st.integers(4000, 6000)).map(lambda t: t[0] + "9" * t[1]),
    st.tuples(st.sampled_from(["", "+", "-"]), st.text("0123456789²³¹⁴٣߁", min_size=1, max_size=6)).map("".join),
)
offsets_of_time = st.one_of(st.none(), st.timezones(),
                            st.timedeltas(-dt.timedelta(hours=23, minutes=59), dt.timedelta(hours=23, minutes=59))
                            .map(dt.timezone))
datetime_texts = st.one_of(
    st.datetimes(timezones=offsets_of_time).map(lambda d: d.isoformat()),
    st.datetimes(timezones=st.just(dt.UTC)).map(lambda d: d.isoformat().replace("+00:00", "Z")),
    st.datetimes().map(lambda d: d.isoformat(sep=" ", timespec="milliseconds")),
    st.dates().map(lambda d: d.isoformat()),
    st.from_regex(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.+Zz-]{0,20}\Z"),
)
duration_texts = st.from_regex(r"\A[+-]?[Pp]([0-9]{1,20}[Dd])?([Tt]([0-9]{1,3}[Hh])?([0-9]{1,3}[Mm])?"
                               r"([0-9]{1,3}([.,][0-9]{0,10})?[Ss])?)?[WY]?\Z")
spec_texts = st.one_of(keyword_texts, number_texts, datetime_texts, duration_texts, any_text,
                       st.text("0123456789+-:TZz. ", max_size=25))
spec_scalars = st.one_of(st.integers(), st.integers(-5, 5), huge_ints, huge_ints.map(lambda n: -n), spec_texts,
                         st.floats(), st.booleans(), st.none())


def spec_keys(topics: list[str]) -> st.SearchStrategy[str]:
    known = st.sampled_from(topics)
    return st.one_of(
        known, known.map(lambda t: t + ":0"), known.map(lambda t: t + ":1"),
        st.tuples(known, st.from_regex(r"\A[0-9]{1,12}\Z")).map(":".join),
        st.tuples(known, st.sampled_from(["\n", " ", ":", ":0\n", "٣", "²", ":-1", ":00"])).map("".join),
        st.from_regex(r"\A[A-Za-z0-9._-]{1,12}(:[0-9]{1,3})?\Z"), any_text)


def offset_values(topics: list[str]) -> st.SearchStrategy:
    maps = st.dictionaries(spec_keys(topics), st.one_of(spec_scalars, json_values), max_size=4)
    return st.one_of(spec_scalars, spec_scalars, maps, json_values)


# -- offset specs ---------------------------------------------------------------------------------------
def _targets(spec) -> list:
    return [t for t in (spec.default, *spec.topics.values(), *spec.partitions.values()) if t is not None]


def _first_ms_at_or_after(text: str) -> int:
    """What an AtTime must hold, computed independently: the first whole millisecond at or after the moment."""
    moment = dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    micros = (moment - EPOCH) // dt.timedelta(microseconds=1)
    return max(0, -(-micros // 1000))


def check_offset_spec(value) -> str:
    try:
        spec = parse_offset_spec(value)
    except OffsetSpecError as exc:
        assert_names_field(str(exc), ("offset",))
        return "refused"
    for target in _targets(spec):
        assert parse_target(target.describe()) == target, f"{target} does not read back from {target.describe()!r}"
        if isinstance(target, (Absolute, Shift)):
            number = target.offset if isinstance(target, Absolute) else abs(target.delta)
            assert 0 <= number <= INT64_MAX, target
        if isinstance(target, AtTime):
            assert target.timestamp_ms == _first_ms_at_or_after(target.text), target
    if isinstance(value, Mapping) and spec.default is not None:   # {"group": NAME}, alone
        assert list(value) == ["group"] and spec.default == GroupOffsets(value["group"]), (value, spec)
    elif isinstance(value, Mapping):
        named = {**{t: spec.topics[t] for t in spec.topics},
                 **{(t, p): target for (t, p), target in spec.partitions.items()}}
        assert len(named) == len(value), f"{value!r} -> {spec!r}: a key was lost or merged"
        for key, raw in value.items():
            topic, colon, partition = key.partition(":")
            where = (topic, int(partition)) if colon else key
            assert re.fullmatch(r"[A-Za-z0-9._-]+", topic), f"key {key!r} accepted"
            assert not colon or re.fullmatch(r"[0-9]+", partition), f"key {key!r} accepted"
            assert named[where] == parse_target(raw), key
    elif isinstance(value, int) and not isinstance(value, bool):
        assert spec.default == (Earliest() if value == -1 else Latest() if value == -2 else Absolute(value))
    return "accepted"


def test_offset_specs_parse_or_are_refused_naming_the_field(record_property):
    fuzz(record_property, "offset_spec", offset_values(["orders", "t.x-1"]), check_offset_spec, max_examples=500,
         examples=("-²", "9" * 5000, "+" + "9" * 5000, "٣", {"orders:0\n": 1}, {"orders:٣": 1},
                   {"orders:1": 5, "orders:01": 7}, "2024-01-01T00:00:00.001Z", "2024-01-01T00:00:00.0005Z",
                   "1969-12-31T23:59:59.999Z", "0001-01-01T00:00:00+23:59", -(10 ** 5000), 10 ** 30,
                   [10 ** 5000], {"orders": {"nested": 1}}, {"group": "g"}, {"group": ""}, {"group": "g", "orders": 1},
                   {"orders:0": {"group": "g"}}, "-PT15M", "-P1D", "PT1M", "-P", "-PT", "-PT1.0000000001S"))


snapshots = st.builds(
    lambda start, length, committed, position: PartitionSnapshot(topic="orders", partition=0, log_start=start,
                                                                 log_end=start + length, committed=committed,
                                                                 position=position),
    st.integers(0, 10 ** 6), st.integers(0, 10 ** 6), st.none() | st.integers(0, 3 * 10 ** 6),
    st.none() | st.integers(0, 3 * 10 ** 6))


def check_resolve(case) -> str:
    value, snap, found, running = case
    try:
        spec = parse_offset_spec(value)
    except OffsetSpecError:
        return "refused"
    try:
        results = resolve(spec, [snap], lambda queries: {(t, p): found for t, p, _ in queries}, running=running,
                          lookup_group=lambda group, tps: {tp: found if found is None or found >= 0 else None
                                                           for tp in tps})
    except OffsetSpecError as exc:   # {"group": ...} that has no commit: an unknown group
        assert found is None or found < 0, exc
        assert "unknown consumer group" in str(exc), exc
        return "refused"
    for r in results:
        if r.unchanged:
            assert r.offset == r.previous_offset and "keeps its offset" in r.message, r
            continue
        if r.failed:
            assert r.message.startswith("orders:0: "), r.message
            continue
        assert snap.log_start <= r.offset <= snap.log_end, (value, snap, r)
    return "accepted"


def test_resolved_offsets_stay_within_the_log(record_property):
    fuzz(record_property, "resolve", st.tuples(offset_values(["orders"]), snapshots,
                                               st.none() | st.integers(-5, 3 * 10 ** 6), st.booleans()),
         check_resolve, max_examples=300)


# -- StreamConfig -------------------------------------------------------------------------------------
def junk() -> st.SearchStrategy:
    return st.one_of(json_values, st.tuples(any_text), st.frozensets(st.integers(), max_size=2), st.binary(max_size=5),
                     wild_text)


secret_values = st.one_of(any_text.map(lambda t: SECRET + t), st.integers(), st.floats(), json_values)
config_keys = st.one_of(st.sampled_from(["client.id", "fetch.wait.max.ms", "sasl.password", "ssl.key.password",
                                         "group.id", "bootstrap.servers", "on_commit", "error_cb", "x_cb",
                                         "partition.assignment.strategy", "group.protocol", "session.timeout.ms",
                                         "sasl.oauthbearer.config", ""]),
                        st.from_regex(r"\A[a-z]{1,8}(\.[a-z]{1,8}){0,2}\Z"), any_text)
config_values = st.one_of(st.sampled_from(["range", "roundrobin", "cooperative-sticky", "range,roundrobin",
                                           "classic", "consumer", "6000", "mg"]),
                          st.integers(), st.booleans(), st.floats(), any_text.map(lambda t: SECRET + t), json_values)


def config_fields(bootstrap: st.SearchStrategy, topics: st.SearchStrategy, sinks: st.SearchStrategy,
                  transforms: st.SearchStrategy, *, with_junk: bool = True) -> st.SearchStrategy[dict]:
    """StreamConfig / POST /streams fields: mostly plausible values, each field sometimes junk or absent."""
    def field(valid):
        return st.one_of(valid, valid, valid, junk()) if with_junk else valid
    names = st.one_of(st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,15}\Z"), st.just(STREAM), any_text,
                      st.sampled_from(["a\n", "a" * 129, "_", "9lives", "a b", ""]))
    fields = {
        "name": field(names), "topics": field(st.one_of(st.lists(topics, max_size=3), topics)),
        "bootstrap_servers": field(bootstrap), "transform": field(transforms), "sink": field(sinks),
        "consumer_group": field(st.one_of(st.none(), st.just(""), st.from_regex(r"\Afz_[a-z0-9]{1,8}\Z"), any_text)),
        "batch_size": field(st.one_of(st.integers(1, 10 ** 6), st.integers())),
        "batch_interval_ms": field(st.one_of(st.integers(1, 10 ** 6), st.integers())),
        "configs": field(st.dictionaries(config_keys, config_values, max_size=3)),
        "credentials": field(st.dictionaries(st.one_of(st.sampled_from(["sasl.username", "sasl.password",
                                                                         "bolt.username", "bolt.password", ""]),
                                                        any_text), secret_values, max_size=3)),
    }
    return st.fixed_dictionaries({}, optional=fields)


def _secrets_in(fields: Mapping) -> list[str]:
    """The generated secrets of a create: every credential value, and config values under secret-looking keys."""
    found = []
    for name, container in (("credentials", fields.get("credentials")), ("configs", fields.get("configs"))):
        if isinstance(container, Mapping):
            found += [v for k, v in container.items() if isinstance(v, str) and v.startswith(SECRET) and len(v) > 6
                      and (name == "credentials" or (isinstance(k, str) and is_secret_key(k)))]
    return found


def check_stream_config(fields: dict) -> str:
    secrets = _secrets_in(fields)
    kwargs = {"name": "s", "topics": ["t"], "bootstrap_servers": "localhost:9092", "transform": "m.f",
              "sink": "null://", **fields}
    try:
        config = StreamConfig(**kwargs)
        shown = repr(config)
        config.validate()
    except ConfigError as exc:
        assert_names_field(str(exc), CREATE_FIELDS)
        assert not [s for s in secrets if s in str(exc)], f"a secret in {exc}"
        return "refused"
    assert not [s for s in secrets if s in shown], f"a secret in {shown}"
    return "accepted"


CONFIG_EXAMPLES = ({"name": "a\n"}, {"topics": ["t\n"]}, {"bootstrap_servers": "h:²"},
                   {"configs": {"group.protocol": [1]}}, {"credentials": {"on_commit": SECRET + "x"}},
                   {"configs": {"sasl.password": SECRET + "x", "x": object()}}, {"topics": {"a": 1}},
                   {"configs": {1: 2}}, {"credentials": "S3CR3T-not-a-map"})


def test_stream_config_is_accepted_or_refused_naming_the_field(record_property):
    plausible = config_fields(st.sampled_from(["localhost:9092", "a:1,b:2", " h:1 "]),
                              st.from_regex(r"\A[A-Za-z0-9._-]{1,20}\Z"),
                              st.sampled_from(["null://", "cypherl:///tmp/x.cypherl", "bolt://h:7687"]),
                              st.sampled_from(["m.f", MERGE]), with_junk=False)
    fields = st.one_of(plausible, config_fields(
        st.one_of(st.sampled_from(["localhost:9092", "a:1,b:2", " h:1 ", "h:", ":1", "h:x"]), any_text),
        st.one_of(st.from_regex(r"\A[A-Za-z0-9._-]{1,20}\Z"), any_text, st.sampled_from([".", ".."])),
        st.one_of(st.sampled_from(["null://", "cypherl:///tmp/x.cypherl", "bolt://h:7687"]), any_text),
        st.one_of(st.sampled_from(["m.f", MERGE, "nodot"]), any_text)))
    fuzz(record_property, "stream_config", fields, check_stream_config, max_examples=500, examples=CONFIG_EXAMPLES)


# -- Cypher literals ------------------------------------------------------------------------------------
fixed_offsets = st.timedeltas(-dt.timedelta(hours=23, minutes=59, seconds=59),
                              dt.timedelta(hours=23, minutes=59, seconds=59)).map(dt.timezone)
literal_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(INT64_MIN - 2, INT64_MIN + 2), huge_ints,
    st.floats(), wild_text, st.binary(max_size=8), st.dates(),
    st.datetimes(timezones=st.none() | st.timezones() | fixed_offsets), st.times(timezones=st.none() | fixed_offsets),
    st.timedeltas(), st.fractions(), st.just(fractions.Fraction(10 ** 400)), st.decimals(allow_nan=True))
cypher_values = st.recursive(
    literal_leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.tuples(inner, inner),
                            st.dictionaries(st.one_of(wild_text, st.integers()), inner, max_size=3),
                            st.frozensets(st.integers(), max_size=2)),
    max_leaves=8)
_KEY_BREAKERS = re.compile(f"[\x00-\x1f\x7f-\x9f{LINE_BREAKS}\ud800-\udfff]")


def representable(value) -> bool:
    """Independently of the renderer: has this value a faithful Cypher literal Memgraph can read?"""
    if value is None or isinstance(value, (bool, str, bytes)):
        if isinstance(value, str):
            return not re.search("[\ud800-\udfff]", value)
        if isinstance(value, bytes):
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                return False
        return True
    if isinstance(value, int):
        return INT64_MIN <= value <= INT64_MAX
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, fractions.Fraction):
        try:
            return math.isfinite(float(value))
        except OverflowError:
            return False
    if isinstance(value, dt.datetime):
        offset = value.utcoffset()
        if offset is None or not offset % dt.timedelta(minutes=1):
            return True
        try:
            value.astimezone(dt.UTC)
            return True
        except OverflowError:
            return False
    if isinstance(value, dt.time):
        return value.utcoffset() is None
    if isinstance(value, dt.date):
        return True
    if isinstance(value, dt.timedelta):
        return abs(value) <= dt.timedelta(microseconds=INT64_MAX)
    if isinstance(value, (list, tuple)):
        return all(representable(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and not _KEY_BREAKERS.search(k) and representable(v)
                   for k, v in value.items())
    return False


def same(read: Any, original: Any) -> bool:
    """`read` (parsed back from the literal) is the value of `original`."""
    if isinstance(original, (list, tuple)):
        return isinstance(read, list) and len(read) == len(original) and all(map(same, read, original))
    if isinstance(original, dict):
        return isinstance(read, dict) and read.keys() == original.keys() and all(
            same(read[k], v) for k, v in original.items())
    if isinstance(original, bytes):
        return read == original.decode("utf-8")
    if isinstance(original, fractions.Fraction):
        return read == float(original)
    if isinstance(original, dt.datetime) and original.utcoffset() is not None:
        offset = original.utcoffset()
        kept = offset if not offset % dt.timedelta(minutes=1) else dt.timedelta(0)
        # the same instant: `==` is False for a zoned time in a repeated hour against any other zone (PEP 495),
        # subtraction compares the UTC instants
        return isinstance(read, dt.datetime) and read - original == dt.timedelta(0) and read.utcoffset() == kept
    if isinstance(original, bool) or original is None:
        return read is original
    return type(read) is type(original) and read == original


_MEMGRAPH_TEMPORAL = re.compile(r'(date|localTime|localDateTime|datetime)\("([^"]*)"\)')


def check_memgraph_readable(literal: str) -> None:
    """What Memgraph's own parser needs beyond our reader: zone offsets as ±HH:MM."""
    for function, text in _MEMGRAPH_TEMPORAL.findall(literal):
        if function == "datetime":
            assert re.search(r"[+-][0-9]{2}:[0-9]{2}$", text), f"offset Memgraph cannot read: {text}"


def check_literal(value) -> str:
    try:
        line = render_statement("MATCH (n {id: $id}) SET n.v = $v RETURN n", {"id": 1, "v": value})
    except SinkError as exc:
        assert_names_field(str(exc), ("parameter",))
        assert str(exc).startswith("parameter $v"), str(exc)
        assert not representable(value), f"refused a representable value: {exc}"
        return "refused"
    assert representable(value), f"rendered a value Memgraph cannot hold faithfully: {line[:200]!r}"
    assert len(line.splitlines()) == 1, f"not one line: {line!r}"
    assert line.startswith("MATCH (n {id: 1}) SET n.v = ") and line.endswith(" RETURN n;"), line
    literal = line[len("MATCH (n {id: 1}) SET n.v = "):-len(" RETURN n;")]
    assert same(LiteralParser(literal).parse_all(), value), f"{value!r} rendered as {literal!r}"
    check_memgraph_readable(literal)
    assert render_statement(line) == line, "a rendered statement renders to itself"
    return "accepted"


def test_cypher_literals_round_trip_or_are_refused(record_property):
    fuzz(record_property, "cypher_literal", cypher_values, check_literal, max_examples=500,
         examples=(10 ** 5000, [10 ** 5000], fractions.Fraction(10 ** 400), dt.timedelta(days=999_999_999),
                   dt.datetime(1900, 1, 1, tzinfo=dt.timezone(dt.timedelta(minutes=19, seconds=32))),
                   dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(seconds=30))), {"``": 1, "`": 2, "": 3}))


# Statements: generated from tokens whose rendering is known, so the expected line is computed independently.
@dataclass(frozen=True)
class Token:
    kind: str      # text, break, string, name, line_comment, block_comment, param, semicolon
    text: str
    expected: str = ""
    refusal: str = ""   # the message start this token must cause, when it makes the statement invalid


_escape_pieces = st.one_of(st.characters(exclude_characters="\\'\"", exclude_categories=()),
                           st.sampled_from(["\\\\", "\\'", '\\"', "\\n", "\\t", "\\r", "\\b", "\\f", "\\u00e9"]),
                           st.sampled_from(list(LINE_BREAKS)))


@st.composite
def string_tokens(draw) -> Token:
    quote = draw(st.sampled_from("'\""))
    pieces = draw(st.lists(st.one_of(_escape_pieces, st.just("\"'".replace(quote, ""))), max_size=8))
    if draw(st.integers(0, 15)) == 0:
        pieces.insert(draw(st.integers(0, len(pieces))), "\\" + draw(st.sampled_from(list(LINE_BREAKS))))
    literal = quote + "".join(pieces) + quote
    escaped_break = any(p.startswith("\\") and p[1:] in LINE_BREAKS for p in pieces)
    surrogate = re.search("[\ud800-\udfff]", literal)
    expected = re.sub(f"[{LINE_BREAKS}]", lambda m: f"\\u{ord(m.group()):04X}", literal)
    return Token("string", literal, expected, "query:" if escaped_break or surrogate else "")


@st.composite
def name_tokens(draw) -> Token:
    content = draw(st.text(st.characters(exclude_categories=("Cs",)), max_size=8))
    literal = "`" + content.replace("`", "``") + "`"
    if any(c in LINE_BREAKS for c in content):
        return Token("name", literal, literal, "query:")
    try:    # a name mgconsole's splitter would cut is written with quote comments, or refused (test_cypherl_frames)
        console_safe_name(literal, "query")
    except SinkError:
        return Token("name", literal, literal, "query:")
    return Token("name", literal, literal)


param_values = st.one_of(st.integers(), st.floats(), any_text, st.none(), st.lists(st.integers(), max_size=2))


@st.composite
def param_tokens(draw, params: dict) -> Token:
    name = draw(st.one_of(st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,6}\Z"), st.from_regex(r"\A[0-9]{1,3}\Z"),
                          st.text(st.characters(exclude_categories=("Cs",), exclude_characters="`"),
                                  min_size=1, max_size=6)))
    bare = re.fullmatch(r"[^\W\d]\w*|\d+", name)
    reference = "$" + (name if bare else "`" + name + "`")
    if draw(st.integers(0, 9)) == 0:   # a reference to a parameter that is not given
        return Token("param", f"$zz_missing_{name.encode().hex()} ", "", "parameter $")
    value = params.setdefault(name, draw(param_values))
    try:
        return Token("param", reference + " ", to_cypher_literal(value, f"${name}") + " ")
    except SinkError:
        return Token("param", reference + " ", "", "parameter $")


@st.composite
def statements(draw):
    params: dict = {}
    tokens = []
    text = st.text(string.ascii_letters + string.digits + " \t(){}[]:,.=<>-+*", min_size=1, max_size=12)
    for _ in range(draw(st.integers(1, 10))):
        kind = draw(st.sampled_from(["text", "text", "break", "string", "name", "line_comment", "block_comment",
                                     "param", "param", "semicolon"]))
        if kind == "text":
            chunk = draw(text)
            tokens.append(Token("text", chunk, chunk))
        elif kind == "break":
            chunk = draw(st.text(LINE_BREAKS, min_size=1, max_size=3))
            tokens.append(Token("break", chunk, " "))
        elif kind == "string":
            tokens.append(draw(string_tokens()))
        elif kind == "name":
            tokens.append(draw(name_tokens()))
        elif kind == "line_comment":
            body = draw(st.text(st.characters(exclude_characters="\r\n", exclude_categories=("Cs",)), max_size=10))
            tokens.append(Token("line_comment", "//" + body, " "))
            tokens.append(Token("break", draw(st.sampled_from(["\n", "\r", "\r\n"])), " "))
        elif kind == "block_comment":
            body = draw(st.text(st.characters(exclude_categories=("Cs",)), max_size=10).filter(
                lambda b: "*/" not in b and not b.endswith("*")))
            tokens.append(Token("block_comment", "/*" + body + "*/", " "))
        elif kind == "param":
            tokens.append(draw(param_tokens(params)))
        else:
            tokens.append(Token("semicolon", ";", ""))
    return tokens, params


def _expected_refusal(tokens: list[Token]) -> str:
    for i, token in enumerate(tokens):
        if token.kind == "semicolon":
            rest = tokens[i + 1:]
            if any(t.kind not in ("break", "line_comment", "block_comment", "semicolon")
                   and not (t.kind == "text" and t.text.isspace()) for t in rest) \
                    or any(t.kind == "semicolon" for t in rest):
                return "query:"
        if token.refusal:
            return token.refusal
    return ""


def _squeezed(text: str) -> str:
    """Whitespace runs as one space, and the quote comments a backticked name may get for mgconsole's splitter
    (`/*"*/`, `/*'*/`: Memgraph skips them) left out."""
    return " ".join(re.sub(r"/\*[\"']\*/", "", text).split())


def check_statement(case) -> str:
    tokens, params = case
    query = "".join(t.text for t in tokens)
    refusal = _expected_refusal(tokens)
    try:
        line = render_statement(query, params)
    except SinkError as exc:
        assert_names_field(str(exc), ("query", "parameter"))
        assert refusal, f"refused a valid statement {query!r}: {exc}"
        return "refused"
    assert not refusal, f"{query!r} should be refused ({refusal}) but rendered as {line!r}"
    assert len(line.splitlines()) == 1 and line.endswith(";"), repr(line)
    expected = "".join(t.expected for t in tokens).strip() + ";"
    assert _squeezed(line) == _squeezed(expected), f"{query!r}: got {line!r}, expected {expected!r}"
    assert render_statement(line) == line, "a rendered statement renders to itself"
    return "accepted"


def test_statements_render_to_one_line_that_reads_back(record_property):
    fuzz(record_property, "cypher_statement", statements(), check_statement, max_examples=500, examples=(
        ([Token("text", "MATCH (n) ", "MATCH (n) "), Token("line_comment", "// note", " "),
          Token("break", "\r", " "), Token("text", "SET n.x = 1", "SET n.x = 1")], {}),
        ([Token("text", "RETURN ", "RETURN "), Token("string", "'a\\\nb'", "", "query:")], {}),
    ))


def test_render_statement_refuses_what_is_not_a_statement():
    for query, params, field in ((None, {}, "query"), (b"RETURN 1", {}, "query"), ("RETURN $a", [("a", 1)],
                                                                                   "parameters")):
        with pytest.raises(SinkError) as caught:
            render_statement(query, params)
        assert_names_field(str(caught.value), (field,))


# -- a real host, one real stream ------------------------------------------------------------------------
@dataclass
class Shared:
    host: HostProcess
    http: httpx.Client
    topic: str
    state_dir: Path
    bootstrap: str
    streams: list
    offsets: list
    bounds: dict

    @property
    def url(self) -> str:
        return self.host.url

    def assert_unchanged(self) -> None:
        """A refusal changed nothing: the stream list and the stream's history are as they were."""
        assert self.http.get("/streams").json() == self.streams
        assert self.http.get(f"/streams/{STREAM}/history").json() == []


@pytest.fixture(scope="module")
def shared(kafka, tmp_path_factory):
    """One host for every HTTP, module and CLI property; a stream `fuzzed` (stopped) on a 2-partition topic
    holding 5 records on partition 0, none on partition 1."""
    base = tmp_path_factory.mktemp("fuzz")
    host = HostProcess(base / "state", env={"MGSTREAMS_OUTPUT_DIRS": str(base / "out")}).start()
    (base / "out").mkdir()
    http = httpx.Client(base_url=host.url, timeout=60)
    try:
        topic = kafka.new_topic(partitions=2, prefix="fz")
        kafka.produce(topic, 5, partitions=1)
        created = http.post("/streams", json={
            "name": STREAM, "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers, "transform": MERGE,
            "sink": f"cypherl://{base / 'out' / 'fuzzed.cypherl'}", "consumer_group": f"fz_{uuid.uuid4().hex[:8]}"})
        assert created.status_code == 201, created.text
        streams = http.get("/streams").json()
        offsets = http.get(f"/streams/{STREAM}/offsets").json()
        bounds = {(r["topic"], r["partition"]): (r["log_start_offset"], r["log_end_offset"]) for r in offsets}
        assert bounds == {(topic, 0): (0, 5), (topic, 1): (0, 0)}
        yield Shared(host, http, topic, base / "state", kafka.bootstrap_servers, streams, offsets, bounds)
        # accepted set-offset calls on the stopped stream leave pending changes, which resume_offset shows
        def committed_view(rows):
            return [{k: v for k, v in row.items() if k != "resume_offset"} for row in rows]
        assert committed_view(http.get(f"/streams/{STREAM}/offsets").json()) == committed_view(offsets), \
            "the fuzzing moved no committed offset"
        assert http.get(f"/streams/{STREAM}/history").json() == []
        # librdkafka's own log lines (`%N|...`, written by the C library) are left to
        # test_librdkafka_log_shows_credentials below; every other line is the host's.
        log = "\n".join(line for line in host.log().splitlines() if not re.match(r"%\d\|", line))
        assert SECRET not in log, "a generated secret reached the host's log"
        assert "Traceback" not in log, log[-3000:]
    finally:
        http.close()
        host.stop()


def check_changes(shared: Shared, rows, dry_run: bool) -> None:
    assert isinstance(rows, list) and rows
    for row in rows:
        low, high = shared.bounds[(row["topic"], row["partition"])]
        assert low <= row["offset"] <= high, row
        assert row["status"] in (("planned", "clamped") if dry_run else ("pending",)), row


# -- the HTTP API ---------------------------------------------------------------------------------------
def _send(http: httpx.Client, method: str, path: str, body) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body, default=_jsonable).encode()   # NaN, surrogates too
    return http.request(method, path, content=content, headers={"Content-Type": "application/json"})


def _jsonable(value):
    """What json.dumps cannot carry, as the nearest JSON (a set as a list, bytes as text)."""
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("latin-1")
    raise TypeError(type(value).__name__)


def _error_of(response: httpx.Response, fields: tuple[str, ...]) -> str:
    assert response.headers.get("content-type", "").startswith("application/json"), response.text[:300]
    error = response.json()["error"]
    assert_names_field(error, fields)
    return error


raw_bodies = st.one_of(st.binary(max_size=40), st.just(b"[" * 100_000), st.just(b'{"offset": ' + b"9" * 5000 + b"}"),
                       st.just(b'{"offset": 1} trailing'), st.just(b"\xff\xfe{}"), st.just(b""))


def good_offsets(topic: str) -> st.SearchStrategy:
    """Specs a stream on `topic` (partitions 0 and 1) takes, whatever the offsets."""
    single = st.one_of(st.integers(-2, 10), st.integers(0, INT64_MAX), keyword_texts.filter(lambda k: "committed"
                                                                                             not in k.lower()),
                       datetime_texts.filter(lambda t: _parses(t)))
    keys = st.sampled_from([topic, f"{topic}:0", f"{topic}:1"])
    return st.one_of(single, st.dictionaries(keys, single, min_size=1, max_size=2))


def _parses(text: str) -> bool:
    try:
        parse_offset_spec(text)
        return True
    except OffsetSpecError:
        return False


def patch_bodies(topic: str) -> st.SearchStrategy:
    good = st.fixed_dictionaries({"offset": good_offsets(topic)}, optional={
        "timeout_ms": st.integers(1, 5000), "dry_run": st.booleans()})
    fields = st.fixed_dictionaries({}, optional={
        "offset": offset_values([topic, "nope"]),
        "timeout_ms": st.one_of(st.integers(1, 5000), st.integers(), st.floats(), json_values),
        "dry_run": st.one_of(st.booleans(), st.booleans(), json_values),
        "extra": json_values})
    return st.one_of(good, good, fields, fields, json_values, raw_bodies)


def test_api_offset_changes_are_applied_or_refused_with_400(shared, record_property):
    def check(body) -> str:
        response = _send(shared.http, "PATCH", f"/streams/{STREAM}/offsets", body)
        if response.status_code == 200:
            check_changes(shared, response.json(), body.get("dry_run") is True)
            return "accepted"
        if response.status_code == 503 and _past_its_deadline(response, body, shared.topic):
            shared.assert_unchanged()
            return "late"
        assert response.status_code == 400, (response.status_code, response.text[:300], body)
        _error_of(response, ("offset", "timeout_ms", "dry_run", "body"))
        shared.assert_unchanged()
        return "refused"

    fuzz(record_property, "api_set_offset", patch_bodies(shared.topic), check, max_examples=150, examples=(
        b'{"offset": ' + b"9" * 5000 + b"}", b"[" * 100_000, {"offset": "-\u00b2"}, {"offset": "\udc80"},
        {"offset": "1969-12-31T23:59:59.999Z", "dry_run": True}, {"offset": {shared.topic + ":1\n": 0}},
        {"offset": 10 ** 30}, {"offset": math.nan}, {"offset": 1, "timeout_ms": 10 ** 30},
        {"offset": "2020-01-01T00:00:00Z", "timeout_ms": 1, "dry_run": True}))


SLOW_RTT_MS = 2000   # every broker's answers this late: longer than any timeout_ms below


def test_a_bad_spec_is_refused_before_a_slow_cluster(shared, embedded_kafka):
    """Issue 46, item 12: under load a set-offset was answered 503 (its lookups past a 115 ms timeout_ms) where
    400 was due. The host asked the cluster before checking the spec against the stream's topics (and looked
    times up before refusing a partition that has nothing to resolve from). With every broker answering 2 s late
    (the embedded cluster's round-trip time, deterministic), a spec that is wrong as it stands is refused at once,
    before any question; a right one waits for the cluster and is answered 503 past its own deadline."""
    topic = shared.topic
    wrong = [{"offset": {"nope": "2020-01-01T00:00:00Z"}, "timeout_ms": 115},
             {"offset": {f"{topic}:0": "2020-01-01T00:00:00Z", "nope:1": 0}, "timeout_ms": 115, "dry_run": True},
             {"offset": "2020-01-01T00:00:00Z", "timeout_ms": 115, "dry_run": "yes"},
             {"offset": {f"{topic}:0": "2020-01-01T13:61:00Z"}, "timeout_ms": 115}]
    for broker in range(1, embedded_kafka.broker_count + 1):
        embedded_kafka.set_rtt(broker, SLOW_RTT_MS)
    try:
        for body in wrong:
            assert _wrong_as_it_stands(body, topic), body
            began = time.monotonic()
            response = _send(shared.http, "PATCH", f"/streams/{STREAM}/offsets", body)
            took = time.monotonic() - began
            assert response.status_code == 400, (response.status_code, response.text, body)
            assert took < SLOW_RTT_MS / 1000, f"refused after {took:.1f} s: the cluster was asked first"
            shared.assert_unchanged()
        right = {"offset": {f"{topic}:0": "2020-01-01T00:00:00Z"}, "timeout_ms": 115, "dry_run": True}
        late = _send(shared.http, "PATCH", f"/streams/{STREAM}/offsets", right)
        assert late.status_code == 503 and _past_its_deadline(late, right, topic), late.text
        shared.assert_unchanged()
    finally:
        for broker in range(1, embedded_kafka.broker_count + 1):
            embedded_kafka.set_rtt(broker, 0)


def _past_its_deadline(response: httpx.Response, body, topic: str) -> bool:
    """A body the host can refuse only by asking the cluster, whose questions (metadata, offsets, a lookup by
    time) did not finish within the caller's own timeout_ms, is answered 503 saying so (a loaded machine took
    longer than the 1 ms to 5 s the strategy draws): an answer, not a refusal. A body that is wrong as it stands
    is never one: it is refused (400) before any question (test_a_bad_spec_is_refused_before_a_slow_cluster)."""
    error = response.json().get("error", "") if response.headers.get("content-type", "").startswith(
        "application/json") else ""
    late = "within the deadline" in error or "(_TIMED_OUT)" in error
    return "timeout_ms" in body and late and not _wrong_as_it_stands(body, topic) if isinstance(body, dict) else False


def _wrong_as_it_stands(body: dict, topic: str) -> bool:
    """What the host refuses without asking the cluster: an unknown field, no offset, a timeout_ms or dry_run of
    the wrong kind, an offset that does not parse or names a topic the stream does not read."""
    timeout_ms = body.get("timeout_ms", 1)
    if set(body) - {"offset", "timeout_ms", "dry_run"} or "offset" not in body or isinstance(timeout_ms, bool) \
            or not isinstance(timeout_ms, int) or not 0 < timeout_ms <= MAX_TIMEOUT_MS \
            or not isinstance(body.get("dry_run", False), bool):
        return True
    try:
        spec = parse_offset_spec(body["offset"])
    except OffsetSpecError:
        return True
    return not {*spec.topics, *(t for t, _ in spec.partitions)} <= {topic}


create_sinks = st.one_of(st.sampled_from(["null://", "bolt://localhost:7687", "cypherl:///etc/passwd",
                                          "cypherl://relative.cypherl", "ftp://x", "bolt://u:p@h:1"]), any_text)


def test_api_create_stores_a_stream_or_is_refused_with_400(shared, record_property):
    out = Path(shared.host.env["MGSTREAMS_OUTPUT_DIRS"])
    bootstrap = st.one_of(st.just(shared.bootstrap), st.just(shared.bootstrap),
                          st.sampled_from(["", "nohost", "h:", ":1", "h:x", " , "]),
                          any_text.filter(lambda t: ":" not in t))
    topics = st.one_of(st.just(shared.topic), st.sampled_from([".", "..", "bad topic", "t" * 250]),
                       any_text.filter(lambda t: not re.fullmatch(r"[A-Za-z0-9._-]+", t)))
    sinks = st.one_of(st.just(f"cypherl://{out}/s.cypherl"), create_sinks,
                      st.sampled_from([f"cypherl://{out}/../x.cypherl", f"cypherl://{shared.state_dir}/x.cypherl"]))
    # Only names nothing can import (no module `zz_fuzz_missing`), or that fail the 'module.function' form.
    transforms = st.one_of(st.sampled_from(["", MERGE, "nodot", "stream_registry.builtin_transformations.nope",
                                            "os.path"]),
                           st.from_regex(r"\A[a-z]{1,6}\Z").map(lambda f: "zz_fuzz_missing." + f),
                           any_text.filter(lambda t: not re.fullmatch(r"[\w.]+", t)))
    good = st.fixed_dictionaries(
        {"name": st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,15}\Z").filter(lambda n: n != STREAM),
         "topics": st.just([shared.topic]), "bootstrap_servers": st.just(shared.bootstrap)},
        optional={"transform": st.sampled_from(["", MERGE]), "sink": st.sampled_from(
            ["null://", "bolt://localhost:7687", f"cypherl://{out}/good.cypherl"]),
            "consumer_group": st.one_of(st.just(""), st.from_regex(r"\Afz_[a-z0-9]{1,8}\Z")),
            "batch_size": st.integers(1, 10 ** 6), "batch_interval_ms": st.integers(1, 10 ** 6),
            "configs": st.dictionaries(st.sampled_from(["client.id", "session.timeout.ms", "sasl.password"]),
                                       st.sampled_from(["mg", "6000", SECRET + "cfg"]), max_size=2),
            "credentials": st.dictionaries(st.sampled_from(["bolt.username", "bolt.password"]),
                                           any_text.map(lambda t: SECRET + t), max_size=2)})
    bodies = st.one_of(good, good, config_fields(bootstrap, topics, sinks, transforms), config_fields(
        bootstrap, topics, sinks, transforms).map(lambda f: {**f, "unknown_field": 1}), json_values, raw_bodies)

    def check(body) -> str:
        secrets = _secrets_in(body) if isinstance(body, dict) else []
        response = _send(shared.http, "POST", "/streams", body)
        assert not [s for s in secrets if s in response.text], f"a secret in {response.text}"
        if response.status_code == 201:
            name = response.json()["name"]
            assert name == body["name"] and name != STREAM
            dropped = shared.http.delete(f"/streams/{quote(name, safe='')}")
            assert dropped.status_code == 200, dropped.text
            shared.assert_unchanged()
            return "accepted"
        if response.status_code == 409:
            assert _error_of(response, ("name",)) == f"name: a stream named {STREAM!r} already exists"
        else:
            assert response.status_code == 400, (response.status_code, response.text[:500], body)
            _error_of(response, (*CREATE_FIELDS, "body"))
        shared.assert_unchanged()
        return "refused"

    fuzz(record_property, "api_create", bodies, check, max_examples=120, examples=(
        {"name": "ok_one", "topics": [shared.topic], "bootstrap_servers": shared.bootstrap},
        {"name": "a\n", "topics": [shared.topic], "bootstrap_servers": shared.bootstrap},
        {"name": "x", "topics": [shared.topic], "bootstrap_servers": shared.bootstrap,
         "credentials": {"sasl.mechanism": SECRET + "mech"}},
        {"name": "x", "topics": [shared.topic], "bootstrap_servers": shared.bootstrap,
         "configs": {"fetch.wait.max.ms": SECRET + "v"}},
        {"name": STREAM, "topics": [shared.topic], "bootstrap_servers": shared.bootstrap}))


routes = st.one_of(
    st.tuples(st.sampled_from(["GET", "PUT", "PATCH", "DELETE", "POST"]),
              st.one_of(st.just(""), st.just(STREAM), any_text, wild_text,
                        st.sampled_from([".", "..", "a/b", "%2F", "?", "#"])),
              st.sampled_from(["", "/start", "/stop", "/offsets", "/history", "/junk", "/"]), st.none()),
    st.tuples(st.just("GET"), st.just(STREAM), st.just("/history"),
              st.one_of(any_text, st.from_regex(r"\A[0-9]{1,25}\Z"),
                        st.sampled_from(["0", "-1", "\u00b2", "9" * 5000, "99999999999999999999"]))))


def test_api_routes_answer_json_errors_never_500(shared, record_property):
    def check(case) -> str:
        method, name, suffix, limit = case
        if name == STREAM and method in ("PUT", "DELETE", "PATCH", "POST"):
            return "skipped"
        # dots percent-encoded: the name reaches the host as drawn (an HTTP client resolves a literal `/streams/..`
        # to `/`, which answers 303 to /ui, and `/streams/./start` to `/streams/start`)
        path = "/streams/" + quote(name, safe="", errors="surrogatepass").replace(".", "%2E") + suffix
        if method == "GET" and suffix == "/history" and limit is not None:
            response = shared.http.get(f"/streams/{STREAM}/history", params={"limit": limit})
        else:
            response = shared.http.request(method, path)
        assert response.status_code in (200, 400, 404, 405), (response.status_code, response.text[:300], case)
        if response.status_code >= 400:
            _error_of(response, ("name", "path", "method", "limit", "body", "offset"))
            shared.assert_unchanged()
            return "refused"
        return "accepted"

    outcomes = fuzz(record_property, "api_routes", routes, check, max_examples=150, examples=(
        ("GET", STREAM, "/history", "\u00b2"), ("GET", STREAM, "/history", "9" * 5000), ("DELETE", "", "", None),
        ("PUT", "", "/start", None), ("GET", "a/b", "/offsets", None), ("PUT", "..", "/start", None),
        ("GET", "..", "", None), ("GET", ".", "/start", None)))
    assert outcomes["skipped"] < outcomes["refused"]


# -- the query module -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def memgraph(shared):
    with query_modules(shared.url) as server:
        yield server


def module_error(error: QueryError, procedure: str, fields: tuple[str, ...]) -> None:
    """One line: Memgraph's argument check naming the argument, or the module's `Exception: field: ...`."""
    assert "During handling" not in error.message, error.message
    line = error.message.strip().splitlines()[-1] if error.message.strip() else ""
    checked = re.fullmatch(rf"'{re.escape(procedure)}' argument named '(\w+)' at position \d+ must be of type .+\.",
                           error.message)
    if checked:
        assert checked.group(1) in fields, error.message
        return
    assert line.startswith("Exception: "), error.message[-500:]
    assert_names_field(line[len("Exception: "):], fields)


cypher_scalars = st.one_of(st.none(), st.booleans(), st.integers(INT64_MIN, INT64_MAX), st.floats(), any_text,
                           st.dates(), st.datetimes(), st.times(), st.timedeltas())
cypher_any = st.recursive(cypher_scalars, lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(any_text, inner, max_size=3), max_leaves=6)


def test_module_set_stream_offset_applies_or_fails_in_one_line(shared, memgraph, record_property):
    names = st.one_of(st.just(STREAM), st.just(STREAM), st.just(STREAM), any_text, st.just(""))
    offsets = st.one_of(offset_values([shared.topic, "nope"]).filter(lambda v: not _too_big_for_cypher(v)),
                        cypher_any)
    cases = st.tuples(names, offsets, st.one_of(st.integers(1, 5000), st.integers(INT64_MIN, INT64_MAX)),
                      st.booleans())

    def check(case) -> str:
        name, offset, timeout_ms, dry_run = case
        try:
            rows = memgraph.call("streams.set_stream_offset", name, offset, timeout_ms, dry_run)
        except QueryError as error:
            module_error(error, "streams.set_stream_offset", ("name", "offset", "timeout_ms", "dry_run"))
            shared.assert_unchanged()
            return "refused"
        assert name == STREAM
        check_changes(shared, rows, dry_run)
        return "accepted"

    fuzz(record_property, "module_set_stream_offset", cases, check, max_examples=120, examples=(
        (STREAM, 10, INT64_MAX, False), (STREAM, "-\u00b2", 100, True), ("", 0, 100, True), ("a/b", 0, 100, True),
        ("..", 0, 100, True), (STREAM, {shared.topic: dt.date(2024, 1, 1)}, 100, True)))


def _too_big_for_cypher(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return not INT64_MIN <= value <= INT64_MAX
    if isinstance(value, (list, tuple)):
        return any(map(_too_big_for_cypher, value))
    if isinstance(value, dict):
        return any(not isinstance(k, str) or _too_big_for_cypher(v) for k, v in value.items())
    return False


def test_module_create_stores_a_stream_or_fails_in_one_line(shared, memgraph, record_property):
    out = Path(shared.host.env["MGSTREAMS_OUTPUT_DIRS"])
    cases = st.tuples(
        st.one_of(st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,12}\Z"), st.just(STREAM), any_text),
        st.lists(st.one_of(st.just(shared.topic), any_text.filter(lambda t: not re.fullmatch(r"[A-Za-z0-9._-]+", t))),
                 max_size=2),
        st.one_of(st.just(shared.bootstrap), st.just(shared.bootstrap), any_text.filter(lambda t: ":" not in t)),
        st.one_of(st.just(""), st.just(MERGE), any_text.filter(lambda t: not re.fullmatch(r"[\w.]+", t))),
        st.one_of(st.just(f"cypherl://{out}/m.cypherl"), st.just("null://"), create_sinks),
        st.one_of(st.just(""), any_text),
        st.integers(INT64_MIN, INT64_MAX), st.one_of(st.integers(1, 1000), st.integers(INT64_MIN, INT64_MAX)),
        st.one_of(st.just({}), st.dictionaries(config_keys, cypher_any, max_size=2)),
        st.one_of(st.just({}), st.dictionaries(any_text, st.one_of(any_text.map(lambda t: SECRET + t), cypher_any),
                                               max_size=2)))

    good = st.tuples(
        st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,12}\Z").filter(lambda n: n != STREAM), st.just([shared.topic]),
        st.just(shared.bootstrap), st.sampled_from(["", MERGE]),
        st.sampled_from(["null://", f"cypherl://{out}/m.cypherl"]), st.one_of(st.just(""), any_text),
        st.integers(1, 10 ** 6), st.integers(1, 10 ** 6),
        st.dictionaries(st.sampled_from(["client.id", "sasl.password"]), st.sampled_from(["mg", SECRET + "c"]),
                        max_size=2),
        st.dictionaries(st.sampled_from(["bolt.username", "bolt.password"]), any_text.map(lambda t: SECRET + t),
                        max_size=2))
    cases = st.one_of(good, cases)

    def check(case) -> str:
        try:
            rows = memgraph.call("streams.create", *case)
        except QueryError as error:
            module_error(error, "streams.create", CREATE_FIELDS)
            secrets = [v for v in case[9].values() if isinstance(v, str) and v.startswith(SECRET) and len(v) > 6]
            assert not [s for s in secrets if s in error.message], error.message
            shared.assert_unchanged()
            return "refused"
        assert rows == [{"name": case[0], "status": "created"}]
        assert memgraph.call("streams.drop", case[0])[0]["name"] == case[0]
        shared.assert_unchanged()
        return "accepted"

    fuzz(record_property, "module_create", cases, check, max_examples=100, examples=(
        ("ok_mod", [shared.topic], shared.bootstrap, "", "null://", "", 10, 10, {}, {}),
        ("a\n", [shared.topic], shared.bootstrap, "", "null://", "", 10, 10, {}, {}),))


def test_module_stream_procedures_refuse_unknown_names_in_one_line(shared, memgraph, record_property):
    cases = st.tuples(st.sampled_from(["streams.start", "streams.stop", "streams.drop", "streams.offsets",
                                       "streams.history"]),
                      st.one_of(any_text, st.sampled_from(["", ".", "..", "a/b", "%2F", "?x", "#"])).filter(
                          lambda n: n != STREAM))

    def check(case) -> str:
        procedure, name = case
        try:
            memgraph.call(procedure, name)
        except QueryError as error:
            module_error(error, procedure, ("name",))
            shared.assert_unchanged()
            return "refused"
        raise AssertionError(f"{procedure}({name!r}) found a stream")

    fuzz(record_property, "module_names", cases, check, max_examples=100,
         examples=(("streams.drop", ""), ("streams.start", ".."), ("streams.offsets", "a/b")))


# -- the CLI ---------------------------------------------------------------------------------------------
SAFE_COMMANDS = ("list", "describe", "set-offset", "history")
cli_words = st.one_of(st.sampled_from([*SAFE_COMMANDS, "--json", "--dry-run", "--timeout", "--limit", "--url", "-h",
                                       "--count", "--interval", STREAM, "0", "-1", "earliest", "--", "-x"]),
                      any_text)


def cli_argvs(topic: str) -> st.SearchStrategy[list[str]]:
    names = st.one_of(st.just(STREAM), st.just(STREAM), any_text)
    spec = st.one_of(spec_texts, offset_values([topic, "nope"]).map(lambda v: json.dumps(v)),
                     st.just(json.dumps({topic: "earliest"})))
    set_offset = st.tuples(names, spec, st.lists(st.one_of(
        st.just(["--dry-run"]), st.just(["--json"]), st.tuples(st.just("--timeout"), st.one_of(
            st.sampled_from(["0", "1", "3601", "nan", "inf", "-1", "0.001"]), any_text)).map(list)), max_size=3)
    ).map(lambda t: ["set-offset", t[0], t[1], *[w for opt in t[2] for w in opt]])
    history = st.tuples(names, st.one_of(any_text, st.sampled_from(["0", "1", "²", "9" * 5000]))).map(
        lambda t: ["history", t[0], "--limit", t[1]])
    describe = names.map(lambda n: ["describe", n, "--json"])
    watch = st.tuples(names, st.one_of(st.sampled_from(["nan", "inf", "0.1", "0.05", "-1"]), any_text)).map(
        lambda t: ["describe", t[0], "--watch", "--count", "2", "--interval", t[1], "--json"])
    urls = st.one_of(st.sampled_from(["localhost:8765", "ftp://x", "http://", "http://[::1", ""]),
                     any_text.filter(lambda t: not t.lower().startswith("http")))
    with_url = st.tuples(urls, st.sampled_from(SAFE_COMMANDS)).map(lambda t: ["--url", t[0], t[1], STREAM])
    # `kafka` runs a cluster until Ctrl-C: the invalid --brokers after the fuzzed option keeps it from running.
    kafka = st.lists(st.one_of(any_text, st.sampled_from(["x:²", "x:0", "x:3", ":3", "x:" + "9" * 5000])),
                     min_size=1, max_size=2).map(
        lambda topics: ["kafka", *[w for t in topics for w in ("--partitions-topic", t)], "--brokers", "0"])
    anything = st.lists(cli_words, max_size=5).filter(lambda words: not (set(words) & {"--watch", "serve", "kafka",
                                                                                          "start", "stop", "drop",
                                                                                          "backfill"}))
    return st.one_of(set_offset, set_offset, set_offset, history, describe, watch, with_url, kafka, anything)


def test_cli_exits_0_1_or_2_with_one_line(shared, record_property):
    runner = CliRunner(env={"MGSTREAMS_URL": shared.url, "MGSTREAMS_TOKEN": ""})

    def check(argv) -> str:
        result = runner.invoke(cli, argv, catch_exceptions=True)
        assert result.exception is None or isinstance(result.exception, SystemExit), \
            f"{argv!r} crashed: {result.exception!r}\n{result.output[-2000:]}"
        assert "Traceback" not in result.output, result.output
        if result.exit_code == 0:
            if argv[:1] == ["set-offset"] and "--json" in argv and argv[1] == STREAM and \
                    not {"-h", "--help"} & set(argv):   # the help, not an answer (found: set-offset s -h --json)
                check_changes(shared, json.loads(result.stdout), "--dry-run" in argv)
            return "accepted"
        if result.exit_code == 1:
            lines = result.stderr.splitlines()
            assert len(lines) == 1 and lines[0].startswith("mgstreams: error: "), (argv, result.stderr)
            assert_names_field(lines[0][len("mgstreams: error: "):], ("name", "offset", "SPEC", "url", "host",
                                                                      "limit", "timeout", "timeout_ms", "dry_run",
                                                                      "body", "path"))
        else:
            assert result.exit_code == 2, (argv, result.exit_code, result.output)
            assert result.stderr.startswith("Usage:"), result.stderr   # then `Error: ...`, or the help
        shared.assert_unchanged()
        return "refused"

    fuzz(record_property, "cli", cli_argvs(shared.topic), check, max_examples=150, examples=(
        ["set-offset", STREAM, '{"a": ' + "9" * 5000 + "}", "--dry-run"], ["set-offset", STREAM, "[" * 50_000],
        ["set-offset", STREAM, "9" * 5000, "--dry-run"], ["set-offset", STREAM, "-²"],
        ["history", STREAM, "--limit", "²"], ["kafka", "--partitions-topic", "x:²", "--brokers", "0"],
        ["describe", "", "--json"], ["history", "..", "--limit", "1"], ["describe", "a/b"],
        ["set-offset", STREAM, "0", "--timeout", "nan"], ["describe", STREAM, "--watch", "--count", "2", "--interval",
                                                          "nan"], ["set-offset", STREAM, "-h", "--json"]))


def test_cli_spec_argument_parses_or_is_refused(record_property):
    texts = st.one_of(spec_texts, json_values.map(json.dumps), st.just("[" * 50_000), st.just("9" * 5000),
                      st.just('{"t": ' + "9" * 5000 + "}"), st.just('"' + "-" * 3 + '"'))

    def check(text: str) -> str:
        try:
            parse_offset_spec(parse_spec_argument(text))
        except StreamError as exc:
            assert_names_field(str(exc), ("SPEC", "offset"))
            return "refused"
        return "accepted"

    fuzz(record_property, "cli_spec_argument", texts, check, max_examples=300,
         examples=("9" * 5000, "[" * 50_000, '{"t": ' + "9" * 5000 + "}", "-²", "٣"))


# -- found by fuzzing in the config, the registry and the Kafka client; fixed there ----------------------------
@pytest.mark.parametrize("fields", [{"name": "a\n"}, {"topics": ["t\n"]}])
def test_config_refuses_a_trailing_newline(fields):
    with pytest.raises(ConfigError):
        StreamConfig(**{"name": "s", "topics": ["t"], "bootstrap_servers": "h:1", "transform": "m.f",
                        "sink": "null://", **fields}).validate()


@pytest.mark.parametrize("servers", ["h:\u00b2", "h:99999", "h:0"])
def test_config_refuses_ports_that_are_not_ports(servers):
    with pytest.raises(ConfigError, match="^bootstrap_servers: "):
        StreamConfig("s", ["t"], servers, "m.f", "null://").validate()


def test_api_create_error_never_shows_a_credential(shared):
    response = shared.http.post("/streams", json={"name": "leak_probe", "topics": [shared.topic],
                                                  "bootstrap_servers": shared.bootstrap,
                                                  "credentials": {"security.protocol": SECRET + "proto"}})
    assert response.status_code == 400
    assert SECRET not in response.text, response.text


def test_librdkafka_log_lines_never_show_a_credential(shared):
    response = shared.http.post("/streams", json={"name": "log_probe", "topics": [shared.topic],
                                                  "bootstrap_servers": shared.bootstrap,
                                                  "credentials": {"sasl.mechanism": SECRET + "mech"}})
    if response.status_code == 201:
        shared.http.delete("/streams/log_probe")
    assert SECRET + "mech" not in shared.host.log()


# -- librdkafka properties: only the allowlist gets through (issue 26) ----------------------------------
def librdkafka_properties() -> list[str]:
    """Every property librdkafka documents, from the installed client's own table (what CONFIGURATION.md is
    generated from: rd_kafka_conf_properties_show), so the list is the client's, not a copy in this repo."""
    import ctypes
    import tempfile

    from mgstreams.embedded_kafka import _load_librdkafka

    lib, libc = _load_librdkafka(), ctypes.CDLL(None)
    libc.fopen.restype, libc.fopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_char_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_conf_properties_show.argtypes = [ctypes.c_void_p]
    with tempfile.NamedTemporaryFile("r", suffix=".md") as table:
        handle = libc.fopen(table.name.encode(), b"w")
        lib.rd_kafka_conf_properties_show(handle)
        libc.fclose(handle)
        rows = [line.split("|")[0].strip() for line in table.read().splitlines() if "|" in line]
    names = sorted({r for r in rows if re.fullmatch(r"[a-z_][a-z0-9_.]*", r) and r != "property"})
    assert len(names) > 150 and "plugin.library.paths" in names and "ssl.engine.location" in names, names[:10]
    return names


LIBRDKAFKA_PROPERTIES = librdkafka_properties()
property_values = st.one_of(st.sampled_from(["1", "100", "true", "false", "all", "none", "plaintext", "/tmp/x.so",
                                             "https://idp.example/token", "127.0.0.1:9092", "probe"]),
                            st.integers(0, 10 ** 6), st.booleans(), any_text.map(lambda t: SECRET + t))


def check_librdkafka_property(case) -> str:
    where, key, value = case
    fields = {"name": "s", "topics": ["t"], "bootstrap_servers": "localhost:9092", "transform": "m.f",
              "sink": "null://", where: {key: value}}
    try:
        StreamConfig(**fields).validate()
    except ConfigError as exc:
        assert str(exc).startswith(f"{where}[{key!r}]: "), str(exc)
        secret = where == "credentials" or is_secret_key(key)     # a credential, or a secret-looking config
        assert not (secret and isinstance(value, str) and len(value) > 6 and value in str(exc)), str(exc)
        return "refused"
    assert key in DEFAULT_ALLOWED_CONFIGS, f"{where}[{key!r}] = {value!r} was accepted but is not allowlisted"
    assert key not in NEVER_SETTABLE and not key.endswith("_cb")
    # no operator file directories here: a path is accepted only as librdkafka's own CA search ("probe")
    assert key not in PATH_PROPERTIES or (key, value) == ("ssl.ca.location", "probe"), (key, value)
    return "accepted"


def test_only_allowlisted_librdkafka_properties_are_ever_accepted(record_property):
    cases = st.tuples(st.sampled_from(["configs", "credentials"]),
                      st.one_of(st.sampled_from(LIBRDKAFKA_PROPERTIES), st.sampled_from(sorted(NEVER_SETTABLE))),
                      property_values)
    outcomes = fuzz(record_property, "librdkafka_properties", cases, check_librdkafka_property, max_examples=1500,
                    examples=tuple((w, k, "/tmp/x.so") for w in ("configs", "credentials")
                                   for k in ("plugin.library.paths", "ssl.engine.location", "ssl.providers",
                                             "sasl.kerberos.kinit.cmd", "oauthbearer_token_refresh_cb")))
    assert outcomes["accepted"] and outcomes["refused"]


def test_every_documented_property_is_refused_or_allowlisted():
    """The whole table, each name once: what is not on the allowlist is refused in both maps."""
    accepted = set()
    for key in LIBRDKAFKA_PROPERTIES:
        for where in ("configs", "credentials"):
            if check_librdkafka_property((where, key, "1")) == "accepted":
                accepted.add(key)
    assert accepted <= DEFAULT_ALLOWED_CONFIGS
    assert not accepted & (NEVER_SETTABLE | PATH_PROPERTIES)


def test_api_create_accepts_only_allowlisted_properties(shared, record_property):
    cases = st.tuples(st.sampled_from(["configs", "credentials"]), st.sampled_from(LIBRDKAFKA_PROPERTIES),
                      st.sampled_from(["1", "100", "false", "/tmp/x.so"]))

    def check(case) -> str:
        where, key, value = case
        response = _send(shared.http, "POST", "/streams", {
            "name": "prop_probe", "topics": [shared.topic], "bootstrap_servers": shared.bootstrap,
            "sink": "null://", where: {key: value}})
        if response.status_code == 201:
            assert key in DEFAULT_ALLOWED_CONFIGS and key not in PATH_PROPERTIES, (where, key)
            assert shared.http.delete("/streams/prop_probe").status_code == 200
            return "accepted"
        assert response.status_code == 400, (where, key, response.status_code, response.text[:300])
        error = _error_of(response, ("configs", "credentials", "bootstrap_servers"))
        if key not in DEFAULT_ALLOWED_CONFIGS:
            assert error.startswith(f"{where}[{key!r}]: "), error
        shared.assert_unchanged()
        return "refused"

    fuzz(record_property, "api_librdkafka_properties", cases, check, max_examples=80,
         examples=(("configs", "plugin.library.paths", "/tmp/x.so"), ("credentials", "plugin.library.paths", "/tmp/x.so"),
                   ("configs", "ssl.engine.location", "/tmp/x.so"), ("configs", "client.id", "1")))


# -- parse once, check what is used (issue 31) --------------------------------------------------------------------
# The host may reach exactly these; every value the host would connect to must be one of them, by plain equality.
REACHABLE = ("127.0.0.1", "localhost")
HIDDEN_CHARS = (" \t\n\r\x0b\x0c\x00\x01\x1b\x7f\x85\xa0\u2000\u2028\u2029\u3000"   # whitespace and controls
                "\u200b\u200c\u200e\u202e\u2066\ufeff")                                 # format (zero-width, bidi)
LOOK_ALIKES = ("１２７.0.0.1", "127。0.0.1", "127．0.0.1", "ｌｏｃａｌｈｏｓｔ", "lоcalhost", "locaⅼhost", "127.0.0.１",
               "localhost：9092", "ⓛocalhost", "LOCALHOST", "localhost.", "127.1", "127.0.1", "2130706433",
               "0x7f.0.0.1", "0177.0.0.1", "[::ffff:127.0.0.1]", "[::1]", "127.0.0.2", "evil.example",
               "127.0.0.1.evil.example", "localhost.evil.example")
PERCENT = ("%20", "%00", "%0a", "%2e", "%31%32%37.0.0.1", "127.0.0.1%2f", "%40evil.example", "localhost%00.evil")
SMUGGLED = ("127.0.0.1@evil.example", "evil.example@127.0.0.1", "evil.example\\@127.0.0.1", "127.0.0.1\\evil",
            "127.0.0.1:1 evil.example", "127.0.0.1#@evil.example", "127.0.0.1?@evil.example", "evil.example;127.0.0.1")


def hostile_hosts() -> st.SearchStrategy:
    return st.one_of(st.sampled_from(REACHABLE + LOOK_ALIKES + PERCENT + SMUGGLED),
                     st.builds(lambda host, char, where: _insert(host, char, where),
                               st.sampled_from(REACHABLE), st.sampled_from(HIDDEN_CHARS), st.integers(0, 12)))


def hostile_texts(base: str) -> st.SearchStrategy:
    """`base` with a hidden character, a look-alike or a percent-escape put somewhere in it."""
    return st.builds(_insert, st.just(base),
                     st.one_of(st.sampled_from(HIDDEN_CHARS), st.sampled_from(("ａ", "е", "。", "%0a", "%00", "\\"))),
                     st.integers(0, len(base)))


def _insert(text: str, char: str, where: int) -> str:
    where = min(where, len(text))
    return text[:where] + char + text[where:]


def field_values() -> st.SearchStrategy:
    """(field, value) for every field that takes a URI, host or name."""
    return st.one_of(
        st.tuples(st.just("sink"), st.builds(lambda scheme, host, port, pre, post: f"{pre}{scheme}://{host}{port}{post}",
                                             st.sampled_from(("bolt", "bolt+s", "BOLT", "bolt+ssc")), hostile_hosts(),
                                             st.sampled_from(("", ":7687", ":１", ":7687/", "/x")),
                                             st.sampled_from(("", " ", "\t", "\x01", "\u200b")),
                                             st.sampled_from(("", " ", "\n", "?retries=1", "#x")))),
        st.tuples(st.just("bootstrap_servers"),
                  st.builds(lambda hosts, sep: sep.join(f"{h}:9092" for h in hosts),
                            st.lists(hostile_hosts(), min_size=1, max_size=3), st.sampled_from((",", ", ", " ", ";")))),
        st.tuples(st.just("oauth_url"), st.builds(lambda scheme, host, path: f"{scheme}://{host}{path}",
                                                  st.sampled_from(("https", "http", "HTTPS", " https")),
                                                  hostile_hosts(), st.sampled_from(("/token", "/t%0aok", "", "/a b")))),
        st.tuples(st.just("spark_remote"), st.builds(lambda host, tail: f"sc://{host}{tail}", hostile_hosts(),
                                                     st.sampled_from((":15002", ":15002/;token=x", "", ":1 ")))),
        st.tuples(st.just("consumer_group"), hostile_texts("mgstreams_group")),
        st.tuples(st.just("name"), hostile_texts("stream_a")),
        st.tuples(st.just("topics"), hostile_texts("orders.v1")),
        st.tuples(st.just("transform"), hostile_texts("stream_helpers.offsets_transform")),
    )


def _used(field: str, value: str) -> list[str]:
    """What the host would act on for `field` = `value`: the hosts it would connect to, or the name it would use;
    ConfigError if it is refused."""
    from spark_bridge.spark_session import check_remote
    from stream_registry.graph.sinks.schemes import parse_sink_uri

    if field == "spark_remote":
        return [check_remote(value)]
    base = {"name": "s", "topics": ["t"], "bootstrap_servers": "127.0.0.1:9092", "transform": "m.f", "sink": "null://"}
    if field == "oauth_url":
        config = StreamConfig(**base, configs={"sasl.oauthbearer.token.endpoint.url": value})
    else:
        config = StreamConfig(**{**base, field: [value] if field == "topics" else value})
    config.validate()
    client = config.client_config()
    if field == "sink":
        return [parse_sink_uri(config.sink, check_hosts=True)[1].host]
    if field == "bootstrap_servers":   # split as librdkafka splits a broker list: on commas and spaces
        return [re.sub(r"^\w+://", "", entry).rpartition(":")[0] for entry in re.split(r"[, ]+", client[
            "bootstrap.servers"])]
    if field == "oauth_url":
        return [urlsplit(client["sasl.oauthbearer.token.endpoint.url"]).hostname or ""]
    return [config.group_id if field == "consumer_group" else str(getattr(config, field) if field != "topics"
                                                                   else config.topics[0])]


def test_uris_hosts_and_names_are_refused_or_used_exactly_as_checked(record_property, monkeypatch):
    """Whitespace, controls, Unicode look-alikes, percent-escapes and smuggled hosts in every field that takes a URI,
    a host or a name: refused naming the field, or what the host would use (the parsed value, read back the way the
    client reads it) is one of the allowed hosts by plain equality, or a name of printable ASCII-safe text."""
    monkeypatch.setenv("MGSTREAMS_ALLOWED_HOSTS", ",".join(REACHABLE))
    monkeypatch.setenv("MGSTREAMS_ALLOWED_CONFIGS", "")
    kinds: Counter = Counter()

    def check(drawn) -> str:
        field, value = drawn
        kinds[field] += 1
        shown_field = {"oauth_url": "configs['sasl.oauthbearer.token.endpoint.url']", "spark_remote": "--remote",
                       "name": "name"}.get(field, field)
        try:
            used = _used(field, value)
        except ConfigError as exc:
            assert str(exc).startswith(f"{shown_field}: ") or str(exc).startswith(f"{shown_field}["), (field, value,
                                                                                                        str(exc))
            assert not any(c in str(exc) for c in LINE_BREAKS + "\x00\x1b\u202e"), str(exc)  # escaped, one line
            return "refused"
        for item in used:
            assert item == item.strip() and one_line(item) == item, (field, value, used)   # a log line keeps it whole
            if field != "consumer_group":   # Kafka's group ids are any printable text; the rest is ASCII
                assert item.isascii() and item.isprintable() and " " not in item, (field, value, used)
            if field in ("sink", "bootstrap_servers", "oauth_url"):
                assert item in REACHABLE, (field, value, used)
            if field in ("sink", "oauth_url"):   # a second, independent reading of the text names the same host
                assert (urlsplit(value).hostname or "").rstrip(".") == item, (field, value, used)
            if field == "spark_remote":
                host = urlsplit(item.replace("sc://", "http://", 1).split(";")[0]).hostname
                assert host and host.isascii(), (value, item)
        return "accepted"

    outcomes = fuzz(record_property, "parse_once", field_values(), check, max_examples=600, examples=(
        ("sink", " bolt://127.0.0.2:7687"), ("sink", "\tbolt://127.0.0.2:7687"), ("sink", "\x01bolt://127.0.0.2:7687"),
        ("bootstrap_servers", "evil.example:1 127.0.0.1:9092"), ("consumer_group", "g\n2026-01-01 WARNING forged"),
        ("oauth_url", "https://evil.example\\@127.0.0.1/token"), ("sink", "bolt://127.0.0.1@127.0.0.2:7687"),
        ("spark_remote", "sc://１２７.0.0.1:15002")))
    print(f"fuzz parse_once by field: {dict(sorted(kinds.items()))}")
    assert outcomes["accepted"] and outcomes["refused"]
