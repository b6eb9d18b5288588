"""A batch's row changes folded per row, newest position first, into the statements of cypher.py.

Two events for one row in one batch become one: the newer by source position (positions.Position.at_least)
wins, whatever order they came in; an update's TOASTed columns take the value an older event of the batch
carried. So every statement names each node once, and the graph does not depend on how the engine runs the rows
of an UNWIND. A truncate or the end of a snapshot is a barrier: what came before it is written first.
"""
from __future__ import annotations

import json
from typing import Any

from .cypher import (
    MARK,
    ORIGIN,
    POSITION,
    ROWS,
    SEQUENCE,
    SNAPSHOT,
    TIME,
    delete_queries,
    markers_aged,
    relationship,
    snapshot_sweep,
    truncate_queries,
    upsert,
)
from .events import Change
from .options import CdcOptions

_SWEEPABLE = ("pg:", "my:", "lsn:", "or:", "ca:")   # positions a whole snapshot shares (not a per-read time)


class Segment:
    """The row changes since the last barrier, one per row."""

    def __init__(self, options: CdcOptions):
        self.options = options
        self.rows: dict[tuple[str, Any], Change] = {}   # (label, the key's values): the row's newest change
        self.newest_delete_ms: int | None = None

    def add(self, change: Change) -> None:
        label = self.options.label(change.names, change.qualified)
        slot = (label, _slot_key(change.key))
        held = self.rows.get(slot)
        if held is not None:
            if not change.position.at_least(held.position):
                return   # older than what the batch already holds for the row: the graph's guard would skip it
            if change.kind == "upsert" and change.unchanged and held.kind == "upsert":
                filled = {c: held.properties[c] for c in change.unchanged if c in held.properties}
                change = change._replace(properties={**change.properties, **filled},
                                         unchanged=change.unchanged & held.unchanged)
        self.rows[slot] = change

    def flush(self) -> list[dict[str, Any]]:
        upserts: dict[tuple, list[Change]] = {}
        deletes: dict[tuple, list[Change]] = {}
        for (label, _), change in self.rows.items():
            key_columns = tuple(change.key)
            if change.kind == "delete":
                deletes.setdefault((label, key_columns), []).append(change)
            else:
                upserts.setdefault((label, key_columns, tuple(sorted(change.unchanged)),
                                    self.options.relationships_of(change.names)), []).append(change)
        self.rows = {}
        out: list[dict[str, Any]] = []
        for (label, key_columns, unchanged, relationships), changes in upserts.items():
            out.append(self._statement(upsert(label, key_columns, unchanged), label,
                                       [self._upsert_row(c) for c in changes]))
            for spec in relationships:
                rows = [{**_keys(c), "position": c.position.text, "target": c.properties.get(spec.column)}
                        for c in changes]
                unlink, merge_targets, link = relationship(spec, label, key_columns)
                targets = list({json.dumps(r["target"], default=str): r["target"] for r in rows
                                if r["target"] is not None}.values())
                out.append(self._statement(unlink, label, rows))
                if targets:
                    out.append({"query": merge_targets, "parameters": {"targets": targets,
                                                                        "mark": self.options.mark}})
                out.append(self._statement(link, label, rows))
        for (label, key_columns), changes in deletes.items():
            rows = [{**_keys(c), **_stamp(c)} for c in changes]
            out.extend(self._statement(query, label, rows) for query in delete_queries(label, key_columns))
            newest = max(c.position.time for c in changes)
            self.newest_delete_ms = max(newest, self.newest_delete_ms or newest)
        return out

    def truncate(self, change: Change) -> list[dict[str, Any]]:
        label = self.options.label(change.names, change.qualified)
        return [self._statement(query, label, [_stamp(change)]) for query in truncate_queries(label)]

    def sweep(self, change: Change) -> list[dict[str, Any]]:
        """After the last read of a complete snapshot (one that began with a `first` read, or the table's)."""
        if not change.position.text.startswith(_SWEEPABLE):
            return []
        label = self.options.label(change.names, change.qualified)
        return [self._statement(snapshot_sweep(label, tuple(change.key)), label,
                                [{**_stamp(change), "snapshot": _snapshot_id(change)}])]

    def age_markers(self) -> list[dict[str, Any]]:
        if self.newest_delete_ms is None:
            return []
        before = self.newest_delete_ms - self.options.delete_retention_ms
        return [{"query": markers_aged(), "parameters": {"mark": self.options.mark, "before": before}}]

    def _upsert_row(self, change: Change) -> dict[str, Any]:
        stamp = _stamp(change)
        properties = {**change.properties, **change.key, MARK: self.options.mark,
                      POSITION: stamp["position"], ORIGIN: stamp["origin"],
                      SEQUENCE: stamp["sequence"], TIME: stamp["time"],
                      SNAPSHOT: _snapshot_id(change) if change.snapshot else ""}
        for column in change.unchanged:
            properties.pop(column, None)
        return {**_keys(change), **stamp, "properties": properties}

    def _statement(self, query: str, label: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {"query": query, "parameters": {ROWS: rows, "mark": self.options.mark, "label": label}}


def _keys(change: Change) -> dict[str, Any]:
    return {f"k{i}": value for i, value in enumerate(change.key.values())}


def _stamp(change: Change) -> dict[str, Any]:
    position = change.position
    return {"position": position.text, "origin": position.origin, "sequence": position.sequence,
            "time": position.time}


def _snapshot_id(change: Change) -> str:
    return change.position.text


def _slot_key(key: Any) -> Any:
    values = tuple(key.items())
    try:
        hash(values)
    except TypeError:   # a list-valued key column
        return json.dumps(key, sort_keys=True, default=str)
    return values
