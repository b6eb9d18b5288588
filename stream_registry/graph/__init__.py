"""Graph output: Memgraph-style transformations, Cypher rendering and the sinks that write it."""
