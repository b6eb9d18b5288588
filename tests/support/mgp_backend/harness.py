"""The server side of the test backend: load query modules, CALL procedures.

`mgp_environment()` makes `import mgp` give Memgraph's real `mgp.py` (from the
PyPI package) bound to this directory's `_mgp`, and yields a `Memgraph` that
loads query modules the way the server does (`_mgp._MODULE` set while the file
is imported), validates arguments (`ValidateArguments`), converts values both
ways, calls procedures through mgp's own wrappers, checks records against the
declared result signature, and turns failures into the errors a client sees.
Everything is restored on exit, so other tests keep the PyPI stub `_mgp`.

Unloading (`unload_module`, `reload` = `CALL mg.load(name)`, `load_all` =
`CALL mg.load_all()`) purges `sys.modules` exactly as Memgraph v3.7.2 does:
src/query/procedure/module.cpp, `PythonModule::Close` calling
`ProcessFileDependencies` with the Python snippet `func_code` (see
`purge_dependencies`). A module that keeps state in a package it imports
loses it on every reload; tests here see that as a real server would.
"""
from __future__ import annotations

import ast
import contextlib
import gc
import importlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

BACKEND_DIR = Path(__file__).resolve().parent
QUERY_MODULES = BACKEND_DIR.parents[2] / "query_modules"   # the product's query modules

# `no_removals` of `func_code` in Memgraph v3.7.2's src/query/procedure/module.cpp.
NO_REMOVALS = frozenset({"collections", "abc", "sys", "torch", "torch_geometric", "igraph", "dgl", "numpy"})


def imported_names(source: str) -> set[str]:
    """`func_code`: the first dotted part of every `import a.b` and absolute `from a.b import c`, anywhere
    in the file (function bodies too), minus NO_REMOVALS; relative imports are ignored."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names.add(node.module.split(".")[0])
    return names - NO_REMOVALS


def purge_dependencies(path: str | os.PathLike, module_name: str) -> list[str]:
    """`ProcessFileDependencies(file, module_name)`: delete every `sys.modules` key that *starts with* a name
    the file imports (a string prefix: `import os` drops `os.path` and `ossaudiodev` too, `import mgp` drops
    `mgp_backend`), except `module_name` itself. A file that cannot be read or parsed purges nothing.
    Returns the deleted keys."""
    try:
        names = imported_names(Path(path).read_text())
    except (OSError, SyntaxError, ValueError):
        return []
    purged = [key for key in list(sys.modules)
              if key != module_name and any(key.startswith(name) for name in names)]
    for key in purged:
        sys.modules.pop(key, None)
    return purged


def _submodule_dirs(module_path: Path) -> list[Path]:
    """`PythonModule::Close`: directories under the module's directory (recursively, not descending into a
    match) whose name contains the module's name; their *.py files are purged for too."""
    found = []
    for root, dirs, _files in os.walk(module_path.parent):
        for directory in list(dirs):
            if directory != "__pycache__" and module_path.stem in directory:
                found.append(Path(root) / directory)
                dirs.remove(directory)
    return found


class QueryError(Exception):
    """What the client receives when a query fails (Memgraph's QueryRuntimeException)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    @property
    def last_line(self) -> str:
        """The exception line at the end of a procedure's traceback (or the whole message)."""
        lines = [line for line in self.message.strip().splitlines() if line.strip()]
        return lines[-1] if lines else ""


@dataclass(frozen=True)
class Node:
    """A node as a Bolt client receives it."""
    id: int
    labels: tuple[str, ...]
    properties: dict


@dataclass(frozen=True)
class Relationship:
    id: int
    type: str
    start: int
    end: int
    properties: dict


class Memgraph:
    """One server: its graph, the loaded query modules and their procedures."""

    def __init__(self, backend: ModuleType, mgp: ModuleType, module_dirs: Sequence[str | os.PathLike] = ()):
        self._mgp_c = backend   # `mgp` is looked up at each use, as the server does (see the property)
        self.module_dirs = [Path(d) for d in module_dirs]
        self.store = backend.Store()
        self.modules: dict[str, object] = {}        # name -> _mgp.Module
        self._py_modules: dict[str, ModuleType] = {}

    @property
    def mgp(self) -> ModuleType:
        """The `mgp` a procedure call sees now: a purge replaces it with a fresh import (new classes)."""
        return importlib.import_module("mgp")

    # -- modules -----------------------------------------------------------------
    def load_module(self, path: str | os.PathLike) -> object:
        """Import one Python query module file as the server does; return its `_mgp.Module`."""
        path = Path(path)
        name = path.stem
        self.unload_module(name)
        backend = self._mgp_c
        assert backend._MODULE is None, "another module is being imported"
        module_def = backend.Module(name, str(path))
        backend._MODULE = module_def
        backend._LOGGER = backend.Logger()
        try:
            spec = importlib.util.spec_from_file_location(name, path)
            py_module = importlib.util.module_from_spec(spec)
            sys.modules[name] = py_module
            try:
                spec.loader.exec_module(py_module)
            except BaseException:
                sys.modules.pop(name, None)
                raise
        finally:
            backend._MODULE = None
        self.modules[name] = module_def
        self._py_modules[name] = py_module
        return module_def

    def unload_module(self, name: str) -> None:
        """`PythonModule::Close`: forget the procedures, purge the file's imports (and those of the files in
        its submodule directories) from sys.modules, then the module itself. (Memgraph also deletes the
        `__pycache__` directories there; the test bed leaves files alone.)"""
        module_def = self.modules.pop(name, None)
        if self._py_modules.pop(name, None) is None:
            return
        path = Path(module_def.path)
        purge_dependencies(path, name)
        for directory in _submodule_dirs(path):
            for file in sorted(directory.rglob("*.py")):
                purge_dependencies(file, name)
        sys.modules.pop(name, None)

    def reload(self, name: str) -> object:
        """`CALL mg.load(name)` (`ModuleRegistry::LoadOrReloadModuleFromName`): unload the module, then load
        the file of that name from the module directories again."""
        if name not in self.modules:
            raise QueryError(f"Unable to unload module '{name}', either it doesn't exist, or it is currently "
                             "being used. In order to check whether the module exists, please use CALL "
                             "mg.procedures() YIELD * for custom query procedures, or CALL mg.functions() "
                             "YIELD * for custom query functions.")
        self.unload_module(name)
        for directory in self.module_dirs:
            path = directory / f"{name}.py"
            if path.is_file():
                return self.load_module(path)
        raise QueryError(f"module '{name}' was unloaded and no file {name}.py is left to load")

    def load_all(self) -> None:
        """`CALL mg.load_all()` (`UnloadAndLoadModulesFromDirectories`): unload every module (purging as
        `unload_module` does), then load every *.py of the module directories."""
        for name in list(self.modules):
            self.unload_module(name)
        for directory in self.module_dirs:
            for path in sorted(directory.glob("*.py")):
                if not path.name.startswith("_"):
                    self.load_module(path)

    def python_module(self, name: str) -> ModuleType:
        return self._py_modules[name]

    # -- catalogue -----------------------------------------------------------------
    def procedure(self, qualified_name: str):
        return self._find("procedures", "procedure", qualified_name)

    def transformation(self, qualified_name: str):
        return self._find("transformations", "transformation", qualified_name)

    def _find(self, table: str, what: str, qualified_name: str):
        module_name, _, name = qualified_name.rpartition(".")
        module = self.modules.get(module_name)
        found = getattr(module, table).get(name) if module else None
        if found is None:
            raise QueryError(f"There is no {what} named '{qualified_name}'.")
        return found

    def procedures(self) -> list[dict]:
        """`CALL mg.procedures() YIELD *` for the loaded Python modules."""
        rows = []
        for module in self.modules.values():
            for proc in module.procedures.values():
                rows.append({"name": proc.qualified_name, "signature": proc.signature(),
                             "is_write": proc.is_write, "path": module.path, "is_editable": True})
        return sorted(rows, key=lambda row: row["name"])

    def vertex(self, vertex_id: int):
        """A node of the graph as a query would pass it to a procedure (e.g. `MATCH (n) CALL m.p(n)`)."""
        if vertex_id not in self.store.vertices:
            raise QueryError(f"no vertex with id {vertex_id}")
        return self._mgp_c.Vertex(self._mgp_c.Graph(self.store), vertex_id)

    # -- calls -----------------------------------------------------------------------
    def call(self, qualified_name: str, *args) -> list[dict]:
        """`CALL name(args...) YIELD *`: the records as dicts of client-side values."""
        proc = self.procedure(qualified_name)
        values = [self._client_value(arg) for arg in args]
        self._validate_arguments(proc, values)
        values += [arg.default for arg in proc.optional[len(values) - len(proc.required):]]
        backend = self._mgp_c
        snapshot = self.store.snapshot() if proc.is_write else None
        graph = backend.Graph(self.store, mutable=proc.is_write)
        try:
            rows = self._run(proc, lambda: proc.callback(graph, tuple(backend.to_python(v) for v in values)))
        except QueryError:
            if snapshot is not None:   # the transaction is aborted
                self.store.restore(snapshot)
            raise
        finally:
            gc.collect()
            graph.invalidate()
        for row in rows:
            if set(row) != set(proc.results):
                raise QueryError(f"Procedure '{qualified_name}' did not yield all fields as required by its "
                                 "signature.")
        return [{key: self._client_result(value) for key, value in row.items()} for row in rows]

    def refusal(self, qualified_name: str, *args) -> QueryError:
        """The QueryError `CALL name(args...)` fails with (an AssertionError when it succeeds)."""
        try:
            rows = self.call(qualified_name, *args)
        except QueryError as error:
            return error
        raise AssertionError(f"CALL {qualified_name}{args!r} succeeded: {rows!r}")

    def transform(self, qualified_name: str, messages: Sequence[dict]) -> list[dict]:
        """Run a transformation on a batch, as a stream does; each message is a dict of
        payload (bytes), topic_name, key, timestamp, offset."""
        trans = self.transformation(qualified_name)
        backend = self._mgp_c
        graph = backend.Graph(self.store, mutable=False)
        batch = backend.Messages([dict(m) for m in messages])
        try:
            rows = self._run(trans, lambda: trans.callback(graph, batch))
        finally:
            gc.collect()
            graph.invalidate()
            batch.invalidate()
        return [{key: self._client_result(value) for key, value in row.items()} for row in rows]

    # -- internals ---------------------------------------------------------------------
    def _client_value(self, value: object) -> object:
        try:
            return self._mgp_c.to_cypher(value)
        except (ValueError, OverflowError) as exc:
            raise QueryError(f"Cannot send {value!r} as a Cypher value: {exc}") from None

    @staticmethod
    def _validate_arguments(proc, values: list) -> None:
        name = proc.qualified_name
        n_req, n_opt = len(proc.required), len(proc.optional)
        if len(values) < n_req or len(values) - n_req > n_opt:
            if not proc.args:
                raise QueryError(f"'{name}' requires no arguments.")
            if not n_opt:
                raise QueryError(f"'{name}' requires exactly {n_req} {'argument' if n_req == 1 else 'arguments'}.")
            raise QueryError(f"'{name}' requires between {n_req} and {n_req + n_opt} arguments.")
        for position, (arg, value) in enumerate(zip(proc.args, values, strict=False)):
            if not arg.type.satisfies(value):
                raise QueryError(f"'{name}' argument named '{arg.name}' at position {position} must be of type "
                                 f"{arg.type.presentable_name}.")

    def _run(self, callable_, invoke) -> list[dict]:
        """CallPythonProcedure: call, then AddRecordFromPython for each record; any Python
        error becomes the procedure's error message (the traceback minus mgp's wrapper)."""
        try:
            result = invoke()
            if isinstance(result, Sequence):   # PySequence_Check: list, tuple (and str...)
                return [self._record(callable_, record) for record in result]
            return [self._record(callable_, result)]
        except (Exception, SystemExit) as exc:
            lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
            if len(lines) > 2 and lines[0].startswith("Traceback"):
                lines = [lines[0]] + lines[2:]   # skip the frame of mgp's wrapper
            raise QueryError(f"{callable_.qualified_name}: {''.join(lines)}") from None

    def _record(self, callable_, record) -> dict:
        backend = self._mgp_c
        # AddRecordFromPython imports `mgp` at each call: after a purge that is the re-imported one.
        if not isinstance(record, self.mgp.Record):
            raise TypeError(f"Value '{record}' is not an instance of 'mgp.Record'")
        if not isinstance(record.fields, dict):
            raise TypeError("Expected 'mgp.Record.fields' to be a 'dict'")
        row = {}
        for key, value in record.fields.items():
            if not isinstance(key, str):
                raise TypeError(f"Field name '{key}' is not an instance of 'str'")
            converted = backend.to_cypher(value)
            declared = callable_.results.get(key)
            if declared is None or not declared[0].satisfies(converted):
                raise ValueError(f"Unable to insert field '{key}' with value: '{value}'; did you set the correct "
                                 "field type?")
            row[key] = converted
        return row

    def _client_result(self, value: object) -> object:
        backend = self._mgp_c
        if isinstance(value, list):
            return [self._client_result(v) for v in value]
        if isinstance(value, dict):
            return {k: self._client_result(v) for k, v in value.items()}
        if isinstance(value, backend.Vertex):
            data = self.store.vertices[value.id]
            return Node(value.id, tuple(data.labels), self._client_result(data.properties))
        if isinstance(value, backend.Edge):
            data = self.store.edges[value.id]
            return Relationship(value.id, data.type, data.from_id, data.to_id,
                                self._client_result(data.properties))
        if isinstance(value, backend.Path):
            return [self._client_result(v) for v in value._vertices]
        return value


def load_backend() -> ModuleType:
    """This directory's `_mgp.py`, imported as `_mgp` (left in sys.modules)."""
    spec = importlib.util.spec_from_file_location("_mgp", BACKEND_DIR / "_mgp.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["_mgp"] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def mgp_environment(module_dirs: Sequence[str | os.PathLike] = ()) -> Iterator[Memgraph]:
    """Within the block `_mgp` is this backend and `mgp` a fresh import of the real mgp.py. On exit every
    module a purge took from sys.modules (or replaced by a re-import) is put back for the rest of the run."""
    before = dict(sys.modules)
    saved = {name: sys.modules.get(name) for name in ("_mgp", "mgp")}
    sys.path.insert(0, str(BACKEND_DIR))
    server = None
    try:
        backend = load_backend()
        sys.modules.pop("mgp", None)
        mgp = importlib.import_module("mgp")
        if getattr(mgp, "_mgp", None) is not backend:
            raise RuntimeError(f"mgp imported a different _mgp: {getattr(mgp, '_mgp', None)!r}")
        server = Memgraph(backend, mgp, module_dirs)
        yield server
    finally:
        if server is not None:
            for name in list(server.modules):
                server.unload_module(name)
        with contextlib.suppress(ValueError):
            sys.path.remove(str(BACKEND_DIR))
        for name, module in before.items():
            if sys.modules.get(name) is not module:
                sys.modules[name] = module
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


@contextlib.contextmanager
def query_modules(url: str | None = None) -> Iterator[Memgraph]:
    """The product's query_modules/ loaded on this backend, as Memgraph runs them for one host: for the block,
    MGSTREAMS_URL is `url` (when given) and no token or default sink is in the environment."""
    import pytest

    with mgp_environment([QUERY_MODULES]) as server, pytest.MonkeyPatch.context() as patch:
        if url is not None:
            patch.setenv("MGSTREAMS_URL", url)
        patch.delenv("MGSTREAMS_TOKEN", raising=False)
        patch.delenv("MGSTREAMS_DEFAULT_SINK", raising=False)
        server.load_all()
        yield server
