"""Benchmarks and the chaos soak: scripts that print ratios against a baseline measured in the same run."""
