"""The `streams` query module file, loaded and called from Python the way Memgraph does it.

For programs that act as a Memgraph user without a Memgraph (the demo, the
offset benchmark): the file itself runs, a thin HTTP client of the host, so what
they show and measure is the Cypher path. Memgraph's loader is stood in for only
where it must be: `_mgp`'s module handle, which collects what the file registers.
"""
from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from stream_registry import StreamError
from stream_registry.graph.cypher_literals import to_cypher_literal

from .settings import TOKEN_ENV, URL_ENV

STREAMS_MODULE = Path(__file__).resolve().parents[1] / "query_modules" / "streams.py"
_ABSENT = object()


class QueryModule:
    """The query module file loaded as Memgraph loads it, its procedures called as Cypher calls them.

    While the file is imported, `_mgp`'s module handle collects what it registers
    (`_Registrations`), so procedures are found by the names Cypher uses. `call`
    tells `on_call` the `CALL streams.…` it stands for (arguments by position, as
    Memgraph takes them) and returns each record's fields. While open,
    MGSTREAMS_URL (and MGSTREAMS_TOKEN) point the module at the host, as the
    environment of Memgraph's process would.
    """

    def __init__(self, path: str | os.PathLike, url: str, token: str | None = None,
                 on_call: Callable[[str], None] | None = None):
        self.path = Path(path)
        self.namespace = self.path.stem
        self.on_call = on_call
        self._env = {URL_ENV: url, **({TOKEN_ENV: token} if token else {})}
        self._saved: dict[str, str | None] = {}
        self.procedures: dict[str, Callable[[Any, Sequence[Any]], Any]] = {}

    def open(self) -> QueryModule:
        self._saved = {key: os.environ.get(key) for key in self._env}
        os.environ.update(self._env)
        try:
            self.procedures = self._load()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Give the environment back."""
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved = {}

    def __enter__(self) -> QueryModule:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def _load(self) -> dict[str, Callable[[Any, Sequence[Any]], Any]]:
        import mgp

        spec = importlib.util.spec_from_file_location(self.namespace, self.path)
        if spec is None or spec.loader is None or not self.path.is_file():
            raise StreamError(f"query module: no file at {self.path}")
        backend, registrations = mgp._mgp, _Registrations()
        saved = {name: getattr(backend, name, _ABSENT) for name in ("Module", "_MODULE")}
        backend.Module, backend._MODULE = _Registrations, registrations
        try:
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
        except Exception as exc:  # what `CALL mg.load` would report
            raise StreamError(f"query module {self.path}: cannot load it: {type(exc).__name__}: {exc}") from None
        finally:
            for name, value in saved.items():
                if value is _ABSENT:
                    delattr(backend, name)
                else:
                    setattr(backend, name, value)
        return registrations.procedures

    def call(self, procedure: str, *args: Any, secret_args: Sequence[int] = (),
             quiet: bool = False) -> list[dict[str, Any]]:
        """Call a procedure; its failure (one error line, as Memgraph shows it) becomes a StreamError."""
        shown = [to_cypher_literal({key: "***" for key in arg} if i in secret_args else arg)
                 for i, arg in enumerate(args)]
        statement = f"CALL {self.namespace}.{procedure}({', '.join(shown)})"
        if self.on_call is not None and not quiet:
            self.on_call(statement)
        wrapper = self.procedures.get(procedure)
        if wrapper is None:
            raise StreamError(f"{statement}: {self.path.name} registers no procedure {procedure!r}")
        try:
            result = wrapper(None, args)     # as Memgraph calls it: (graph, arguments)
        except Exception as exc:
            raise StreamError(f"{statement}: {' '.join(str(exc).split())}") from None
        records = [result] if hasattr(result, "fields") else list(result or ())
        return [dict(record.fields) for record in records]


class _Registrations:
    """Stands in for Memgraph's module handle while a file is imported: keeps each procedure's
    callback under the name Cypher calls it by; declared signatures are accepted, not enforced."""

    def __init__(self):
        self.procedures: dict[str, Callable[[Any, Sequence[Any]], Any]] = {}

    def add_read_procedure(self, callback) -> _Registrations:
        self.procedures[callback.__name__] = callback
        return self

    add_write_procedure = add_read_procedure

    def add_function(self, callback) -> _Registrations:
        return self

    def add_transformation(self, callback) -> None:
        pass

    def add_arg(self, *args: Any) -> None:
        pass

    add_opt_arg = add_result = add_deprecated_result = add_arg
