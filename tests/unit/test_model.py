"""The values module (stream_registry.model) and the error table (stream_registry.errors), as the rest relies on
them: the query module's copies of the shared limits, PartitionKey as a plain (topic, partition) key, values built
by keyword only, and one HTTP status per error class that the client maps back to the class."""
from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest
from paths import ROOT

from stream_registry import errors, model
from stream_registry.model import PartitionKey, StreamInfo, StreamStatus

QUERY_MODULE = ROOT / "query_modules" / "streams.py"
# the query module's name for each shared limit (it stays stdlib + mgp only, so it keeps copies)
COPIES = {"TIMEOUT_S": "REQUEST_TIMEOUT_S", "ALTER_TIMEOUT_S": "ALTER_TIMEOUT_S", "MARGIN_S": "MARGIN_S",
          "MAX_TIMEOUT_MS": "MAX_TIMEOUT_MS", "MAX_CHECK_LIMIT": "MAX_CHECK_LIMIT",
          "CHECK_TIMEOUT_MS": "CHECK_TIMEOUT_MS", "DEFAULT_TIMEOUT_MS": "DEFAULT_TIMEOUT_MS"}


def _module_constants(path: Path) -> dict[str, object]:
    constants = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                constants[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return constants


def test_the_query_modules_copies_of_the_limits_equal_the_models():
    copies = _module_constants(QUERY_MODULE)
    for theirs, ours in COPIES.items():
        assert theirs in copies, f"query_modules/streams.py lost its copy {theirs}"
        assert copies[theirs] == getattr(model, ours), (theirs, copies[theirs], ours, getattr(model, ours))


def test_the_host_and_client_use_the_models_limits_not_copies():
    from mgstreams import client
    from mgstreams.host import api, request_parts
    from stream_registry.registry.host import offset_calls

    assert request_parts.MAX_TIMEOUT_MS is model.MAX_TIMEOUT_MS and api.CHECK_TIMEOUT_MS is model.CHECK_TIMEOUT_MS
    assert offset_calls.MAX_CHECK_LIMIT is model.MAX_CHECK_LIMIT
    assert client.MARGIN_S is model.MARGIN_S and client.ALTER_TIMEOUT_S is model.ALTER_TIMEOUT_S
    assert inspect.signature(client.HostClient).parameters["timeout"].default == model.REQUEST_TIMEOUT_S


def test_the_query_modules_procedures_default_to_the_models_limits():
    """A Cypher caller that leaves timeout_ms out waits what an HTTP or CLI caller waits."""
    procedures = {node.name: node for node in ast.parse(QUERY_MODULE.read_text()).body
                  if isinstance(node, ast.FunctionDef)}
    for name in ("set_stream_offset", "revert"):
        args = procedures[name].args
        defaults = dict(zip([a.arg for a in args.args][-len(args.defaults):], args.defaults, strict=True))
        assert isinstance(defaults["timeout_ms"], ast.Name) and defaults["timeout_ms"].id == "DEFAULT_TIMEOUT_MS", name


def test_the_registrys_defaults_are_the_models_limits():
    from stream_registry.registry.registry import StreamRegistry
    from stream_registry.registry.runners.stream_process import ProcessRunner

    def default(fn, name):
        return inspect.signature(fn).parameters[name].default

    for method in (StreamRegistry.set_offset, StreamRegistry.revert, StreamRegistry.cancel_pending):
        assert default(method, "timeout") * 1000 == model.DEFAULT_TIMEOUT_MS, method.__name__
    assert default(StreamRegistry.check, "timeout") * 1000 == model.CHECK_TIMEOUT_MS
    assert default(StreamRegistry, "stop_timeout") == default(ProcessRunner, "stop_timeout") == model.STOP_TIMEOUT_S


def test_an_alters_client_timeout_covers_the_import_and_the_restart_it_may_wait_for():
    assert model.ALTER_TIMEOUT_S >= model.CHECK_IMPORT_TIMEOUT_S + model.STOP_TIMEOUT_S + model.MARGIN_S


def test_a_partition_key_is_a_plain_topic_partition_tuple():
    key = PartitionKey(topic="orders", partition=2)
    assert key == ("orders", 2) and hash(key) == hash(("orders", 2))
    assert {("orders", 2): 7}[key] == 7 and {key: 7}[("orders", 2)] == 7
    assert (key.topic, key.partition) == ("orders", 2)
    assert sorted([PartitionKey("b", 0), ("a", 1), PartitionKey("a", 0)]) == [("a", 0), ("a", 1), ("b", 0)]


def test_every_value_is_frozen_and_built_by_keyword_only():
    values = [cls for _, cls in inspect.getmembers(model, inspect.isclass)
              if dataclasses.is_dataclass(cls) and cls.__module__ == model.__name__]
    assert len(values) >= 15
    for cls in values:
        params = cls.__dataclass_params__
        assert params.frozen, cls.__name__
        assert all(f.kw_only for f in dataclasses.fields(cls)), cls.__name__
    with pytest.raises(TypeError):
        StreamInfo("orders", ("t",))   # 26 fields: never positionally
    info = StreamInfo(name="orders", topics=("t",), consumer_group="g", bootstrap_servers="b", transform="x.y",
                      sink="null://", status=StreamStatus.RUNNING, error=None, configs={}, credentials={},
                      batch_size=1, batch_interval_ms=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.name = "other"


def test_each_error_class_owns_its_http_status_and_the_client_maps_it_back():
    classes = [cls for _, cls in inspect.getmembers(errors, inspect.isclass) if issubclass(cls, errors.StreamError)]
    for cls in classes:
        assert isinstance(cls.http_status, int) and 400 <= cls.http_status < 600, cls.__name__
        back = errors.class_for_status(cls.http_status)
        assert back.http_status == cls.http_status, cls.__name__
        owner = next(c for c in cls.__mro__ if "http_status" in vars(c))
        if owner is not errors.StreamError:   # the base's 409 (a state conflict) comes back as StreamStateError
            assert issubclass(cls, back), (cls.__name__, back.__name__)   # the client raises an ancestor-or-self
    statuses = {errors.ConfigError: 400, errors.StreamNotFound: 404, errors.StreamStateError: 409,
                errors.StreamExists: 409, errors.BodyTooLarge: 413, errors.KafkaOperationError: 503,
                errors.Busy: 503, errors.OffsetSpecError: 400}
    assert {cls: cls.http_status for cls in statuses} == statuses
    assert errors.class_for_status(413) is errors.BodyTooLarge
    assert errors.class_for_status(503) is errors.KafkaOperationError
    assert errors.class_for_status(500) is errors.StreamError


def test_an_error_crosses_a_child_pipe_as_its_own_class():
    from stream_registry.registry.runners.child_process import child_error

    for exc in (errors.StreamExists("name: taken"), errors.OffsetSpecError("offset: bad"), errors.Busy("cap: full"),
                errors.SinkError("sink: down")):
        back = child_error(exc).exception()
        assert type(back) is type(exc) and str(back) == str(exc)
    stored = child_error(errors.StoredOffsetsConflict("x: y", stored={})).exception()
    assert type(stored) is errors.StreamError   # needs more than a message: crosses as the base
    foreign = child_error(ValueError("boom")).exception()
    assert type(foreign) is errors.TransformError and "ValueError: boom" in str(foreign)
