"""`python -m mgstreams.demo --out demo-out` (what `make demo` runs)."""
from .command import main

main(prog_name="python -m mgstreams.demo")
