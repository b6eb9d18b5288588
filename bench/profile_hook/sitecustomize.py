"""bench/ingest_throughput.py --profile: the stages of each stream process of the bench's host, timed (this
directory is put first on the host's PYTHONPATH, so its stream processes import this file at start-up).

With MGSTREAMS_BENCH_PROFILE set to a file, every StreamWorker started in this process gets bench/stage_timers.py's
timers around its stages (the instance patched before its poll thread starts, in this process only; the product's
code is not changed). The poll thread's totals are taken after every batch, so what it spends after the last one
(idle until the bench stops the stream) is left out, and so is the first batch (start-up: the group join); when
the poll thread ends, one JSON line `{"pid", "messages", "seconds", "cpu"}` is appended to the file.
"""
import os

_PATH = os.environ.get("MGSTREAMS_BENCH_PROFILE")

if _PATH:
    import json
    import sys
    import time

    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # bench/, for stage_timers
    import stage_timers

    from stream_registry.registry.stream.worker import StreamWorker

    _start = StreamWorker.start

    def _profiled_start(self, *args, **kwargs):
        timers = stage_timers.Timers()
        stage_timers.instrument(self, timers)
        writer = self.writer
        process = writer.process
        marks: list = []   # (messages, seconds, cpu) after the first batch and after the last one
        counted = [0]
        loop_started = [0.0, 0.0]

        def counting(batch, *a, **kw):
            outcome = process(batch, *a, **kw)
            counted[0] += len(batch)
            timers.seconds["loop"] = time.perf_counter() - loop_started[0]
            timers.cpu["loop"] = time.thread_time() - loop_started[1]
            mark = (counted[0], dict(timers.seconds), dict(timers.cpu))
            if not marks:
                marks.append(mark)
            marks[1:] = [mark]
            return outcome
        writer.process = counting
        run = self._run

        def poll_thread():
            loop_started[:] = [time.perf_counter(), time.thread_time()]
            try:
                run()
            finally:
                if len(marks) == 2:
                    (n0, s0, c0), (n1, s1, c1) = marks
                    line = {"pid": os.getpid(), "messages": n1 - n0,
                            "seconds": {k: v - s0.get(k, 0.0) for k, v in s1.items()},
                            "cpu": {k: v - c0.get(k, 0.0) for k, v in c1.items()}}
                    fd = os.open(_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                    try:
                        os.write(fd, (json.dumps(line) + "\n").encode())
                    finally:
                        os.close(fd)
        self._run = poll_thread
        return _start(self, *args, **kwargs)

    StreamWorker.start = _profiled_start

if os.environ.get("MGSTREAMS_BENCH_BOLT_TRIPS"):   # --sink bolt too: bench/bolt_trips's hook, which this file shadows
    import runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bolt_trips",
                                "sitecustomize.py"))
