"""Events derived from the Debezium corpus (support/debezium_corpus, sources in its README), and the real engine
(the `graph_server` fixture's FalkorDB) to run the transformation's statements in.

`event(sample, ...)` takes a documented sample and changes only what a derived sequence needs (the op, the row,
the position fields); everything else stays as the connector's documentation prints it.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).parent / "debezium_corpus"
MIRROR = "stream_registry.builtin_transformations.debezium"


def sample(name: str) -> dict:
    """One corpus file, its `payload` when the JSON converter wrapped it."""
    doc = json.loads((CORPUS / f"{name}.json").read_text())
    return doc["payload"] if isinstance(doc, dict) and set(doc) == {"schema", "payload"} else doc


def event(name: str, op: str | None = None, after: dict | None = None, **source: Any) -> dict:
    """A corpus sample with its op, row (`after`, or `before` for a delete) and source fields replaced."""
    doc = copy.deepcopy(sample(name))
    if op is not None:
        doc["op"] = op
    if after is not None:
        doc["after" if doc["op"] != "d" else "before"] = after
        if doc["op"] == "d":
            doc["after"] = None
    if "ts_ms" in source and "ts_us" not in source:   # the source's clock, at every precision it prints
        source = {**source, "ts_us": source["ts_ms"] * 1000, "ts_ns": source["ts_ms"] * 1_000_000}
    doc["source"].update(source)
    return doc


class Graph:
    """The real graph server (tests/support/graph_server.py's FalkorDB) the statements run in, one statement at
    a time as the Bolt sink sends them, through its Redis port (its Bolt listener takes no more than 4096 bytes of
    parameters); cleared first."""

    def __init__(self, server):
        self.server = server
        server.clear()

    def run(self, statements) -> None:
        for statement in statements:
            query, parameters = (statement.query, statement.parameters) if hasattr(statement, "query") else \
                (statement["query"], statement["parameters"])
            self.server.query(query, dict(parameters))

    def table(self, label: str, key: str = "id") -> dict[Any, dict]:
        """The rows the graph holds for `label`: {key: columns}, without the transformation's own properties."""
        out: dict[Any, dict] = {}
        for row in self.server.query(f"MATCH (n:`{label}`) RETURN properties(n) AS p"):
            columns = {k: v for k, v in row["p"].items() if not k.startswith("_debezium")}
            assert columns[key] not in out, f"two nodes for {label} {key}={columns[key]}"
            out[columns[key]] = columns
        return out

    def count(self, query: str) -> int:
        return next(iter(self.server.query(query)[0].values()))
