"""Bolt mode: the live stream writes to Memgraph; clear what an earlier run left, read back what it wrote."""
from __future__ import annotations

import sys
from urllib.parse import urlsplit

from stream_registry.graph.cypher_literals import render_statement
from stream_registry.registry.runners.runner import query_module_dirs

from .records import normalize
from .results import Record
from .settings import TRANSFORM, DemoSettings


def _bolt_connect(settings: DemoSettings):
    from stream_registry.graph.sinks.bolt import connect_driver

    parts = urlsplit(settings.memgraph_uri or "")
    kwargs = {"host": parts.hostname or "localhost", "port": parts.port or 7687, "scheme": parts.scheme.lower()}
    credentials = settings.memgraph_credentials
    if credentials.get("bolt.username"):
        kwargs.update(username=credentials["bolt.username"], password=credentials.get("bolt.password", ""))
    connection = connect_driver(**kwargs)
    connection.autocommit = True
    return connection


def clear_graph(settings: DemoSettings) -> None:
    """Bolt mode: drop the TRANSFER relationships an earlier run of the demo left (same topic name)."""
    connection = _bolt_connect(settings)
    try:
        connection.cursor().execute("MATCH ()-[t:TRANSFER]->() WHERE t.kafka_topic = $topic DELETE t",
                                    {"topic": settings.topic})
    finally:
        connection.close()


def _transfer_query() -> str:
    from stream_registry.graph.transform import load_transformation

    fn = load_transformation(TRANSFORM, query_module_dirs())
    return sys.modules[fn.__module__].TRANSFER_QUERY


def read_graph(settings: DemoSettings) -> list[Record]:
    """Bolt mode: the live stream's transfers as Memgraph holds them, rendered as the transformation would."""
    query = _transfer_query()
    connection = _bolt_connect(settings)
    try:
        cursor = connection.cursor()
        cursor.execute("MATCH (a:Account)-[t:TRANSFER]->(b:Account) WHERE t.kafka_topic = $topic "
                       "RETURN t.transfer_id, a.id, b.id, t.amount, t.currency, t.ts, t.kafka_topic, "
                       "t.kafka_partition, t.kafka_offset ORDER BY t.kafka_partition, t.kafka_offset",
                       {"topic": settings.topic})
        rows = cursor.fetchall()
    finally:
        connection.close()
    names = ("transfer_id", "from_account", "to_account", "amount", "currency", "ts", "kafka_topic",
             "kafka_partition", "kafka_offset")
    records = []
    for row in rows:
        params = dict(zip(names, row, strict=True))
        records.append(Record(params["kafka_topic"], params["kafka_partition"], params["kafka_offset"],
                              normalize(render_statement(query, params))))
    return records
