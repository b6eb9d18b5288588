"""Where a partition goes on when librdkafka found no offset to fetch from, and what was lost (data_loss.decide):
the worker's consumer runs with auto.offset.reset=error, so this table is the whole of the policy."""
from __future__ import annotations

import pytest

from stream_registry.config import DataLossPolicy
from stream_registry.model import PartitionKey
from stream_registry.registry.stream.data_loss import OFFSET_BEGINNING, OFFSET_END, decide

TP = PartitionKey("orders", 0)
CONTINUE, STOP = DataLossPolicy.CONTINUE, DataLossPolicy.STOP


@pytest.mark.parametrize("at, watermarks, policy, on_loss, start, lost", [
    (-1, None, "earliest", CONTINUE, OFFSET_BEGINNING, None),          # nothing committed: where the policy says
    (-1, None, "latest", STOP, OFFSET_END, None),
    (3, (10, 20), "earliest", CONTINUE, 10, (3, 10)),                  # the log start moved past it: 7 lost
    (3, (10, 20), "smallest", CONTINUE, 10, (3, 10)),
    (3, (10, 20), "latest", CONTINUE, 20, (3, 20)),                    # latest skips the rest too: all unread
    (25, (10, 20), "earliest", CONTINUE, 10, None),                    # past the end (a log cut back): no loss
    (25, (10, 20), "latest", CONTINUE, 20, None),
    (12, (10, 20), "earliest", CONTINUE, 12, None),                    # in range again: go on from it
    (3, None, "earliest", CONTINUE, None, None),                       # watermarks unknown: asked again later
])
def test_decide(at, watermarks, policy, on_loss, start, lost):
    got = decide(TP, at, watermarks, policy, on_loss)
    assert got.fail is None and got.start == start
    assert (None if got.lost is None else (got.lost.from_offset, got.lost.to_offset)) == lost


def test_stop_and_error_policies_fail_naming_the_range():
    stopped = decide(TP, 3, (10, 20), "earliest", STOP)
    assert stopped.start is None and stopped.fail.startswith(
        "7 record(s) of orders:0 (offsets 3 to 9) left the log before the stream read them (log start 10); "
        "on_data_loss is stop: the stream stopped at offset 3")
    assert "auto.offset.reset is 'error'" in decide(TP, 3, (10, 20), "error", CONTINUE).fail
    assert "has no committed offset and auto.offset.reset is 'error'" in decide(TP, -1, None, "error", CONTINUE).fail
