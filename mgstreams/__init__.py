"""The mgstreams application: the stream host, the operator CLI and the demo.

It composes the two libraries below it (`stream_registry`, the core, and
`spark_bridge`, the Spark bridge) and belongs to neither; nothing imports it
back.
"""
