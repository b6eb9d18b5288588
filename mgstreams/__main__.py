"""`python -m mgstreams`: the same as the `mgstreams` command."""
from .cli import main

main()
