"""Cypher literals: every value survives rendering intact and stays inside its literal and its line."""
from __future__ import annotations

import datetime as dt
import math
import random
from types import MappingProxyType
from zoneinfo import ZoneInfo

import pytest
from cypher_literal_parser import LiteralParser
from examples import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_registry.errors import SinkError
from stream_registry.graph.cypher_literals import INT64_MAX, INT64_MIN, render_statement, to_cypher_literal
from stream_registry.graph.cypher_rows import render_rows, render_text


def round_trip(value):
    return LiteralParser(to_cypher_literal(value)).parse_all()


HOSTILE = [
    "", "plain", "it's", 'say "hi"', "back\\slash", "\\", "\\'", "\\\"", "'}) DETACH DELETE n //",
    "\"}) MATCH (x) DETACH DELETE x; //", "line1\nline2", "cr\rlf\r\n", "tab\there", "\u0000nul", "\x1b[31m",
    "\x7f\x85\x9f", "\u2028\u2029", "`backtick`", "$param", "/* comment */", "// comment", "é ü 日本 😀 \U0001F9EA",
    "\\u0041 is not A", "\\n is two characters", "\f\b\v",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_strings_round_trip_and_stay_one_line(text):
    literal = to_cypher_literal(text)
    assert len(literal.splitlines()) <= 1 and "\n" not in literal and "\r" not in literal
    assert round_trip(text) == text


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_strings_cannot_break_out_of_a_statement(text):
    line = render_statement("MATCH (n {id: $id}) SET n.v = $v RETURN n", {"id": 1, "v": text})
    assert line.startswith("MATCH (n {id: 1}) SET n.v = ") and line.endswith(" RETURN n;")
    assert len(line.splitlines()) == 1
    literal = line[len("MATCH (n {id: 1}) SET n.v = "):-len(" RETURN n;")]
    assert LiteralParser(literal).parse_all() == text


def test_random_values_round_trip():
    rng = random.Random(20261122)
    alphabet = [chr(c) for c in range(0, 0x100)] + list("\u2028\u2029日本😀\U0010FFFF`'\"\\$")
    key_alphabet = [c for c in alphabet if c.isprintable()]    # names cannot escape control characters

    def text(chars=alphabet):
        return "".join(rng.choice(chars) for _ in range(rng.randint(0, 12)))

    def value(depth=0):
        kind = rng.randrange(9 if depth < 3 else 6)
        if kind == 0:
            return None
        if kind == 1:
            return rng.choice([True, False])
        if kind == 2:
            return rng.choice([0, -1, INT64_MAX, INT64_MIN, rng.randint(INT64_MIN, INT64_MAX)])
        if kind == 3:
            return rng.choice([0.0, -0.5, 1e300, 5e-324, 1e16, 1.5e-7, rng.uniform(-1e9, 1e9)])
        if kind in (4, 5):
            return text()
        if kind == 6:
            return [value(depth + 1) for _ in range(rng.randint(0, 4))]
        return {text(key_alphabet): value(depth + 1) for _ in range(rng.randint(0, 4))}

    for _ in range(400):
        v = value()
        assert round_trip(v) == v


@pytest.mark.parametrize("value, literal", [
    (None, "null"), (True, "true"), (False, "false"), (0, "0"), (-7, "-7"),
    (INT64_MAX, "9223372036854775807"), (INT64_MIN, "(-9223372036854775807 - 1)"),
    (1.5, "1.5"), (1e16, "1e16"), (2.5e-7, "2.5e-07"), (-0.0, "-0.0"),
    ("a", '"a"'), (b"bytes", '"bytes"'), ((1, "x"), '[1, "x"]'), ([], "[]"), ({}, "{}"),
    ({"plain_key": 1, "with space": 2, "tick`y": 3, "match": 4, "9lives": 5},
     '{plain_key: 1, `with space`: 2, `tick``y`: 3, `match`: 4, `9lives`: 5}'),
    (dt.date(2026, 11, 22), 'date("2026-11-22")'),
    (dt.datetime(2026, 11, 22, 10, 0, 0, 123456), 'localDateTime("2026-11-22T10:00:00.123456")'),
    (dt.datetime(2026, 11, 22, 10, tzinfo=dt.timezone(dt.timedelta(hours=1))),
     'datetime("2026-11-22T10:00:00+01:00")'),
    (dt.time(10, 30), 'localTime("10:30:00")'),
    (dt.timedelta(days=-1, seconds=5, microseconds=7), "duration({day: -1, second: 5, microsecond: 7})"),
])
def test_literal_forms(value, literal):
    assert to_cypher_literal(value) == literal


@pytest.mark.parametrize("value", [
    dt.date(2026, 1, 2), dt.datetime(2026, 1, 2, 3, 4, 5, 6), dt.time(23, 59, 59, 999999),
    dt.datetime(2026, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=-7))), dt.timedelta(days=3, seconds=2),
])
def test_temporal_values_round_trip(value):
    assert round_trip(value) == value


@pytest.mark.parametrize("value, message", [
    (2 ** 63, r"\$n: integer 9223372036854775808 is outside Memgraph's int64 range"),
    (-(2 ** 63) - 1, r"\$n: integer -9223372036854775809 is outside"),
    (math.nan, r"\$n: float nan has no Cypher literal"),
    (math.inf, r"\$n: float inf has no Cypher literal"),
    ({"x": [1, -math.inf]}, r"\$n\.x\[1\]: float -inf"),
    (b"\xff\xfe", r"\$n: b'\\xff\\xfe' is not UTF-8 text"),
    ("lone \ud800", r"\$n: string holds a lone surrogate U\+D800"),
    ({1: "a"}, r"\$n: map key 1 is a int"),
    ({"bad\nkey": 1}, r"\$n: map key 'bad\\nkey' holds a control character"),
    ({1, 2}, r"\$n: \{1, 2\} of type set has no Cypher literal"),
    (dt.time(1, tzinfo=dt.UTC), r"\$n: time '01:00:00\+00:00' has a time zone"),
])
def test_values_without_a_faithful_literal_are_errors_naming_the_parameter(value, message):
    with pytest.raises(SinkError, match=message):
        render_statement("RETURN $n", {"n": value})


def test_parameters_are_replaced_only_as_whole_tokens_outside_literals_comments_and_names():
    query = ("MATCH (n {a: $p, b: $p2}) // uses $p\n"
             "WHERE n.s = '$p' AND n.t = \"it\\'s $p2\" AND n.`$p` = $`odd name` /* $p2 */\n"
             "RETURN $p2, $0")
    line = render_statement(query, {"p": 1, "p2": "two", "odd name": [True], "0": None})
    assert line == ("MATCH (n {a: 1, b: \"two\"})   WHERE n.s = '$p' AND n.t = \"it\\'s $p2\" AND n.`$p` = [true]"
                    "   RETURN \"two\", null;")
    assert len(line.splitlines()) == 1


def test_statement_ends_with_exactly_one_semicolon_and_keeps_literal_line_breaks_escaped():
    assert render_statement("RETURN 1;  ") == "RETURN 1;"
    assert render_statement("RETURN 1 ; // done") == "RETURN 1;"
    assert render_statement("RETURN 'a\nb'") == "RETURN 'a\\u000Ab';"
    assert render_statement("RETURN 1", None) == "RETURN 1;"


@pytest.mark.parametrize("query, params, message", [
    ("RETURN $missing", {"present": 1}, r"parameter \$missing: referenced by the query but not given"),
    ("RETURN $p2", {"p": 1}, r"parameter \$p2"),
    ("RETURN 1; RETURN 2", {}, r"more than one statement"),
    ("RETURN 'open", {}, r"unterminated string"),
    ("RETURN `open", {}, r"unterminated backticked name"),
    ("RETURN 1 /* open", {}, r"unterminated block comment"),
    ("RETURN n.`a\nb`", {}, r"spans lines"),
])
def test_bad_statements_are_errors(query, params, message):
    with pytest.raises(SinkError, match=message):
        render_statement(query, params)


# -- the common case's fast paths against the general ones ---------------------------------------------------------
# render_statement has a fast path for a dict of parameters and for values of the exact common types; a mapping of
# another type, and subclasses of str/int/float, tuples and other mappings, take the general path. Both must render
# the same bytes and refuse with the same message.
class _Str(str):
    pass


class _Int(int):
    pass


class _Float(float):
    pass


def _through_general_path(value):
    """The same value, of types the fast paths do not take."""
    kind = type(value)
    if kind is str:
        return _Str(value)
    if kind is int:
        return _Int(value)
    if kind is float:
        return _Float(value)
    if kind is list:
        return tuple(_through_general_path(v) for v in value)
    if kind is dict:
        return MappingProxyType({k: _through_general_path(v) for k, v in value.items()})
    return value   # None, bool: no subclass to take


_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2 ** 64), max_value=2 ** 64)
            | st.sampled_from([INT64_MIN, INT64_MAX, INT64_MIN - 1, INT64_MAX + 1]) | st.floats()
            | st.text(st.characters(codec=None)) | st.text(alphabet="ab'\"\\\n\r\t\x00\x1b\x7f\x85\u2028\ud800 é日"))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text(alphabet="ab_ `\n9", max_size=4), inner, max_size=3), max_leaves=8)
_names = st.sampled_from(["a", "b", "x_1", "`odd name`"])
_paddings = st.sampled_from(["", " ", "\n\t ", " // note\n", "/* c */ "])


def _outcome(render, *args):
    try:
        return render(*args)
    except SinkError as exc:
        return SinkError, str(exc)


@settings(max_examples=examples(200), deadline=None)
@given(references=st.lists(_names, min_size=0, max_size=4), given_names=st.sets(_names),
       values=st.lists(_values, min_size=4, max_size=4), before=_paddings, after=_paddings)
def test_fast_paths_render_what_the_general_paths_render(references, given_names, values, before, after):
    query = before + "RETURN " + ", ".join(["1"] + [f"${name}" for name in references]) + after
    parameters = {name.strip("`"): value for name, value in zip(sorted(given_names), values, strict=False)}
    fast = _outcome(render_statement, query, parameters)
    general = _outcome(render_statement, query, MappingProxyType({k: _through_general_path(v)
                                                                  for k, v in parameters.items()}))
    assert fast == general
    if all(name.strip("`") in parameters for name in references):
        # a statement is the literals of its values in the query's text, stripped, ending in ';'
        expected = _outcome(lambda: "RETURN " + ", ".join(
            ["1"] + [to_cypher_literal(parameters[name.strip("`")], f"${name.strip('`')}") for name in references]))
        assert fast == (expected + ";" if isinstance(expected, str) else expected)
    else:   # a missing parameter, or a value before it in the query's order that has no literal
        assert fast[0] is SinkError


def test_an_error_names_a_backticked_parameter_on_one_line():
    """A parameter's name may hold any character between backticks: the error shows it escaped, on one line
    (found by the statement fuzz: `$`\\r`` with an integer beyond int64 broke the message over two lines)."""
    with pytest.raises(SinkError) as caught:
        render_statement("RETURN $`a\rb`", {"a\rb": 2 ** 63})
    assert str(caught.value).startswith("parameter $a\\rb: integer 9223372036854775808 is outside"), caught.value
    assert len(str(caught.value).splitlines()) == 1


def test_a_zoned_time_in_a_repeated_hour_keeps_its_offset():
    """2008-08-31 23:00 in Africa/El_Aaiun came twice (summer time ended at midnight); fold 0 is the first, +01:00."""
    zoned = dt.datetime(2008, 8, 31, 23, 0, tzinfo=ZoneInfo("Africa/El_Aaiun"))
    assert to_cypher_literal(zoned) == 'datetime("2008-08-31T23:00:00+01:00")'
    assert to_cypher_literal(zoned.replace(fold=1)) == 'datetime("2008-08-31T23:00:00+00:00")'


_CELLS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=INT64_MIN - 2, max_value=INT64_MAX + 2),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12), st.sampled_from(["t", "t", "it's", "%s"]),
    st.binary(max_size=6), st.lists(st.integers(-3, 3), max_size=3), st.dictionaries(st.sampled_from("ab"),
                                                                                      st.integers(0, 3)))


def _rendered(render):
    try:
        return render()
    except SinkError as exc:
        return f"SinkError: {exc}"


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.fixed_dictionaries({"a": _CELLS, "b": _CELLS}, optional={"c": _CELLS}), max_size=6),
       query=st.sampled_from(["MERGE (n:N {a: $a}) SET n.b = $b, n.c = $c", "CREATE (:N {p: '100%'}) SET x = $a",
                              "RETURN 1", "MATCH (n) WHERE n.a = $a AND n.b = $b RETURN n"]))
def test_rows_render_in_bulk_as_each_statement_alone(rows, query):
    """A built-in transformation's batch (one query, its rows) renders as each statement rendered alone: the same
    lines, or the same error about the first row at fault (a missing parameter, a value with no literal)."""
    alone = _rendered(lambda: [render_statement(query, row) for row in rows])
    assert _rendered(lambda: render_rows(query, rows)) == alone


_TEXTS = st.one_of(st.text(max_size=12), st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=12),
                   st.sampled_from(['{"a": "b\\\\c"}', "it's", "%s", "", "\x00", "\u2028", "é", "\udc80"]))


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.fixed_dictionaries({"a": _TEXTS, "b": st.one_of(
    st.integers(min_value=INT64_MIN - 1, max_value=INT64_MAX + 1), st.integers(-5, 5)), "c": _TEXTS}),
    max_size=6), query=st.sampled_from(["MERGE (n:N {a: $a}) SET n.b = $b, n.c = $c",
                                        "CREATE (:N {p: '100%'}) SET x = $a", "RETURN 1"]))
def test_text_and_integer_columns_render_in_bulk_as_each_statement_alone(rows, query):
    """Columns of texts only or integers only (the built-ins' batches: a column at a time, joined) render as
    each statement alone, as the lines of render_rows and as the one text of render_text; errors too."""
    alone = _rendered(lambda: [render_statement(query, row) for row in rows])
    assert _rendered(lambda: render_rows(query, rows)) == alone
    text = _rendered(lambda: render_text(query, rows))
    assert text == (alone if isinstance(alone, str) else "".join(line + "\n" for line in alone))
