"""The host's side of the registry: what its calls decide, under each stream's lock.

stream_table (the streams by name, each with its lock), definitions (create,
alter), lifecycle (start, stop, drop, exits and restarts; a runner per stream
from runners.engines), offset_calls (set, revert, cancel, pending, history,
describe, check), positions (where partitions stand and where an offset spec
resolves), admission and sink_check (create's and alter's checks), sink_change
(an alter of the sink as an offset change), preview (check's statements),
stream_info and starting (what describe shows).
"""
