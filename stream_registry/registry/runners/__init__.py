"""Where a stream runs: the engine seam and the built-in engines.

engine (the StreamRunner interface the registry holds, and how a new engine
plugs in), engines (the one place an engine is picked), runner (a stream on a
thread of this process), stream_process and child_process (a stream in a child
process of its own, over a pipe of typed messages), task_runner (`tasks: N` as
one runner), one_shot (one call in a short-lived child), caps (process and
memory caps) and restarts (the restart policy's backoff).
"""
