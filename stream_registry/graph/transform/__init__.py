"""Memgraph-compatible transformations: messages in, Cypher statements out.

One loader and one runner serve the live streams, the CLI and Spark, so a
transformation file written for Memgraph's built-in streams (`import mgp`,
`@mgp.transformation`) runs unchanged here, and a plain Python function
`f(messages) -> [{"query": ..., "parameters": {...}}]` works too.

- messages: `Message` and `Messages`, the mgp-like batch a transformation reads;
- loader: `load_transformation`, resolving `module.function` only where an
  operator allows, and the `@mgp.transformation` registration stand-in;
- run: `run_transformation`, one batch in, Statements out.
"""
from ..parameter_values import plain_parameters
from ..statement import Statement
from .loader import (
    BUILTIN_PACKAGES,
    QUERY_MODULES_ENV,
    TRANSFORM_PACKAGES_ENV,
    is_builtin,
    load_transformation,
    locate_transformation,
    transform_packages,
)
from .messages import DecodedMessage, Message, Messages, decode_all, wrap
from .run import run_transformation

__all__ = [
    "BUILTIN_PACKAGES", "QUERY_MODULES_ENV", "TRANSFORM_PACKAGES_ENV", "DecodedMessage", "Message", "Messages",
    "Statement", "decode_all", "wrap",
    "is_builtin", "load_transformation", "locate_transformation", "plain_parameters", "run_transformation",
    "transform_packages",
]
