"""A batch's statements rendered in bulk: one query and its rows (what the built-in transformations return) as
the lines render_statement gives each row alone, a column at a time (cypher_literals says what each literal is).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

from ..errors import SinkError
from .cypher_literals import (
    _BY_EXACT_TYPE,
    INT64_MAX,
    INT64_MIN,
    _string,
    _template,
    render_statement,
    to_cypher_literal,
)


def render_rows(query: str, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """render_statement(query, row) for each row, in order, in bulk: a built-in transformation's batch is one
    query and its rows. The query is split once and each parameter's column rendered over every row (a column
    of plain texts or of int64 integers in a few passes over the whole column, in C); a batch render_statement
    would refuse anywhere is rendered by it row by row, so the error is its own, about the first row at fault."""
    bulk = _in_bulk(query, rows)
    if bulk is None:
        return [render_statement(query, row) for row in rows]
    texts, columns = bulk
    line = "%s".join(text.replace("%", "%%") for text in texts)
    return list(map(line.__mod__, zip(*columns, strict=True))) if columns else [line] * len(rows)


def render_text(query: str, rows: Sequence[Mapping[str, Any]]) -> str:
    """The lines of render_rows(query, rows), each ending in a newline, as one text: what a cypherl file gets,
    put together in one join over the columns (no line object per row)."""
    bulk = _in_bulk(query, rows)
    if bulk is None:
        return "".join([render_statement(query, row) + "\n" for row in rows])
    texts, columns = bulk
    if not columns:
        return (texts[0] + "\n") * len(rows)
    # per row: text, literal, text, literal, ..., text + newline; the texts repeated, the literals by column
    parts: list[Iterable[str]] = [repeat(texts[0])]
    for column, text in zip(columns, (*texts[1:-1], texts[-1] + "\n"), strict=True):
        parts += (column, repeat(text))
    return "".join(chain.from_iterable(zip(*parts, strict=False)))   # the repeats end with the columns


def _in_bulk(query: str, rows: Sequence[Mapping[str, Any]]) -> tuple[tuple[str, ...], list[list[str]]] | None:
    """The query's texts between its parameters and each parameter's literals over `rows`; None when the batch
    is to be rendered row by row (rows that are not dicts, a missing parameter, a value with no literal)."""
    if not isinstance(query, str) or any(type(row) is not dict for row in rows):
        return None
    template = _template(query)
    try:
        columns = [_column(list(map(itemgetter(name), rows)), label) for name, label in
                   zip(template.names, template.labels, strict=True)] if rows else []
    except (KeyError, SinkError):
        return None
    return template.pieces[0::2], columns


_REPEATS = 64   # texts of a column remembered per batch (a topic name, a label): rendered once each


def _column(values: list[Any], label: str) -> list[str]:
    """The literals of one parameter over a batch's rows (to_cypher_literal's, the common types inline)."""
    kinds = set(map(type, values))
    if kinds == {str}:
        texts = _plain_texts(values)
        if texts is not None:
            return texts
    elif kinds == {int} and INT64_MIN < min(values) and max(values) <= INT64_MAX:
        return list(map(str, values))
    exact, general = _BY_EXACT_TYPE, to_cypher_literal
    seen: dict[str, str] = {}
    out = []
    for value in values:
        kind = type(value)
        if kind is str:
            literal = seen.get(value)
            if literal is None:
                literal = _string(value, label)
                if len(seen) < _REPEATS:
                    seen[value] = literal
        elif kind is int and INT64_MIN < value <= INT64_MAX:
            literal = str(value)
        else:
            literal = (exact.get(kind) or general)(value, label)
        out.append(literal)
    return out


_ASCII_CONTROLS = dict.fromkeys([*range(0x20), 0x7F])   # str.translate: deleted


def _plain_texts(texts: list[str]) -> list[str] | None:
    """_string of each of `texts` when none holds a character to escape as \\uXXXX (then only quotes and
    backslashes are escaped), in a few passes over the column joined by NUL; None otherwise (each alone then).
    An ASCII text (known at once) needs escaping only for a control character (deleting them shortens it);
    any other is checked by isprintable(), False for every character _NEEDS_SLOW_ESCAPE finds."""
    joined = "\x00".join(texts)
    if all(map(str.isascii, texts)):
        if len(joined.translate(_ASCII_CONTROLS)) != len(joined) - (len(texts) - 1):   # the NULs joining them
            return None
    elif not "".join(texts).isprintable():
        return None
    joined = joined.replace("\\", "\\\\").replace("'", "\\'").replace('"', '\\"')
    return ('"' + joined.replace("\x00", '"\x00"') + '"').split("\x00")
