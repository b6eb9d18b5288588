"""A `_mgp` for tests: what Memgraph's C++ `py_module.cpp` gives the real `mgp.py`.

The PyPI package `mgp` ships Memgraph's real `mgp.py` over an empty `_mgp`
stub. This module stands in for the embedded `_mgp` of a Memgraph server:
Cypher types that check values (`SatisfiesType`), a module object that
registers procedures/transformations/functions, a small in-memory graph behind
`_mgp.Graph`/`Vertex`/`Edge`/`Path`, stream messages, and the value conversions
between Python and Cypher (`PyObjectToMgpValue` / `MgpValueToPyObject`).

The server side (loading modules, validating arguments, calling procedures and
checking records) lives in `harness.py`; it drives this module the way the
query engine drives the real one. Error messages follow Memgraph's wording.
"""
from __future__ import annotations

import copy
import datetime
import re
import sys
from dataclasses import dataclass, field

# -- errors (names and bases as registered by PyInitMgpModule) ----------------


class UnknownError(RuntimeError):
    pass


class UnableToAllocateError(MemoryError):
    pass


class InsufficientBufferError(BufferError):
    pass


class OutOfRangeError(BufferError):
    pass


class LogicErrorError(RuntimeError):
    pass


class DeletedObjectError(RuntimeError):
    pass


class InvalidArgumentError(ValueError):
    pass


class KeyAlreadyExistsError(RuntimeError):
    pass


class ImmutableObjectError(RuntimeError):
    pass


class ValueConversionError(RuntimeError):
    pass


class SerializationError(RuntimeError):
    pass


class AuthorizationError(RuntimeError):
    pass


SOURCE_TYPE_KAFKA = 0
SOURCE_TYPE_PULSAR = 1

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_IDENTIFIER = re.compile(r"^[_A-Za-z][_A-Za-z0-9]*$")


def is_valid_identifier(name: object) -> bool:
    return isinstance(name, str) and bool(_IDENTIFIER.match(name))


# -- Cypher types (query/procedure/cypher_types.hpp) --------------------------


class Type:
    """A Cypher type: a presentable name and `satisfies(value)` on Cypher values."""

    __slots__ = ("kind", "element")

    def __init__(self, kind: str, element: Type | None = None):
        self.kind, self.element = kind, element

    @property
    def presentable_name(self) -> str:
        if self.kind == "LIST":
            return f"LIST OF {self.element.presentable_name}"
        if self.kind == "NULLABLE":
            if self.element.kind == "LIST":
                return f"LIST? OF {self.element.element.presentable_name}"
            return f"{self.element.presentable_name}?"
        return self.kind

    @property
    def nullable(self) -> bool:
        return self.kind == "NULLABLE"

    def satisfies(self, value: object) -> bool:
        """`value` is a Cypher value as produced by `to_cypher`."""
        kind = self.kind
        if kind == "NULLABLE":
            return value is None or self.element.satisfies(value)
        if value is None:
            return False
        if kind == "ANY":
            return True
        if kind == "LIST":
            return isinstance(value, list) and all(self.element.satisfies(v) for v in value)
        return cypher_kind(value) in _ACCEPTS[kind]

    def __repr__(self) -> str:
        return f"<_mgp.Type {self.presentable_name}>"

    def __eq__(self, other) -> bool:
        return isinstance(other, Type) and (self.kind, self.element) == (other.kind, other.element)

    def __hash__(self) -> int:
        return hash((self.kind, self.element))


_ACCEPTS = {
    "BOOLEAN": {"BOOLEAN"},
    "STRING": {"STRING"},
    "INTEGER": {"INTEGER"},
    "FLOAT": {"FLOAT"},
    "NUMBER": {"INTEGER", "FLOAT"},
    # MapType also covers nodes and relationships: they have property maps.
    "MAP": {"MAP", "NODE", "RELATIONSHIP"},
    "NODE": {"NODE"},
    "RELATIONSHIP": {"RELATIONSHIP"},
    "PATH": {"PATH"},
    "DATE": {"DATE"},
    "LOCAL_TIME": {"LOCAL_TIME"},
    "LOCAL_DATE_TIME": {"LOCAL_DATE_TIME"},
    "DURATION": {"DURATION"},
}

CypherType = Type


def type_nullable(elem: Type) -> Type:
    return elem if elem.nullable else Type("NULLABLE", elem)


def type_list(elem: Type) -> Type:
    return Type("LIST", elem)


def type_bool() -> Type:
    return Type("BOOLEAN")


def type_string() -> Type:
    return Type("STRING")


def type_int() -> Type:
    return Type("INTEGER")


def type_float() -> Type:
    return Type("FLOAT")


def type_number() -> Type:
    return Type("NUMBER")


def type_map() -> Type:
    return Type("MAP")


def type_node() -> Type:
    return Type("NODE")


def type_relationship() -> Type:
    return Type("RELATIONSHIP")


def type_path() -> Type:
    return Type("PATH")


def type_date() -> Type:
    return Type("DATE")


def type_local_time() -> Type:
    return Type("LOCAL_TIME")


def type_local_date_time() -> Type:
    return Type("LOCAL_DATE_TIME")


def type_duration() -> Type:
    return Type("DURATION")


def type_any() -> Type:
    return Type("ANY")


# -- Cypher values ------------------------------------------------------------
# Cypher values are plain Python values: None, bool, int (64-bit), float, str,
# list, dict with str keys, datetime.date/time/datetime/timedelta (exact
# types), and this module's Vertex / Edge / Path handles.


def cypher_kind(value: object) -> str:
    """The Cypher type name of a Cypher value (as `TypedValue::type()` would say)."""
    if value is None:
        return "NULL"
    for cls, kind in _KINDS:   # bool before int: True is an int to Python, not to Cypher
        if isinstance(value, cls):
            return kind
    kind = _TEMPORAL_KINDS.get(type(value))   # exact types, as the C API checks them
    if kind is None:
        raise ValueError(f"not a Cypher value: {type(value).__name__}")
    return kind


def to_cypher(obj: object) -> object:
    """PyObjectToMgpValue: a Python object as a Cypher value, or the error Memgraph raises."""
    if obj is None or isinstance(obj, (bool, float)):
        return obj
    if isinstance(obj, int):
        if not INT64_MIN <= obj <= INT64_MAX:
            raise OverflowError("Python integer is out of range")
        return int(obj)
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, (list, tuple)):
        return [to_cypher(item) for item in obj]
    if isinstance(obj, dict):
        result = {}
        for key, value in obj.items():
            if not isinstance(key, str):
                raise ValueError("Dictionary keys must be strings")
            result[str(key)] = to_cypher(value)
        return result
    if isinstance(obj, (Vertex, Edge, Path)):
        return obj
    user_api = sys.modules.get("mgp")
    if user_api is not None:
        for cls_name, attr in (("Edge", "_edge"), ("Vertex", "_vertex"), ("Path", "_path")):
            if isinstance(obj, getattr(user_api, cls_name)):
                return to_cypher(getattr(obj, attr))
    if type(obj) in (datetime.date, datetime.time, datetime.datetime):
        # The C API keeps the local fields only: a tzinfo is dropped.
        return obj.replace(tzinfo=None) if type(obj) is not datetime.date else obj
    if type(obj) is datetime.timedelta:
        return obj
    raise ValueError("Unsupported PyObject conversion")


def to_python(value: object) -> object:
    """MgpValueToPyObject: lists become tuples, graph elements the user-facing mgp wrappers."""
    if isinstance(value, list):
        return tuple(to_python(item) for item in value)
    if isinstance(value, dict):
        return {key: to_python(item) for key, item in value.items()}
    if isinstance(value, (Vertex, Edge, Path)):
        user_api = sys.modules["mgp"]
        return getattr(user_api, type(value).__name__)(value)
    return value


def format_value(value: object) -> str:
    """PrintValue: how a default value appears in a procedure signature."""
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {format_value(v)}" for k, v in value.items()) + "}"
    return str(value)


# -- the graph ------------------------------------------------------------------


@dataclass
class VertexData:
    labels: list[str] = field(default_factory=list)
    properties: dict[str, object] = field(default_factory=dict)


@dataclass
class EdgeData:
    type: str
    from_id: int
    to_id: int
    properties: dict[str, object] = field(default_factory=dict)


class Store:
    """The database's graph: vertices and edges with labels, types and properties."""

    def __init__(self):
        self.vertices: dict[int, VertexData] = {}
        self.edges: dict[int, EdgeData] = {}
        self._next_vertex_id = 0
        self._next_edge_id = 0

    def add_vertex(self, labels=(), properties=None) -> int:
        vid = self._next_vertex_id
        self._next_vertex_id += 1
        self.vertices[vid] = VertexData(list(labels), {k: to_cypher(v) for k, v in (properties or {}).items()})
        return vid

    def add_edge(self, from_id: int, to_id: int, edge_type: str, properties=None) -> int:
        if from_id not in self.vertices or to_id not in self.vertices:
            raise DeletedObjectError("Accessing deleted object.")
        eid = self._next_edge_id
        self._next_edge_id += 1
        self.edges[eid] = EdgeData(edge_type, from_id, to_id, {k: to_cypher(v) for k, v in (properties or {}).items()})
        return eid

    def snapshot(self) -> Store:
        return copy.deepcopy(self)

    def restore(self, snapshot: Store) -> None:
        self.__dict__.update(copy.deepcopy(snapshot).__dict__)


class _Iterator:
    """The get()/next() iterators of the C API over a precomputed list."""

    def __init__(self, items: list):
        self._items, self._index = items, 0

    def get(self):
        return self._items[self._index] if self._index < len(self._items) else None

    def next(self):
        self._index += 1
        return self.get()


class VerticesIterator(_Iterator):
    pass


class EdgesIterator(_Iterator):
    pass


class PropertiesIterator(_Iterator):
    pass


class Graph:
    """Wraps one procedure call's view of the store; invalidated when the call ends."""

    def __init__(self, store: Store, mutable: bool = False, must_abort: bool = False):
        self._store: Store | None = store
        self._mutable = mutable
        self._must_abort = must_abort

    def __reduce__(self):
        raise TypeError("cannot pickle nor copy '_mgp.Graph' object")

    def invalidate(self) -> None:
        self._store = None

    def is_valid(self) -> bool:
        return self._store is not None

    def is_mutable(self) -> bool:
        return self._mutable

    def must_abort(self) -> bool:
        return self._must_abort

    @property
    def store(self) -> Store:
        if self._store is None:
            raise AssertionError("graph used outside of its procedure call")
        return self._store

    def _check_mutable(self) -> None:
        if not self._mutable:
            raise ImmutableObjectError("Cannot modify immutable object.")

    def get_vertex_by_id(self, vertex_id: int) -> Vertex:
        if vertex_id not in self.store.vertices:
            raise IndexError("Unable to find the vertex with given ID.")
        return Vertex(self, vertex_id)

    def iter_vertices(self) -> VerticesIterator:
        return VerticesIterator([Vertex(self, vid) for vid in self.store.vertices])

    def create_vertex(self) -> Vertex:
        self._check_mutable()
        return Vertex(self, self.store.add_vertex())

    def create_edge(self, from_vertex: Vertex, to_vertex: Vertex, edge_type: str) -> Edge:
        self._check_mutable()
        if not isinstance(from_vertex, Vertex) or not isinstance(to_vertex, Vertex) or not isinstance(edge_type, str):
            raise TypeError("create_edge expects (_mgp.Vertex, _mgp.Vertex, str)")
        return Edge(self, self.store.add_edge(from_vertex.id, to_vertex.id, edge_type))

    def delete_vertex(self, vertex: Vertex) -> None:
        self._check_mutable()
        vid = vertex._live_id()
        if any(e.from_id == vid or e.to_id == vid for e in self.store.edges.values()):
            raise LogicErrorError("Logic error.")
        del self.store.vertices[vid]

    def detach_delete_vertex(self, vertex: Vertex) -> None:
        self._check_mutable()
        vid = vertex._live_id()
        for eid in [eid for eid, e in self.store.edges.items() if vid in (e.from_id, e.to_id)]:
            del self.store.edges[eid]
        del self.store.vertices[vid]

    def delete_edge(self, edge: Edge) -> None:
        self._check_mutable()
        del self.store.edges[edge._live_id()]


class _Element:
    """Common part of Vertex and Edge: validity, identity and properties."""

    _kind = "element"

    def __init__(self, graph: Graph, element_id: int):
        self._graph, self.id = graph, element_id

    def __reduce__(self):
        raise TypeError(f"cannot pickle nor copy '_mgp.{type(self).__name__}' object")

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other.id == self.id

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.id))

    def __repr__(self) -> str:
        return f"<_mgp.{type(self).__name__} id={self.id}>"

    def _table(self) -> dict:
        raise NotImplementedError

    def _live_id(self) -> int:
        if self.id not in self._table():
            raise DeletedObjectError("Accessing deleted object.")
        return self.id

    def _data(self):
        return self._table()[self._live_id()]

    def is_valid(self) -> bool:
        return self._graph.is_valid()

    def underlying_graph_is_mutable(self) -> bool:
        return self._graph.is_mutable()

    def get_id(self) -> int:
        return self.id

    def iter_properties(self) -> PropertiesIterator:
        return PropertiesIterator([(k, to_python(v)) for k, v in self._data().properties.items()])

    def get_property(self, property_name: str):
        value = self._data().properties.get(property_name)
        return None if value is None else to_python(value)

    def set_property(self, property_name: str, value: object) -> None:
        self._graph._check_mutable()
        try:
            converted = to_cypher(value)
        except (ValueError, OverflowError) as exc:
            raise ValueConversionError("Value conversion failed.") from exc
        if isinstance(converted, (Vertex, Edge, Path)):
            raise ValueConversionError("Value conversion failed.")
        properties = self._data().properties
        if converted is None:
            properties.pop(property_name, None)
        else:
            properties[property_name] = converted


class Vertex(_Element):
    def _table(self) -> dict:
        return self._graph.store.vertices

    def label_at(self, index: int) -> str:
        labels = self._data().labels
        if not 0 <= index < len(labels):
            raise OutOfRangeError("Out of range.")
        return labels[index]

    def labels_count(self) -> int:
        return len(self._data().labels)

    def add_label(self, label: str) -> None:
        self._graph._check_mutable()
        labels = self._data().labels
        if label not in labels:
            labels.append(label)

    def remove_label(self, label: str) -> None:
        self._graph._check_mutable()
        labels = self._data().labels
        if label in labels:
            labels.remove(label)

    def iter_in_edges(self) -> EdgesIterator:
        vid = self._live_id()
        return EdgesIterator([Edge(self._graph, eid) for eid, e in self._graph.store.edges.items() if e.to_id == vid])

    def iter_out_edges(self) -> EdgesIterator:
        vid = self._live_id()
        return EdgesIterator([Edge(self._graph, eid) for eid, e in self._graph.store.edges.items()
                              if e.from_id == vid])


class Edge(_Element):
    def _table(self) -> dict:
        return self._graph.store.edges

    def get_type_name(self) -> str:
        return self._data().type

    def from_vertex(self) -> Vertex:
        return Vertex(self._graph, self._data().from_id)

    def to_vertex(self) -> Vertex:
        return Vertex(self._graph, self._data().to_id)


class Path:
    def __init__(self, start: Vertex):
        self._vertices, self._edges = [start], []

    def __reduce__(self):
        raise TypeError("cannot pickle nor copy '_mgp.Path' object")

    @staticmethod
    def make_with_start(vertex: Vertex) -> Path:
        if not isinstance(vertex, Vertex):
            raise TypeError("Expected '_mgp.Vertex'")
        return Path(vertex)

    def is_valid(self) -> bool:
        return self._vertices[0].is_valid()

    def expand(self, edge: Edge) -> None:
        last = self._vertices[-1]
        start, end = edge.from_vertex(), edge.to_vertex()
        if last == start:
            self._vertices.append(end)
        elif last == end:
            self._vertices.append(start)
        else:
            raise LogicErrorError("Logic error.")
        self._edges.append(edge)

    def size(self) -> int:
        return len(self._edges)

    def vertex_at(self, index: int) -> Vertex:
        if not 0 <= index < len(self._vertices):
            raise OutOfRangeError("Out of range.")
        return self._vertices[index]

    def edge_at(self, index: int) -> Edge:
        if not 0 <= index < len(self._edges):
            raise OutOfRangeError("Out of range.")
        return self._edges[index]


_KINDS = ((bool, "BOOLEAN"), (int, "INTEGER"), (float, "FLOAT"), (str, "STRING"), (list, "LIST"), (dict, "MAP"),
          (Vertex, "NODE"), (Edge, "RELATIONSHIP"), (Path, "PATH"))
_TEMPORAL_KINDS = {datetime.date: "DATE", datetime.time: "LOCAL_TIME", datetime.datetime: "LOCAL_DATE_TIME",
                   datetime.timedelta: "DURATION"}


# -- stream messages ------------------------------------------------------------


class Message:
    def __init__(self, messages: Messages, payload: bytes, topic_name: str = "", key: bytes = b"",
                 timestamp: int = 0, offset: int = 0, source_type: int = SOURCE_TYPE_KAFKA):
        self._messages = messages
        self._payload, self._topic, self._key = bytes(payload), topic_name, bytes(key or b"")
        self._timestamp, self._offset, self._source_type = timestamp, offset, source_type

    def __reduce__(self):
        raise TypeError("cannot pickle nor copy '_mgp.Message' object")

    def is_valid(self) -> bool:
        return self._messages.is_valid()

    def _kafka_only(self) -> None:
        if self._source_type != SOURCE_TYPE_KAFKA:
            raise InvalidArgumentError("Invalid argument.")

    def source_type(self) -> int:
        return self._source_type

    def payload(self) -> bytearray:
        return bytearray(self._payload)

    def topic_name(self) -> str:
        return self._topic

    def key(self) -> bytearray:
        self._kafka_only()
        return bytearray(self._key)

    def timestamp(self) -> int:
        self._kafka_only()
        return self._timestamp

    def offset(self) -> int:
        self._kafka_only()
        return self._offset


class Messages:
    """A batch of stream messages; each item is a dict of Message's constructor arguments."""

    def __init__(self, items: list[dict]):
        self._valid = True
        self._messages = [Message(self, **item) for item in items]

    def __reduce__(self):
        raise TypeError("cannot pickle nor copy '_mgp.Messages' object")

    def invalidate(self) -> None:
        self._valid = False

    def is_valid(self) -> bool:
        return self._valid

    def total_messages(self) -> int:
        return len(self._messages)

    def message_at(self, index: int) -> Message:
        if not 0 <= index < len(self._messages):
            raise IndexError("Unable to find the message with given index.")
        return self._messages[index]


# -- module registration (mgp_module / mgp_proc / mgp_trans / mgp_func) ------------


@dataclass
class Argument:
    name: str
    type: Type
    default: object = None
    optional: bool = False


class _Callable:
    """What mgp_proc and mgp_func share: a name, a callback and typed arguments."""

    kind = "procedure"

    def __init__(self, module: Module, name: str, callback):
        self.module, self.name, self.callback = module, name, callback
        self.args: list[Argument] = []

    def __reduce__(self):
        raise TypeError(f"cannot pickle nor copy '_mgp.{type(self).__name__}' object")

    @property
    def qualified_name(self) -> str:
        return f"{self.module.name}.{self.name}"

    def _add(self, name: str, type_: Type, default: object, optional: bool) -> None:
        if not isinstance(name, str) or not isinstance(type_, Type):
            raise TypeError("add_arg expects (str, _mgp.Type)")
        if not is_valid_identifier(name) or any(a.name == name for a in self.args):
            raise InvalidArgumentError(f"Invalid argument: {self.kind} argument name {name!r} is not a valid, "
                                       "unique identifier")
        if not optional and any(a.optional for a in self.args):
            raise LogicErrorError(f"Logic error: required argument {name!r} of {self.qualified_name!r} "
                                  "after an optional one")
        self.args.append(Argument(name, type_, default, optional))

    def add_arg(self, name: str, type_: Type) -> None:
        self._add(name, type_, None, False)

    def add_opt_arg(self, name: str, type_: Type, default: object) -> None:
        value = to_cypher(default)
        if isinstance(value, (Vertex, Edge, Path)):
            raise ValueConversionError(f"Value conversion failed: default of {name!r} is a graph element")
        if not type_.satisfies(value):
            raise LogicErrorError(f"Logic error: default value {format_value(value)} of argument {name!r} of "
                                  f"{self.qualified_name!r} does not satisfy type {type_.presentable_name}")
        self._add(name, type_, value, True)

    @property
    def required(self) -> list[Argument]:
        return [a for a in self.args if not a.optional]

    @property
    def optional(self) -> list[Argument]:
        return [a for a in self.args if a.optional]


class Proc(_Callable):
    def __init__(self, module: Module, name: str, callback, is_write: bool):
        super().__init__(module, name, callback)
        self.is_write = is_write
        self.results: dict[str, tuple[Type, bool]] = {}   # name -> (type, deprecated), declared order

    def _add_result(self, name: str, type_: Type, deprecated: bool) -> None:
        if not isinstance(name, str) or not isinstance(type_, Type):
            raise TypeError("add_result expects (str, _mgp.Type)")
        if not is_valid_identifier(name) or name in self.results:
            raise InvalidArgumentError(f"Invalid argument: result name {name!r} is not a valid, unique identifier")
        self.results[name] = (type_, deprecated)

    def add_result(self, name: str, type_: Type) -> None:
        self._add_result(name, type_, False)

    def add_deprecated_result(self, name: str, type_: Type) -> None:
        self._add_result(name, type_, True)

    def signature(self) -> str:
        """PrintProcSignature; results print in name order (they live in a std::map)."""
        args = [f"{a.name} :: {a.type.presentable_name}" for a in self.required]
        args += [f"{a.name} = {format_value(a.default)} :: {a.type.presentable_name}" for a in self.optional]
        results = [("DEPRECATED " if dep else "") + f"{name} :: {t.presentable_name}"
                   for name, (t, dep) in sorted(self.results.items())]
        return f"{self.qualified_name}({', '.join(args)}) :: ({', '.join(results)})"


class Func(_Callable):
    kind = "function"


class Trans:
    """A transformation: its result fields are fixed to (query :: STRING, parameters :: MAP?)."""

    def __init__(self, module: Module, name: str, callback):
        self.module, self.name, self.callback = module, name, callback
        self.results = {"query": (type_string(), False), "parameters": (type_nullable(type_map()), False)}

    @property
    def qualified_name(self) -> str:
        return f"{self.module.name}.{self.name}"


class Module:
    """mgp_module: what one query module file registered."""

    def __init__(self, name: str, path: str | None = None):
        self.name, self.path = name, path
        self.procedures: dict[str, Proc] = {}
        self.transformations: dict[str, Trans] = {}
        self.functions: dict[str, Func] = {}

    def __reduce__(self):
        raise TypeError("cannot pickle nor copy '_mgp.Module' object")

    @staticmethod
    def _name_of(cb, what: str) -> str:
        if not callable(cb):
            raise TypeError("Expected a callable object.")
        name = getattr(cb, "__name__", None)
        if not is_valid_identifier(name):
            raise ValueError(f"{what} name is not a valid identifier")
        return name

    def _add_procedure(self, cb, is_write: bool) -> Proc:
        name = self._name_of(cb, "Procedure")
        if name in self.procedures:
            raise ValueError("Already registered a procedure with the same name.")
        proc = self.procedures[name] = Proc(self, name, cb, is_write)
        return proc

    def add_read_procedure(self, cb) -> Proc:
        return self._add_procedure(cb, False)

    def add_write_procedure(self, cb) -> Proc:
        return self._add_procedure(cb, True)

    def add_transformation(self, cb) -> None:
        name = self._name_of(cb, "Transformation")
        if name in self.transformations:
            raise ValueError("Already registered a procedure with the same name.")
        self.transformations[name] = Trans(self, name, cb)

    def add_function(self, cb) -> Func:
        name = self._name_of(cb, "Function")
        if name in self.functions:
            raise ValueError("Already registered a function with the same name.")
        func = self.functions[name] = Func(self, name, cb)
        return func


class Logger:
    """Collects what query modules log, as (level, message) pairs."""

    def __init__(self):
        self.records: list[tuple[str, str]] = []

    def _log(self, level: str, out: str) -> None:
        if not isinstance(out, str):
            raise TypeError("Logger methods expect a str")
        self.records.append((level, out))

    def info(self, out: str) -> None:
        self._log("info", out)

    def warning(self, out: str) -> None:
        self._log("warning", out)

    def error(self, out: str) -> None:
        self._log("error", out)

    def critical(self, out: str) -> None:
        self._log("critical", out)

    def trace(self, out: str) -> None:
        self._log("trace", out)

    def debug(self, out: str) -> None:
        self._log("debug", out)


# Set by the server while it imports a module (WithMgpModule), None otherwise.
_MODULE: Module | None = None
_LOGGER = Logger()
