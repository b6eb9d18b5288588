"""A preview of what a stream would write (Memgraph's CHECK STREAM): its transformation run on chosen records.

It runs the stream's own code, so a stream host calls it through one_shot.call_in_child.
"""
from __future__ import annotations

from collections.abc import Mapping

from ..config import StreamConfig
from ..formats import Decoder
from ..graph.transform import decode_all, plain_parameters, run_transformation, wrap
from ..kafka.sample import read_records
from ..model import PartitionKey, PreviewStatement
from .runner import load_stream_transformation


def preview(config: StreamConfig, starts: Mapping[PartitionKey, int], ends: Mapping[PartitionKey, int], limit: int,
            timeout: float) -> list[PreviewStatement]:
    """The statements the transformation makes of up to `limit` records per partition from `starts`,
    one record at a time (each statement is known by its offset). Nothing is committed or written."""
    transformation = load_stream_transformation(config)
    records = read_records(config, starts, ends, limit, timeout)
    decoder = Decoder.for_stream(config)   # the values the stream's transformation would see
    out = []
    for tp in starts:
        for record in records[tp]:
            message = wrap(record, decoder)
            decode_all([message])
            for statement in run_transformation(transformation, [message], name=config.transform):
                out.append(PreviewStatement(topic=tp[0], partition=tp[1], offset=record.offset(), query=statement.query,
                                            parameters=plain_parameters(statement.parameters)))
    return out
