"""bench/ingest_throughput.py --sink bolt: the statements each process's Bolt sink sends, counted (this directory is
put first on the PYTHONPATH of the bench's host, so its stream processes import this file at start-up).

With MGSTREAMS_BENCH_BOLT_TRIPS set to a file, every statement a Bolt connection runs appends its process id as one
line there (one line per round trip on an engine without transactions, where each statement is one; a batch is one
UNWIND statement or a few: a line per 100 ms or so). The product's code is not changed: the connect function the
sink looks up is wrapped, in this process only, as the raw loop's `counted_connect` wraps it.
"""
import os

_PATH = os.environ.get("MGSTREAMS_BENCH_BOLT_TRIPS")

if _PATH:
    from stream_registry.graph.sinks import bolt, bolt_driver

    _connect = bolt_driver.connect_driver
    _line = f"{os.getpid()}\n".encode()

    def _counted_connect(**kwargs):
        connection = _connect(**kwargs)
        run = connection._run

        def counted(query, parameters):
            fd = os.open(_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, _line)
            finally:
                os.close(fd)
            return run(query, parameters)
        connection._run = counted
        return connection

    bolt.connect_driver = _counted_connect
