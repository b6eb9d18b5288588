"""The Bolt client's cost per row: what the neo4j driver spends packing an UNWIND batch's rows (PackStream, the
Memgraph path: parameters go as Bolt values), with and without its Rust extension (`neo4j-rust-ext`, a
dependency of mgstreams, pinned with the driver: pyproject.toml), and what mgstreams spends rendering the same rows
as FalkorDB's literals (the falkordb path: parameters in the query text). Imports only the driver (and, when
importable, mgstreams' renderer), so it runs in a bare virtualenv too:

    .venv/bin/python bench/bolt_driver_cost.py

Both driver figures come from one process: the driver's pure-Python packer (`Packer._py_pack`, what it runs
without the extension) and its packer as loaded (the extension's, when it is installed).

The rows are the built-in merge_messages' (topic, partition, offset, a 200-byte payload, key, timestamp).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

ROWS = 1000
ROUNDS = 30


def rows(count: int = ROWS) -> list[dict]:
    pad = "x" * 180
    return [{"topic": "ingest", "partition": i % 6, "offset": i, "payload": f'{{"i": {i}, "pad": "{pad}"}}',
             "key": None, "timestamp": 1_700_000_000_000 + i} for i in range(count)]


def best_us_per_row(fn, batch) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        fn(batch)
        best = min(best, time.perf_counter() - started)
    return best / len(batch) * 1e6


def main(argv: list[str] | None = None) -> int:
    import argparse

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    import neo4j
    from neo4j._codec.packstream import v1

    def pack(batch) -> None:
        v1.Packer(v1.PackableBuffer()).pack({"mgstreams_rows": batch})

    def pack_python(batch) -> None:
        packer = v1.Packer(v1.PackableBuffer())
        packer._py_pack({"mgstreams_rows": batch}, packer._inject_hooks())

    batch = rows()
    rust = v1._rust_pack is not None
    print(f"neo4j {neo4j.__version__}, Rust extension {'loaded' if rust else 'not installed'}; "
          f"{ROWS} rows a batch, best of {ROUNDS}")
    python_us = best_us_per_row(pack_python, batch)
    print(f"driver (PackStream, the memgraph engine's parameters), pure Python: {python_us:.2f} us/row")
    if rust:
        rust_us = best_us_per_row(pack, batch)
        print(f"driver (PackStream, the memgraph engine's parameters), neo4j-rust-ext: {rust_us:.2f} us/row "
              f"({python_us / rust_us:.0f}x faster)")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    try:
        from stream_registry.graph.sinks.bolt_driver import inline_parameters
    except ImportError:
        print("mgstreams not importable here: no literal rendering figure")
        return 0
    figure = best_us_per_row(lambda b: inline_parameters("RETURN 1", {"mgstreams_rows": b}), batch)
    print(f"mgstreams (literals, the falkordb engine's parameters): {figure:.2f} us/row")
    return 0


if __name__ == "__main__":
    sys.exit(main())
