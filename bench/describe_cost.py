"""What reading the stored offsets of a large exactly-once cypherl file costs (describe, the lag sampler,
a rebalance), against scanning the file's offset lines, in one run.

    .venv/bin/python bench/describe_cost.py                 # a 1 GB file in /tmp, deleted afterwards
    .venv/bin/python bench/describe_cost.py --gb 0.2 --dir /dev/shm

The file is written through the cypherl sink as an exactly-once stream writes
it: batches of 1000 statements, each followed by its offsets statements and
frame line, on partitions 0 and 1 of a 3-partition topic (partition 2 is never
written: the case that made every read scan the whole file). Then:

- describe: `read_stored_offsets(uri, stream, partitions)` (what the host does
  for a stopped stream; a running one keeps them in memory), timed over
  `--reads` calls, with the bytes it read (the kernel's count);
- open: opening the sink for writing (it checks the last batch's CRC and cuts a
  torn tail): bounded by one batch;
- scan: the offset lines read backwards over the whole file, as before framing
  (the baseline, once).

Prints each figure and `ratio: X` (scan time / describe time).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stream_registry.graph import cypherl_frames  # noqa: E402
from stream_registry.graph.offset_store import offset_statements  # noqa: E402
from stream_registry.graph.sinks.cypherl import CypherlSink  # noqa: E402
from stream_registry.graph.sinks.stored_offsets import read_stored_offsets  # noqa: E402
from stream_registry.graph.transform import Statement  # noqa: E402

STREAM, TOPIC = "orders", "orders"
BATCH = 1000
QUERY = "MERGE (n:KafkaRecord {topic: $topic, partition: $partition, offset: $offset}) SET n.payload = $payload"


def bytes_read() -> int:
    for line in Path("/proc/thread-self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return 0


def write_file(path: Path, target: int, payload: int) -> dict:
    next_offset = {0: 0, 1: 0}
    with CypherlSink(str(path)) as sink:
        while path.stat().st_size < target:
            partition = min(next_offset, key=next_offset.get)
            first = next_offset[partition]
            batch = [Statement(QUERY, {"topic": TOPIC, "partition": partition, "offset": o,
                                       "payload": "p" * payload}) for o in range(first, first + BATCH)]
            next_offset[partition] = first + BATCH
            sink.write(batch + offset_statements(STREAM, {(TOPIC, partition): first + BATCH}),
                       expect={(TOPIC, partition): first or None})
    return {(TOPIC, p): o for p, o in next_offset.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=1.0, help="file size in GB (default 1)")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where to write it (default /tmp)")
    parser.add_argument("--reads", type=int, default=200, help="describe reads to time (default 200)")
    parser.add_argument("--payload", type=int, default=1000, help="payload bytes per statement (default 1000)")
    args = parser.parse_args(argv)
    path = Path(tempfile.mkdtemp(prefix="mgstreams-describe-", dir=args.dir)) / "orders.cypherl"
    uri = f"cypherl://{path}"
    wanted = [(TOPIC, 0), (TOPIC, 1), (TOPIC, 2)]
    try:
        t = time.perf_counter()
        expected = write_file(path, int(args.gb * (1 << 30)), args.payload)
        size = path.stat().st_size
        print(f"describe cost: {size / (1 << 30):.2f} GB exactly-once cypherl file ({path}), written in "
              f"{time.perf_counter() - t:.1f} s; partitions 0, 1 written, 2 never", flush=True)

        before, t = bytes_read(), time.perf_counter()
        for _ in range(args.reads):
            found = read_stored_offsets(uri, STREAM, partitions=wanted)
        describe_s = (time.perf_counter() - t) / args.reads
        describe_bytes = (bytes_read() - before) / args.reads
        if found != expected:
            raise SystemExit(f"bench: read {found}, expected {expected}")
        print(f"  describe   {describe_s * 1e3:9.3f} ms per read, {describe_bytes:12,.0f} bytes read "
              f"(mean of {args.reads})", flush=True)

        before, t = bytes_read(), time.perf_counter()
        CypherlSink(str(path)).close()
        open_s, open_bytes = time.perf_counter() - t, bytes_read() - before
        print(f"  open       {open_s * 1e3:9.3f} ms, {open_bytes:12,.0f} bytes read (the last batch's CRC)",
              flush=True)

        before, t = bytes_read(), time.perf_counter()
        fd = os.open(path, os.O_RDONLY)
        try:
            scanned = cypherl_frames._scan_offset_lines(fd, size, STREAM, set(wanted))
        finally:
            os.close(fd)
        scan_s, scan_bytes = time.perf_counter() - t, bytes_read() - before
        if scanned != expected:
            raise SystemExit(f"bench: the scan read {scanned}, expected {expected}")
        print(f"  scan       {scan_s * 1e3:9.1f} ms, {scan_bytes:12,.0f} bytes read (the baseline: every offset "
              f"line, backwards)", flush=True)
    finally:
        if path.exists():
            path.unlink()
        path.parent.rmdir()
    print(f"ratio: {scan_s / describe_s:,.0f}  (scan / describe; describe reads "
          f"{describe_bytes / size * 100:.5f}% of the file)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
