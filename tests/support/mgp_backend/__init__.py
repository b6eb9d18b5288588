"""A `_mgp` backend so query modules run on Memgraph's real `mgp.py` in tests.

`_mgp.py` is the backend (imported only as `_mgp`, inside `mgp_environment`);
`harness.py` plays the server: it loads modules and CALLs procedures.
"""
from .harness import QUERY_MODULES, Memgraph, Node, QueryError, Relationship, mgp_environment, query_modules

__all__ = ["QUERY_MODULES", "Memgraph", "Node", "QueryError", "Relationship", "mgp_environment", "query_modules"]
