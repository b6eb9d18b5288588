"""The stream process's side: one running stream's poll loop and its parts, all on its poll thread.

worker (the loop), poll_context (what the parts share), assignment (the
partitions held, start points, resume from the sink, data loss), batch_writer
(the delivery of a batch, with poison, dead_letter and realign), group_commits
and commits (the group's commits: bounded, owed, marked), health (status,
outage), offset_gate and change_marks (offset changes: the one place a
partition's status is decided), stream_events and batch_stats (what it reports).
Nothing here knows of the registry, the state store or how the stream is run.
"""
