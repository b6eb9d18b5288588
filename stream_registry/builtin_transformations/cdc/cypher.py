"""The Cypher the `debezium` transformation writes: one UNWIND statement per kind of change and table.

What the graph holds, per mirrored row: a node with the table's label, its key columns, its columns, and
`_debezium_mark` (the stream's mark: only nodes with it are matched, updated or deleted),
`_debezium_position`/`_debezium_origin`/`_debezium_sequence`/`_debezium_time` (the position of the event that
wrote it, positions.Position), and
`_debezium_snapshot` (the snapshot that last read it). A deleted row leaves a `_DebeziumDeleted` marker (its key as
columns as `k0`, `k1`, ..., the delete's position) and a truncated table a `_DebeziumTruncated` marker, so that an older event
processed later (a repartitioned topic, a replay) does not bring the row back; markers of deletes older than
`delete_retention_ms` (by the source's clock) go.

Written for engines that plan `UNWIND ... MERGE ... SET` eagerly (FalkorDB: with two rows for one node, the first
wins): the batch is folded so that every statement names a node once (fold.py), and no property holds a map.
"""
from __future__ import annotations

from .options import RelationshipSpec

MARK = "_debezium_mark"
POSITION = "_debezium_position"
ORIGIN = "_debezium_origin"
SEQUENCE = "_debezium_sequence"
TIME = "_debezium_time"
SNAPSHOT = "_debezium_snapshot"
DELETED_LABEL = "_DebeziumDeleted"
TRUNCATED_LABEL = "_DebeziumTruncated"
ROWS = "mgstreams_rows"
_UNWIND = f"UNWIND ${ROWS} AS r "


def name(identifier: str) -> str:
    """A label, type or property name as a Cypher identifier (backticks doubled inside)."""
    return "`" + identifier.replace("`", "``") + "`"


def _compare(stored: str, row: str, operator: str) -> str:
    """Cypher for `stored <operator> row` by position (positions.Position.at_least): by GTID when both carry one
    (by time across GTID origins), else by position text."""
    p, o, q, t = name(POSITION), name(ORIGIN), name(SEQUENCE), name(TIME)
    both = f"{stored}.{o} <> '' AND {row}.origin <> ''"
    return (f"(({both}) AND ({stored}.{o} = {row}.origin AND {stored}.{q} {operator} {row}.sequence OR "
            f"{stored}.{o} <> {row}.origin AND {stored}.{t} {operator} {row}.time) OR "
            f"NOT ({both}) AND {stored}.{p} {operator} {row}.position)")


def not_newer(stored: str, row: str = "r") -> str:
    """Cypher for: what `stored` holds is not newer than the event `row`."""
    return _compare(stored, row, "<=")


def _older(stored: str) -> str:
    """The marker `stored` is older than the event r (or absent): the event applies."""
    return f"({stored} IS NULL OR {_compare(stored, 'r', '<')})"


def _node(label: str, key_columns: tuple[str, ...]) -> str:
    keys = ", ".join(f"{name(c)}: r.k{i}" for i, c in enumerate(key_columns))
    return f"(n:{name(label)} {{{keys}, {name(MARK)}: $mark}})"


def _marker(key_columns: tuple[str, ...]) -> str:
    keys = "".join(f", k{i}: r.k{i}" for i in range(len(key_columns)))
    return f"(d:{name(DELETED_LABEL)} {{{name(MARK)}: $mark, label: $label{keys}}})"


def _stamp(variable: str) -> str:
    return (f"SET {variable}.{name(POSITION)} = r.position, {variable}.{name(ORIGIN)} = r.origin, "
            f"{variable}.{name(SEQUENCE)} = r.sequence, {variable}.{name(TIME)} = r.time")


def upsert(label: str, key_columns: tuple[str, ...], unchanged: tuple[str, ...]) -> str:
    """MERGE each row's node unless a newer write, delete or truncate of it is known; its properties become the
    row's, but for `unchanged` columns (TOAST), which keep the stored value."""
    keep = "".join(f", n.{name(c)} AS keep{i}" for i, c in enumerate(unchanged))
    restore = "".join(f" SET n.{name(c)} = keep{i}" for i, c in enumerate(unchanged))
    return (f"{_UNWIND}OPTIONAL MATCH (t:{name(TRUNCATED_LABEL)} {{{name(MARK)}: $mark, label: $label}}) "
            f"WITH r, t WHERE {_older('t')} "
            f"OPTIONAL MATCH {_marker(key_columns)} "
            f"WITH r, d WHERE {_older('d')} "
            f"MERGE {_node(label, key_columns)} "
            f"WITH r, n{keep} WHERE n.{name(POSITION)} IS NULL OR {not_newer('n')} "
            f"SET n = r.properties{restore}")


def delete_queries(label: str, key_columns: tuple[str, ...]) -> list[str]:
    """Each row's marker (kept newest), then its node, unless the node holds a newer write."""
    return [f"{_UNWIND}MERGE {_marker(key_columns)} "
            f"WITH r, d WHERE d.{name(POSITION)} IS NULL OR {not_newer('d')} {_stamp('d')}",
            f"{_UNWIND}MATCH {_node(label, key_columns)} WHERE n.{name(POSITION)} IS NULL OR {not_newer('n')} "
            f"DETACH DELETE n"]


def truncate_queries(label: str) -> list[str]:
    """The table's marker (kept newest), then every node of it this stream wrote that is not newer."""
    return [f"{_UNWIND}MERGE (t:{name(TRUNCATED_LABEL)} {{{name(MARK)}: $mark, label: $label}}) "
            f"WITH r, t WHERE t.{name(POSITION)} IS NULL OR {not_newer('t')} {_stamp('t')}",
            f"{_UNWIND}MATCH (n:{name(label)}) WHERE n.{name(MARK)} = $mark AND (n.{name(POSITION)} IS NULL OR "
            f"{not_newer('n')}) DETACH DELETE n"]


def snapshot_sweep(label: str, key_columns: tuple[str, ...]) -> str:
    """After a complete snapshot of the table: its nodes this stream wrote that the snapshot did not read, and
    that no event after the snapshot wrote, go (rows deleted while the connector was not reading), each leaving
    a delete marker at the snapshot's position."""
    keys = "".join(f", n.{name(c)} AS k{i}" for i, c in enumerate(key_columns))
    marker = "".join(f", k{i}: k{i}" for i in range(len(key_columns)))
    return (f"{_UNWIND}MATCH (n:{name(label)}) WHERE n.{name(MARK)} = $mark AND "
            f"coalesce(n.{name(SNAPSHOT)}, '') <> r.snapshot AND (n.{name(POSITION)} IS NULL OR {not_newer('n')}) "
            f"WITH r, n{keys} DETACH DELETE n "
            f"MERGE (d:{name(DELETED_LABEL)} {{{name(MARK)}: $mark, label: $label{marker}}}) {_stamp('d')}")


def markers_aged() -> str:
    return (f"MATCH (d:{name(DELETED_LABEL)}) WHERE d.{name(MARK)} = $mark AND d.{name(TIME)} < $before "
            f"DELETE d")


def relationship(spec: RelationshipSpec, label: str, key_columns: tuple[str, ...]) -> list[str]:
    """For rows whose node now holds this event (its position): the old relationship goes when the column
    changed or became null; the target (MERGEd once per distinct key, with the mark) is linked."""
    rel, target_key, target = name(spec.type), name(spec.key), name(spec.label)
    held = f"n.{name(POSITION)} = r.position"
    return [f"{_UNWIND}MATCH {_node(label, key_columns)}-[old:{rel}]->(m) WHERE {held} AND "
            f"(r.target IS NULL OR m.{target_key} <> r.target) DELETE old",
            f"UNWIND $targets AS target MERGE (m:{target} {{{target_key}: target, {name(MARK)}: $mark}})",
            f"{_UNWIND}MATCH {_node(label, key_columns)} WHERE {held} AND r.target IS NOT NULL "
            f"MATCH (m:{target} {{{target_key}: r.target, {name(MARK)}: $mark}}) MERGE (n)-[:{rel}]->(m)"]
