"""Folding a batch's statements into UNWIND statements: one Bolt round trip per run, not per message.

Memgraph's built-in streams run a transformation's queries inside the
database; mgstreams runs outside it, so every statement is a round trip (and a
parse, and a plan-cache lookup). `fold` turns each run of consecutive
statements with one query text into one statement

    UNWIND $mgstreams_rows AS mgstreams_row <the query, `$p` read as `mgstreams_row.p`>

with one row per statement (its parameters), in order. The folded text depends
only on the query text, so Memgraph's plan cache (keyed by query text) holds
one plan per transformation query, whatever the batch size. Order is kept: a
run ends at the first statement of another text.

What is not folded, and runs as it is:
- a query that is not a MATCH/MERGE/CREATE/SET write, or that also deletes,
  removes, calls procedures, loops (FOREACH), loads, or changes the schema
  (`WriteKind.BARRIER`): rows of one UNWIND could see each other's deletes;
- a query that already starts with UNWIND, carries WITH or UNION, aggregates,
  orders or cuts rows (ORDER BY, SKIP, LIMIT, DISTINCT), or names
  `mgstreams_row` itself: one UNWIND would change what it computes;
- a parameter where Cypher wants a literal or a map (`LIMIT $n`, `(n $props)`,
  a label `n:$label`), or one that is not a plain name (`$0`, `` $`a b` ``);
- a statement whose parameters lack one the query uses: one at a time it
  fails with Memgraph's "parameter not provided", folded it would read null;
- a run of one statement (nothing to gain, and its plain text is cached too).

Rows carry only the parameters the query uses.

No UNWIND carries two rows that write the same node or relationship: a run
is cut where a row repeats the key of a row already in it (`QueryShape.keys`:
the parameters in a node pattern's property map, `(n:L {id: $id})`; for a
statement that writes relationships, all of them together), and the next run
starts with it. Engines differ on such rows: Memgraph applies UNWIND rows in
order (the last row's SET wins), FalkorDB plans `MERGE ... SET` eagerly (the
first row's values stay). Cut, the batch gives the one-at-a-time graph on both.

The backfill also reorders (`nodes_first`): within the statements between two
barriers, statements are grouped by query text and node writes go before
relationship writes, so relationships find end nodes a later message creates.
That changes meaning (a relationship MATCH sees nodes it would not have seen
one at a time), which a bulk load wants and a live stream must not do.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from .statement import Statement

ROWS_PARAMETER = "mgstreams_rows"
ROW_VARIABLE = "mgstreams_row"
_PREFIX = f"UNWIND ${ROWS_PARAMETER} AS {ROW_VARIABLE} "


class WriteKind(Enum):
    NODE = "node"                  # MATCH/MERGE/CREATE/SET without a relationship pattern
    RELATIONSHIP = "relationship"  # the same with a relationship pattern
    BARRIER = "barrier"            # anything else: never folded, nothing moves across it


_STRING_OR_COMMENT = re.compile(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|`[^`]*`|//[^\n]*|/\*.*?\*/""", re.S)
_PARAMETER = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RELATIONSHIP = re.compile(r"\)\s*<?-\s*\[|\]\s*-\s*>?\s*\(|\)\s*<?--\s*>?\s*\(")
# a keyword as a clause, not a property key (`{index: 1}`), a property (`n.load`) or a label (`:Call`)
_CLAUSE = r"(?<![.:\w$])(?:{})\b(?!\s*:)"
_WRITE = re.compile(_CLAUSE.format("MERGE|CREATE"), re.I)
_SET = re.compile(_CLAUSE.format("SET"), re.I)
_UNSAFE = re.compile(_CLAUSE.format("DELETE|DETACH|REMOVE|CALL|FOREACH|LOAD|DROP|INDEX|CONSTRAINT|STORAGE|USING|"
                                    "PERIODIC|TRIGGER|ANALYZE|FREE|EXPLAIN|PROFILE"), re.I)
# clauses whose meaning spans rows: one UNWIND would compute them over the whole run
_ACROSS_ROWS = re.compile(_CLAUSE.format("WITH|UNION|ORDER|SKIP|LIMIT|DISTINCT|UNWIND"), re.I)
_AGGREGATE = re.compile(r"(?<![.\w$])(?:count|collect|sum|avg|min|max|percentileCont|percentileDisc|stDev|stDevP)"
                        r"\s*\(", re.I)
# words after which a parameter is an ordinary expression (anything else before it is a variable
# or a label: a property-map position, `(n $props)`, which takes no `row.field`)
_EXPRESSION_WORDS = frozenset({"IN", "AND", "OR", "XOR", "NOT", "WHEN", "THEN", "ELSE", "RETURN", "WHERE",
                               "CONTAINS", "STARTS", "ENDS", "IS", "CASE", "SET", "AS"})


@dataclass(frozen=True)
class QueryShape:
    """What folding needs to know about one query text."""
    kind: WriteKind
    foldable: bool
    folded: str | None = None                 # the UNWIND text, `$p` read as `mgstreams_row.p`
    parameters: frozenset[str] = frozenset()  # the parameters the query uses
    keys: tuple[tuple[str, ...], ...] = ()    # per written node (or all, for relationships): its key parameters


def query_shape(query: str) -> QueryShape:
    code = _STRING_OR_COMMENT.sub(lambda m: " " * len(m.group(0)), query)  # same length, no literals
    if _UNSAFE.search(code) or not _WRITE.search(code) and not _SET.search(code):
        return QueryShape(WriteKind.BARRIER, False)
    kind = WriteKind.RELATIONSHIP if _RELATIONSHIP.search(code) else WriteKind.NODE
    parameters = list(_PARAMETER.finditer(code))
    if (_ACROSS_ROWS.search(code) or _AGGREGATE.search(code) or ROW_VARIABLE in query
            or code.count("$") != len(parameters)):
        return QueryShape(kind, False)
    pieces, at = [], 0
    for match in parameters:
        if not _expression_position(code, match.start()):
            return QueryShape(kind, False)
        pieces += [query[at:match.start()], f"{ROW_VARIABLE}.{match.group(1)}"]
        at = match.end()
    pieces.append(query[at:])
    return QueryShape(kind, True, _PREFIX + "".join(pieces), frozenset(m.group(1) for m in parameters),
                      _keys(code, parameters, kind))


def _keys(code: str, parameters: list[re.Match], kind: WriteKind) -> tuple[tuple[str, ...], ...]:
    """The key parameters of each node pattern (those in its property map), by pattern; for a statement that
    writes relationships, one key of all of them (the relationship is the pair of its nodes)."""
    by_pattern: dict[int, list[str]] = {}
    for match in parameters:
        opened = _open_brackets(code[:match.start()])
        if len(opened) >= 2 and opened[-1][0] == "{" and opened[-2][0] == "(":
            names = by_pattern.setdefault(opened[-2][1], [])
            if match.group(1) not in names:
                names.append(match.group(1))
    keys = [tuple(names) for _, names in sorted(by_pattern.items())]
    if kind is WriteKind.RELATIONSHIP and len(keys) > 1:
        return (tuple(name for key in keys for name in key),)
    return tuple(keys)


def _open_brackets(code: str) -> list[tuple[str, int]]:
    stack: list[tuple[str, int]] = []
    for at, char in enumerate(code):
        if char in "([{":
            stack.append((char, at))
        elif char in ")]}" and stack:
            stack.pop()
    return stack


def _expression_position(code: str, at: int) -> bool:
    """Whether a parameter at `at` stands for a value (`row.p` can replace it), not a map or a label."""
    before = code[:at].rstrip()
    if not before:
        return True
    last = before[-1]
    if last == ":":   # a map entry `{k: $p}`, or a label `n:$label`: which bracket is open?
        return _innermost_bracket(before) == "{"
    if last.isalnum() or last == "_":
        word = _WORD.search(before[-40:][::-1])
        return word is not None and word.group(0)[::-1].upper() in _EXPRESSION_WORDS
    return True


def _innermost_bracket(code: str) -> str | None:
    depth = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    for char in code:
        if char in "([{":
            stack.append(char)
        elif char in depth and stack:
            stack.pop()
    return stack[-1] if stack else None


_SHAPES: dict[str, QueryShape] = {}


def shape_of(query: str) -> QueryShape:
    """query_shape, cached: a stream's transformation uses a few query texts over and over."""
    shape = _SHAPES.get(query)
    if shape is None:
        if len(_SHAPES) > 1024:
            _SHAPES.clear()
        shape = _SHAPES[query] = query_shape(query)
    return shape


def fold(work: Sequence[tuple[str, Mapping[str, Any]]]) -> list[tuple[str, Mapping[str, Any]]]:
    """`(query, parameters)` pairs with each run of one foldable query text as one UNWIND pair (see the
    module docstring); everything else as it was, in order."""
    out: list[tuple[str, Mapping[str, Any]]] = []
    run: list[Mapping[str, Any]] = []
    run_query: str | None = None
    written: set = set()   # the keys the run's rows write (module docstring: a repeated one cuts the run)
    for query, parameters in work:
        shape = shape_of(query)
        if query == run_query and shape.parameters <= parameters.keys():
            identity = _identities(shape, parameters)
            if written.isdisjoint(identity):
                run.append(parameters)
                written.update(identity)
                continue
        _flush(out, run_query, run)
        if shape.foldable and shape.parameters <= parameters.keys():
            run_query, run, written = query, [parameters], set(_identities(shape, parameters))
        else:
            run_query, run, written = None, [], set()
            out.append((query, parameters))
    _flush(out, run_query, run)
    return out


def _identities(shape: QueryShape, parameters: Mapping[str, Any]) -> list:
    return [(index, tuple(_hashable(parameters[name]) for name in key)) for index, key in enumerate(shape.keys)]


def _hashable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _hashable(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


def _flush(out: list, query: str | None, run: list[Mapping[str, Any]]) -> None:
    if query is None:
        return
    if len(run) == 1:
        out.append((query, run[0]))
        return
    shape = shape_of(query)
    names = shape.parameters
    out.append((shape.folded, {ROWS_PARAMETER: [{name: row[name] for name in names} for row in run]}))


def fold_statements(statements: Sequence[Statement]) -> list[Statement]:
    """`fold` for Statement values."""
    return [Statement(query, parameters) for query, parameters in fold([(s.query, s.parameters)
                                                                        for s in statements])]


def nodes_first(statements: Sequence[Statement]) -> list[Statement]:
    """The backfill's order: between barriers, statements grouped by query text (first seen first), node
    writes before relationship writes; barriers keep their place. Changes meaning (module docstring)."""
    out: list[Statement] = []
    segment: list[Statement] = []
    for statement in statements:
        if shape_of(statement.query).kind is WriteKind.BARRIER:
            out.extend(_grouped(segment))
            segment = []
            out.append(statement)
        else:
            segment.append(statement)
    out.extend(_grouped(segment))
    return out


def _grouped(segment: list[Statement]) -> list[Statement]:
    groups: dict[str, list[Statement]] = {}
    for statement in segment:
        groups.setdefault(statement.query, []).append(statement)
    ordered = sorted(groups.items(), key=lambda item: shape_of(item[0]).kind is WriteKind.RELATIONSHIP)
    return [statement for _, members in ordered for statement in members]
