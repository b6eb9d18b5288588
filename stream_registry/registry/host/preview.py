"""A preview of what a stream would write (Memgraph's CHECK STREAM): its transformation run on chosen records.

It runs the stream's own code, so a stream host calls it through one_shot.call_in_child.
"""
from __future__ import annotations

from collections.abc import Mapping

from ...config import StreamConfig
from ...errors import TransformError
from ...formats import Decoder
from ...graph.transform import decode_all, plain_parameters, run_transformation, wrap
from ...kafka.sample import read_records
from ...model import PartitionKey, PreviewStatement
from ..runners.runner import load_stream_transformation


def preview(config: StreamConfig, starts: Mapping[PartitionKey, int], ends: Mapping[PartitionKey, int], limit: int,
            timeout: float) -> list[PreviewStatement]:
    """The statements the transformation makes of up to `limit` records per partition from `starts`,
    one record at a time (each statement is known by its offset). A record the transformation fails on (the
    message's fault) is one row holding the error, between the statements of the others: what a live stream
    would stop at, or set aside with errors.tolerance 'all'. Nothing is committed or written."""
    transformation = load_stream_transformation(config)
    records = read_records(config, starts, ends, limit, timeout)
    decoder = Decoder.for_stream(config)   # the values the stream's transformation would see
    out = []
    for tp in starts:
        for record in records[tp]:
            message = wrap(record, decoder)
            try:   # a record that does not decode, or whose transformation raises: a row saying why
                decode_all([message])
                statements = run_transformation(transformation, [message], name=config.transform)
            except TransformError as exc:
                out.append(PreviewStatement(topic=tp[0], partition=tp[1], offset=record.offset(), query="",
                                            error=str(exc)))
                continue
            for statement in statements:
                out.append(PreviewStatement(topic=tp[0], partition=tp[1], offset=record.offset(), query=statement.query,
                                            parameters=plain_parameters(statement.parameters)))
    return out
