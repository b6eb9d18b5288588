"""The unit between a transformation and a sink: one Cypher query with its parameters; and a batch of them
held as runs of one query text with their rows, so that a batch of a thousand messages is not a thousand
objects (the built-in transformations build rows; sinks render, fold and count them in bulk)."""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload


@dataclass(frozen=True)
class Statement:
    """One Cypher query with its parameters: what a transformation returns, normalised, and what a sink writes."""

    query: str
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        """`statement["query"]`, `statement["parameters"]`: read as the `{"query": ..., "parameters": ...}`
        record a transformation returns (the built-in ones return Statements; code that reads their
        records as mappings goes on working)."""
        if key == "query":
            return self.query
        if key == "parameters":
            return self.parameters
        raise KeyError(key)


Run = tuple[str, Sequence[Mapping[str, Any]]]   # one query text and the parameters of each of its statements, in order


class Statements(Sequence[Statement]):
    """A batch's statements, in order, kept as runs of one query text: `(query, [parameters, ...])`.

    It means exactly the list of Statements it yields (one per row: a sink writes each row as the run's query
    with that row's parameters), and compares equal to that list; `runs` is the bulk view a sink reads
    without building a Statement per row.
    """

    __slots__ = ("runs", "_len")

    def __init__(self, runs: Iterable[Run] = ()):
        self.runs: list[Run] = [(query, rows) for query, rows in runs if rows]
        self._len = sum(len(rows) for _, rows in self.runs)

    @classmethod
    def of_rows(cls, query: str, rows: Sequence[Mapping[str, Any]]) -> Statements:
        """`query` once per row, in order."""
        return cls(((query, rows),))

    @classmethod
    def of(cls, statements: Iterable[Statement]) -> Statements:
        """Statements (a Statements, or any iterable of Statement values) as runs."""
        if isinstance(statements, Statements):
            return statements
        return cls.of_pairs((statement.query, statement.parameters) for statement in statements)

    @classmethod
    def of_pairs(cls, pairs: Iterable[tuple[str, Mapping[str, Any]]]) -> Statements:
        """`(query, parameters)` pairs, in order, as runs."""
        runs: list[tuple[str, list[Mapping[str, Any]]]] = []
        last: str | None = None
        rows: list[Mapping[str, Any]] = []
        for query, parameters in pairs:
            if query != last:
                last, rows = query, []
                runs.append((query, rows))
            rows.append(parameters)
        return cls(runs)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Statement]:
        for query, rows in self.runs:
            for parameters in rows:
                yield Statement(query, parameters)

    def __reversed__(self) -> Iterator[Statement]:
        for query, rows in reversed(self.runs):
            for parameters in reversed(rows):
                yield Statement(query, parameters)

    @overload
    def __getitem__(self, index: int) -> Statement: ...

    @overload
    def __getitem__(self, index: slice) -> list[Statement]: ...

    def __getitem__(self, index: int | slice) -> Statement | list[Statement]:
        if isinstance(index, slice):
            return list(self)[index]
        at = index + self._len if index < 0 else index
        if not 0 <= at < self._len:
            raise IndexError("statement index out of range")
        for query, rows in self.runs:
            if at < len(rows):
                return Statement(query, rows[at])
            at -= len(rows)
        raise IndexError("statement index out of range")   # not reached: _len counts the rows

    def __add__(self, other: Iterable[Statement]) -> Statements:
        return Statements([*self.runs, *Statements.of(other).runs])

    def __radd__(self, other: Iterable[Statement]) -> Statements:
        return Statements([*Statements.of(other).runs, *self.runs])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Statements):
            return len(self) == len(other) and list(self) == list(other)
        if isinstance(other, (list, tuple)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable rows, like a list

    def __repr__(self) -> str:
        return f"Statements({len(self)} in {len(self.runs)} run(s))"
