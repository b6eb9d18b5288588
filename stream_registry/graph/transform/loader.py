"""The secure transformation loader: `module.function` names resolved only where an operator allows, and the
stand-in that lets `@mgp.transformation` register outside Memgraph while a transformation file is imported.

`mgp` is never imported here: transformation files import it themselves.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ...errors import TransformError, TransformNotFound
from .messages import Messages

QUERY_MODULES_ENV = "MGSTREAMS_QUERY_MODULES_DIR"
TRANSFORM_PACKAGES_ENV = "MGSTREAMS_TRANSFORM_PACKAGES"
BUILTIN_PACKAGES = ("stream_registry.builtin_transformations",)
_DOTTED_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+\Z", re.ASCII)


def load_transformation(path: str, search_dirs: Sequence[str] = (),
                        options: Mapping[str, Any] | None = None) -> Callable[[Messages], Any]:
    """Resolve `module.function` to a callable taking one `Messages`.

    The name may be given by anyone who can create a stream, so only three
    places are searched, and nothing else is imported (an import runs code):
    - the built-ins, `stream_registry.builtin_transformations`;
    - the packages an operator lists in $MGSTREAMS_TRANSFORM_PACKAGES
      (comma-separated; a listed package allows its submodules), imported normally;
    - the query modules directories: `<module>.py` in `search_dirs`, then in
      $MGSTREAMS_QUERY_MODULES_DIR (colon- or comma-separated), loaded by file
      the way Memgraph finds its query modules.
    The function must be defined in the module named (`os.system`,
    `subprocess.run`, `builtins.eval` or a name a module merely imports are
    refused). Ship the path, not the function, to other processes (Spark executors).

    `options` (the stream's `transform.options`) are passed as `fn(messages, options=...)` to a function that
    has an `options` parameter; a function without one refuses them. A function that carries a
    `check_options(options)` attribute has its options checked here, at load (so at create and alter, not at the
    first batch): a ValueError it raises, naming the option, refuses the stream.
    """
    module_name, function_name = _split(path)
    dirs = _search_dirs(search_dirs)
    with _mgp_registration():
        module = _import_module(path, module_name, dirs)
    fn = getattr(module, function_name, None)
    if fn is None:
        raise TransformError(f"transform {path!r}: module {module_name!r} "
                             f"({getattr(module, '__file__', None) or 'built-in'}) has no function {function_name!r}")
    if not callable(fn):
        raise TransformError(f"transform {path!r}: {function_name!r} is a {type(fn).__name__}, not a function")
    fn = _unwrap_mgp(fn)
    defined_in = getattr(fn, "__module__", None)
    if defined_in != module.__name__:
        raise TransformError(f"transform {path!r}: refused: {function_name!r} is not defined in {module_name!r} "
                             f"(it comes from {defined_in!r}); name the module that defines the transformation")
    _check_options(path, fn, options)
    return _with_options(path, _as_messages_callable(path, fn), options)


def _check_options(path: str, fn: Callable, options: Mapping[str, Any] | None) -> None:
    check = getattr(fn, "check_options", None)
    if check is None:
        return
    try:
        check(options)
    except ValueError as exc:
        raise TransformError(f"transform {path!r}: {exc}") from None


def _with_options(path: str, fn: Callable, options: Mapping[str, Any] | None) -> Callable:
    if not options:
        return fn
    try:
        takes = "options" in inspect.signature(getattr(fn, "__wrapped__", fn)).parameters
    except (TypeError, ValueError):
        takes = False
    if not takes:
        raise TransformError(f"transform {path!r}: takes no options, but transform.options are given "
                             f"({', '.join(sorted(map(str, options)))})")
    bound = dict(options)

    def with_options(messages: Messages, _fn: Callable = fn) -> Any:
        return _fn(messages, options=bound)
    with_options.__name__ = getattr(fn, "__name__", "transformation")
    with_options.__qualname__ = getattr(fn, "__qualname__", with_options.__name__)
    with_options.__module__ = getattr(fn, "__module__", None) or ""
    setattr(with_options, "__wrapped__", fn)   # noqa: B010 (what _name reads)
    return with_options


def transform_packages() -> tuple[str, ...]:
    """The built-in package and those listed in $MGSTREAMS_TRANSFORM_PACKAGES."""
    listed = [p.strip() for p in os.environ.get(TRANSFORM_PACKAGES_ENV, "").split(",")]
    return (*BUILTIN_PACKAGES, *(p for p in listed if p))


def is_builtin(path: str) -> bool:
    """A transformation of stream_registry.builtin_transformations: the project's own code, not a user's."""
    return isinstance(path, str) and "." in path and _in_packages(path.rsplit(".", 1)[0], BUILTIN_PACKAGES)


def _in_packages(module_name: str, packages: Sequence[str]) -> bool:
    return any(module_name == p or module_name.startswith(p + ".") for p in packages)


def _search_dirs(explicit: Sequence[str]) -> list[str]:
    if isinstance(explicit, str):
        explicit = [explicit]
    from_env = re.split(r"[:,]", os.environ.get(QUERY_MODULES_ENV, ""))
    return [d.strip() for d in [*explicit, *from_env] if d and d.strip()]


# Query modules this loader loaded by file, by module name: reused while still registered.
_FROM_QUERY_MODULES: dict[str, Any] = {}


def locate_transformation(path: str, search_dirs: Sequence[str] = ()) -> None:
    """The checks load_transformation makes before it imports anything (the name's form, where the module may
    come from, shadowing); TransformError when one fails. A stream host makes them itself, then imports in a
    child process."""
    _locate(path, _split(path)[0], _search_dirs(search_dirs))


def _split(path: object) -> tuple[str, str]:
    """(module, function) of a `module.function` name."""
    if not isinstance(path, str) or not _DOTTED_PATH.match(path):
        raise TransformError(f"transform: expected 'module.function', got {path!r}")
    module_name, function_name = path.rsplit(".", 1)
    return module_name, function_name


def _locate(path: str, module_name: str, dirs: Sequence[str]) -> Path | None:
    """None for a module of an allowed package (imported by name), else the query module's file."""
    packages = transform_packages()
    if _in_packages(module_name, packages):
        return None
    if _loaded_by_us(module_name):
        return Path(_FROM_QUERY_MODULES[module_name].__file__)
    relative = Path(*module_name.split(".")).with_suffix(".py")
    for directory in dirs:
        candidate = Path(directory) / relative
        if candidate.is_file():
            _refuse_shadowing(path, module_name, candidate)
            return candidate
    raise TransformNotFound(f"transform {path!r}: refused: module {module_name!r} is not one transformations may "
                            f"come from: the packages {', '.join(packages)} ({TRANSFORM_PACKAGES_ENV} adds more) "
                            f"and the query modules directories {list(dirs)!r} (no {str(relative)!r} there; put "
                            f"it in one of them, or name its directory in {QUERY_MODULES_ENV} where the "
                            f"transformation runs: the host's environment for a stream)")


def _loaded_by_us(module_name: str) -> bool:
    loaded = _FROM_QUERY_MODULES.get(module_name)
    return loaded is not None and sys.modules.get(module_name) is loaded


def _import_module(path: str, module_name: str, dirs: Sequence[str]):
    file = _locate(path, module_name, dirs)
    if file is None:
        return _import_allowed(path, module_name)
    if _loaded_by_us(module_name):
        return _FROM_QUERY_MODULES[module_name]
    return _load_file(path, module_name, file)


def _import_allowed(path: str, module_name: str):
    try:
        return importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # a module that raises at import must not take us down
        if isinstance(exc, ModuleNotFoundError) and exc.name and \
                (exc.name == module_name or module_name.startswith(exc.name + ".")):
            raise TransformError(f"transform {path!r}: module {module_name!r} is not installed") from None
        raise _import_failed(path, module_name, exc) from exc


def _refuse_shadowing(path: str, module_name: str, file: Path) -> None:
    """A query module may not take the name of the standard library or of a module already imported."""
    top = module_name.split(".")[0]
    existing = sys.modules.get(module_name)
    if existing is not None and (_FROM_QUERY_MODULES.get(module_name) is existing
                                 or _same_file(getattr(existing, "__file__", None), file)):
        existing = None  # the same query module, loaded again (Memgraph's module reload does the same)
    if top in sys.stdlib_module_names or top in sys.builtin_module_names or existing is not None:
        raise TransformError(f"transform {path!r}: refused: {str(file)!r} would shadow the module {module_name!r} "
                             f"that Python already provides; rename the query module")


def _same_file(a: str | None, b: Path) -> bool:
    try:
        return a is not None and os.path.samefile(a, b)
    except OSError:
        return False


def _load_file(path: str, module_name: str, file: Path):
    """Load a query module by file path and register it under its own name, as Memgraph does."""
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise TransformError(f"transform {path!r}: cannot load {str(file)!r} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(module_name, None)
        if not isinstance(exc, (Exception, SystemExit)):
            raise
        raise _import_failed(path, str(file), exc) from exc
    _FROM_QUERY_MODULES[module_name] = module
    return module


def _import_failed(path: str, what: str, exc: BaseException) -> TransformError:
    return TransformError(f"transform {path!r}: importing {what!r} failed: {type(exc).__name__}: {exc}")


def _unwrap_mgp(fn: Callable) -> Callable:
    """Peel wrappers made by mgp.py itself (they expect Memgraph's own objects)."""
    while hasattr(fn, "__wrapped__") and _defined_in_mgp(fn):
        fn = fn.__wrapped__
    return fn


def _defined_in_mgp(fn: Callable) -> bool:
    code = getattr(fn, "__code__", None)
    return code is not None and Path(code.co_filename).name == "mgp.py"


def _as_messages_callable(path: str, fn: Callable) -> Callable:
    """Memgraph also allows `f(ctx: TransCtx, messages)`; outside Memgraph ctx is None."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return fn
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    if len(required) == 2:
        def with_context(messages: Messages, _fn: Callable = fn) -> Any:
            return _fn(None, messages)
        with_context.__name__ = getattr(fn, "__name__", "transformation")
        with_context.__qualname__ = getattr(fn, "__qualname__", with_context.__name__)
        with_context.__module__ = getattr(fn, "__module__", None) or ""
        setattr(with_context, "__wrapped__", fn)   # noqa: B010 (what _name and the mgp unwrapping read)
        return with_context
    if len(required) > 2 or (not positional and not any(p.kind == p.VAR_POSITIONAL for p in params)):
        raise TransformError(f"transform {path!r}: expected fn(messages) or fn(context, messages), "
                             f"got {getattr(fn, '__name__', fn)}{inspect.signature(fn)}")
    return fn


# -- the mgp decorator outside Memgraph -------------------------------------
class _RegistrationShim:
    """Stands in for Memgraph's `_mgp._MODULE` while we import a transformation file.

    `mgp.transformation` calls `_mgp._MODULE.add_transformation(wrapper)` and
    returns the function unchanged; this records the wrapper and nothing else.
    """

    def __init__(self):
        self.transformations: list[Callable] = []

    def add_transformation(self, wrapper: Callable) -> None:
        self.transformations.append(wrapper)

    def __getattr__(self, name: str):
        raise AttributeError(f"only transformations can be registered outside Memgraph (asked for {name!r})")


_REGISTRATION_LOCK = threading.RLock()
_MISSING = object()


@contextmanager
def _mgp_registration():
    """Give `@mgp.transformation` somewhere to register while a file is imported.

    `_mgp._MODULE` is None in Memgraph outside its own module imports (and
    missing from some stubs), so the decorator would fail. Only in that case is
    a shim set, for the duration of the import, then the previous value (None
    or absence) is put back. A `_MODULE` that can register is never touched:
    Memgraph mid-import, the PyPI stub's, or a test backend's. Inside Memgraph,
    load transformations from a procedure call, not a background thread, so no
    Memgraph module import can overlap with the shim.
    """
    mgp_backend = _mgp_backend()
    if mgp_backend is None:
        yield
        return
    with _REGISTRATION_LOCK:
        previous = getattr(mgp_backend, "_MODULE", _MISSING)
        if callable(getattr(previous, "add_transformation", None)):
            yield
            return
        mgp_backend._MODULE = _RegistrationShim()
        try:
            yield
        finally:
            if previous is _MISSING:
                del mgp_backend._MODULE
            else:
                mgp_backend._MODULE = previous


def _mgp_backend():
    """The `_mgp` module `mgp` uses (or will use), without importing `mgp`."""
    mgp = sys.modules.get("mgp")
    backend = getattr(mgp, "_mgp", None) if mgp is not None else None
    if backend is not None:
        return backend
    if "_mgp" in sys.modules:
        return sys.modules["_mgp"]
    try:
        return importlib.import_module("_mgp")
    except ImportError:
        return None


