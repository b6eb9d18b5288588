"""Graph sinks: one interface for every place a batch of statements can go.

A sink is named by a URI, validated when a stream is created (no I/O) and
opened when it starts. One module per concept:

- protocol: the `Sink` protocol, `Written`, `Scheme`;
- schemes: the `SCHEMES` registry, `open_sink`, `validate_sink_uri`;
- uri: the checks every sink URI passes (no credentials in it, no fragment);
- policy: `OutputPolicy`, the directories file sinks named by untrusted
  callers may write under ($MGSTREAMS_OUTPUT_DIRS);
- null (`null://`), cypherl (`cypherl:///abs/file.cypherl`), bolt
  (`bolt://`, `bolt+s://`, `bolt+ssc://`), bolt_driver (the neo4j driver
  behind it, per engine) and tls (the pinned key's fingerprint);
- stored_offsets: what an exactly-once stream stored with its batches.

`write(statements, expect=...)` is all or nothing from the caller's view on an
engine with transactions (Memgraph; bolt_driver.Engine says what FalkorDB
leaves) and raises SinkError on failure (graph.sink_faults says whose fault it
is); an exactly-once batch checks the offsets it continues from
(offset_store.continuation). Tests replace the Bolt client at
`sinks.bolt.connect_driver` (where it is looked up; the package does not
re-export it, so a stale patch of `sinks.connect_driver` fails loudly instead
of doing nothing).
"""
from ...errors import SinkError
from .bolt import DEFAULT_BOLT_PORT, BoltSettings, BoltSink
from .cypherl import CypherlSettings, CypherlSink
from .null import NullSink
from .policy import OUTPUT_DIRS_ENV, OutputPolicy
from .protocol import Scheme, Sink, Written
from .schemes import SCHEMES, open_sink, validate_sink_uri
from .stored_offsets import read_stored_offsets, read_stored_offsets_within
from .uri import PASSWORD_KEY, USERNAME_KEY

__all__ = [
    "DEFAULT_BOLT_PORT", "OUTPUT_DIRS_ENV", "PASSWORD_KEY", "SCHEMES", "USERNAME_KEY", "BoltSettings", "BoltSink",
    "CypherlSettings", "CypherlSink", "NullSink", "OutputPolicy", "Scheme", "Sink", "SinkError", "Written",
    "open_sink", "read_stored_offsets", "read_stored_offsets_within", "validate_sink_uri",
]
