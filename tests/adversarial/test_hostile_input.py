"""Hostile input from any Cypher caller or API client (issue 10).

Whoever can call `streams.create` (any Memgraph user) or POST /streams chooses
a sink URI, a transformation name and a configuration. None of it may reach
beyond what the host's operator allowed:
- cypherl files only under the allowed output directories (MGSTREAMS_OUTPUT_DIRS,
  default `<state dir>/output`); `..` and symlinks leading out are refused at
  create, and checked again when the file is opened; files 0640, directories 0750;
- transformations only from the built-ins, MGSTREAMS_TRANSFORM_PACKAGES and the
  query modules directories; nothing else is imported (an import runs code);
- secrets masked by key pattern and by value in list output, reprs and errors;
- bolt+s:// verifies the server certificate (system CAs, host name); bolt+ssc:// is
  the explicit self-signed choice;
- the fallback state directory is private (0700, ours, not group/world-writable).
Every refusal is a ConfigError (400 on the API) naming the field and the value,
and changes nothing. Create refusals go through a real host's HTTP API; the rest
through the registry, the sinks and the driver boundary.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import uuid
from functools import partial
from pathlib import Path

import httpx
import pytest
from configs import MERGE, stream_body
from host_helpers import HostProcess
from paths import ROOT, SUPPORT

from mgstreams.settings import default_state_dir
from mgstreams.wire import to_json
from stream_registry import StreamConfig, StreamRegistry
from stream_registry.errors import ConfigError, SinkError, StreamError
from stream_registry.graph.sinks import OUTPUT_DIRS_ENV, open_sink
from stream_registry.graph.transform import QUERY_MODULES_ENV, TRANSFORM_PACKAGES_ENV, Statement
from stream_registry.model import StreamStatus
from stream_registry.redaction import MASK, redact, secret_values
from stream_registry.registry.state.state_store import STATE_FILE


@contextlib.contextmanager
def umask(mask: int):
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# -- through the host's API: what a Cypher caller or a curl user can send ----------------------
@pytest.fixture
def guarded_host(tmp_path):
    """A host as deployed: no output directories or transform packages configured beyond the defaults.
    `tmp_path/importable` is on its PYTHONPATH, so a module placed there could be imported."""
    importable = tmp_path / "importable"
    importable.mkdir()
    queries = tmp_path / "query_modules"
    queries.mkdir()
    (queries / "qm_ok.py").write_text("def transform(messages):\n    return []\n")
    env = {OUTPUT_DIRS_ENV: "", TRANSFORM_PACKAGES_ENV: "", QUERY_MODULES_ENV: str(queries),
           "PYTHONPATH": os.pathsep.join([str(SUPPORT), str(ROOT), str(importable)])}
    host = HostProcess(tmp_path / "state", env=env).start()
    host.importable = importable
    yield host
    host.stop()


body = partial(stream_body, group="hostile", transform=MERGE, sink="null://")


def test_cypherl_sinks_outside_the_output_dirs_are_refused_at_create(guarded_host, kafka, tmp_path):
    topic = kafka.new_topic(partitions=1)
    state = guarded_host.state_dir
    output = state / "output"
    output.mkdir()
    wal = tmp_path / "memgraph" / "wal"                        # what `CALL streams.create` could append to before
    wal.mkdir(parents=True)
    (output / "escape").symlink_to(wal)                        # a directory symlink leading out
    (output / "planted.cypherl").symlink_to(wal / "new-file")  # a dangling file symlink leading out
    refused = [
        f"cypherl://{wal}/0001.wal",
        f"cypherl://{output}/../../memgraph/wal/x.cypherl",    # '..' climbing out
        f"cypherl://{output}/sub/../inside.cypherl",           # '..' is refused even where it stays inside
        f"cypherl://{output}/escape/x.cypherl",
        f"cypherl://{output}/escape/deeper/x.cypherl",
        f"cypherl://{output}/planted.cypherl",
        f"cypherl://{state / STATE_FILE}",                     # the host's own state store
        f"cypherl://{state}/other.cypherl",
        "cypherl:///etc/cron.d/mgstreams",
    ]
    with httpx.Client(base_url=guarded_host.url, timeout=30) as http:
        for sink in refused:
            answer = http.post("/streams", json=body(kafka, topic, sink=sink))
            assert answer.status_code == 400, (sink, answer.text)
            error = answer.json()["error"]
            assert error.startswith("sink:") and sink in error, error
        assert http.get("/streams").json() == []               # nothing stored
        assert list(wal.iterdir()) == []                       # nothing created
        assert sorted(p.name for p in output.iterdir()) == ["escape", "planted.cypherl"]
        assert not (state / "other.cypherl").exists() and not Path("/etc/cron.d/mgstreams").exists()

        inside = f"cypherl://{output}/orders/live.cypherl"     # the default output directory is allowed
        answer = http.post("/streams", json=body(kafka, topic, sink=inside))
        assert answer.status_code == 201, answer.text
        assert not (output / "orders").exists(), "create opens nothing; start does"


def test_transformations_outside_the_allowed_places_are_refused_without_importing(guarded_host, kafka):
    topic = kafka.new_topic(partitions=1)
    marker = guarded_host.importable / "imported.txt"
    (guarded_host.importable / "side_effects.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n"
        f"def transform(messages):\n    return []\n")
    refused = ["os.system", "subprocess.run", "builtins.eval", "posix.system", "importlib.import_module",
               "side_effects.transform",                       # importable, but no one allowed its package
               "stream_helpers.offsets_transform",             # likewise (the test suite's own package)
               "stream_registry.builtin_transformations.Any",  # allowed module, but imported there, not defined
               "stream_registry.graph.sinks.open_sink"]
    with httpx.Client(base_url=guarded_host.url, timeout=30) as http:
        for transform in refused:
            answer = http.post("/streams", json=body(kafka, topic, transform=transform))
            assert answer.status_code == 400, (transform, answer.text)
            error = answer.json()["error"]
            assert error.startswith("transform") and repr(transform) in error and "refused" in error, error
        assert http.get("/streams").json() == []
        assert not marker.exists(), "a refused name must not be imported (its module's code would run)"

        for name, transform in (("builtin", MERGE), ("query_module", "qm_ok.transform")):
            answer = http.post("/streams", json=body(kafka, topic, name=name, transform=transform))
            assert answer.status_code == 201, answer.text


# -- through the registry -------------------------------------------------------------------------
def config(kafka, topic: str, **overrides) -> StreamConfig:
    fields = dict(name="orders", topics=[topic], bootstrap_servers=kafka.bootstrap_servers, transform=MERGE,
                  sink="null://", consumer_group=f"hostile_{uuid.uuid4().hex[:8]}", batch_interval_ms=20)
    return StreamConfig(**{**fields, **overrides})


@pytest.fixture
def default_policy(monkeypatch):
    """No MGSTREAMS_OUTPUT_DIRS: the registry's default, <state dir>/output."""
    monkeypatch.delenv(OUTPUT_DIRS_ENV, raising=False)


def test_stream_files_are_0640_in_0750_directories(kafka, tmp_path, default_policy):
    topic = kafka.new_topic(partitions=1)
    output = tmp_path / "state" / "output"
    target = output / "a" / "b" / "live.cypherl"
    registry = StreamRegistry(tmp_path / "state")
    try:
        with umask(0o022):
            registry.create(config(kafka, topic, sink=f"cypherl://{target}"))
            assert not output.exists(), "create changes nothing on disk"
            registry.start("orders")                           # the sink's file is opened (created) at start
        assert target.is_file()
        assert mode_of(target) == 0o640
        assert [mode_of(d) for d in (output, output / "a", output / "a" / "b")] == [0o750] * 3
    finally:
        registry.close()


def test_the_output_policy_is_checked_again_when_the_stream_starts(kafka, tmp_path, default_policy):
    """A symlink planted after create (by whoever can write the output directory) is not followed at start."""
    topic = kafka.new_topic(partitions=1)
    output = tmp_path / "state" / "output"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    registry = StreamRegistry(tmp_path / "state")
    try:
        registry.create(config(kafka, topic, sink=f"cypherl://{output}/live.cypherl"))
        output.mkdir()
        (output / "live.cypherl").symlink_to(elsewhere / "stolen.cypherl")
        with pytest.raises(StreamError, match=r"sink: .*live\.cypherl.* is outside the allowed output directories"):
            registry.start("orders")
        assert registry.get("orders").status == StreamStatus.ERROR
        assert list(elsewhere.iterdir()) == []
    finally:
        registry.close()


def test_output_dirs_come_from_the_environment_like_path(kafka, tmp_path, monkeypatch):
    topic = kafka.new_topic(partitions=1)
    first, second = tmp_path / "out1", tmp_path / "out2"
    monkeypatch.setenv(OUTPUT_DIRS_ENV, os.pathsep.join([str(first), str(second)]))
    registry = StreamRegistry(tmp_path / "state")
    try:
        registry.create(config(kafka, topic, name="one", sink=f"cypherl://{first}/x.cypherl"))
        registry.create(config(kafka, topic, name="two", sink=f"cypherl://{second}/deep/x.cypherl"))
        for sink in (f"cypherl://{tmp_path}/x.cypherl", f"cypherl://{tmp_path}/state/output/x.cypherl"):
            with pytest.raises(ConfigError, match="sink: .* is outside the allowed output directories"):
                registry.create(config(kafka, topic, name="three", sink=sink))
        assert [s.name for s in registry.list()] == ["one", "two"]
    finally:
        registry.close()


OAUTH_SECRET = f"oauth-{uuid.uuid4().hex}"
CREDENTIAL = f"cred-{uuid.uuid4().hex}"
PEM_BODY = uuid.uuid4().hex
SECRET_CONFIGS = {
    "sasl.oauthbearer.config": f"clientId=mgstreams clientSecret={OAUTH_SECRET} scope=kafka",
    "sasl.oauthbearer.extensions": f"logicalCluster=lkc-{uuid.uuid4().hex[:6]},identityPoolId=pool-{uuid.uuid4().hex}",
    "sasl.oauthbearer.client.secret": f"client-secret-{uuid.uuid4().hex}",
    "ssl.key.password": f"key-pw-{uuid.uuid4().hex}",
    "ssl.keystore.password": f"keystore-pw-{uuid.uuid4().hex}",
    "ssl.key.pem": f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----\n",
}
SECRETS = [*(v for k, v in SECRET_CONFIGS.items() if k != "ssl.key.pem"), PEM_BODY, OAUTH_SECRET, CREDENTIAL]


def assert_no_secret(text: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"{leaked} in {text}"


def test_secrets_are_masked_by_key_and_by_value_in_list_output_and_reprs(kafka, tmp_path):
    topic = kafka.new_topic(partitions=1)
    configs = {**SECRET_CONFIGS, "client.rack": CREDENTIAL}    # a credential copied under an innocent key
    stream = config(kafka, topic, configs=configs, credentials={"sasl.password": CREDENTIAL})
    assert_no_secret(repr(stream))
    registry = StreamRegistry(tmp_path / "state")
    try:
        registry.create(stream)
        for shown in (registry.list()[0], registry.get("orders")):
            assert_no_secret(json.dumps(to_json(shown)))
            assert_no_secret(repr(shown))
            assert shown.configs == {**{key: MASK for key in SECRET_CONFIGS}, "client.rack": MASK}
    finally:
        registry.close()


@pytest.mark.parametrize("configs", [
    {"group.id": CREDENTIAL},                                  # owned key: the error shows the value it refuses
    {"partition.assignment.strategy": f"range,{CREDENTIAL}"},
    {"group.protocol": CREDENTIAL},
])
def test_secrets_are_masked_in_configuration_errors(kafka, tmp_path, configs):
    registry = StreamRegistry(tmp_path / "state")
    try:
        with pytest.raises(ConfigError) as err:   # an owned key is refused as the config is made
            registry.create(config(kafka, "t", configs=configs, credentials={"sasl.password": CREDENTIAL}))
        assert str(err.value).startswith("configs[") and MASK in str(err.value)
        assert_no_secret(str(err.value))
    finally:
        registry.close()


def test_secret_values_reach_inside_the_oauthbearer_config_for_error_text_and_logs():
    """What the worker and the Kafka queries scrub their error messages and log lines with."""
    secrets = secret_values(SECRET_CONFIGS, {"bolt.password": CREDENTIAL})
    for text in (f"OAUTHBEARER token refresh failed: clientSecret={OAUTH_SECRET} rejected by the IdP",
                 f"broker said: {SECRET_CONFIGS['ssl.key.password']} / {SECRET_CONFIGS['sasl.oauthbearer.extensions']}",
                 f"Authentication failure for ingest/{CREDENTIAL}"):
        assert_no_secret(redact(text, secrets))


# -- Bolt over TLS: the driver's handshakes -------------------------------------------------
def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    """A test CA, a server certificate it signed for 127.0.0.1, one it signed for another name, a self-signed one."""
    if shutil.which("openssl") is None:
        pytest.skip("the TLS tests make their certificates with the openssl command (Debian package openssl), "
                    "which this machine lacks")
    directory = tmp_path_factory.mktemp("tls")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", "-new", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=mgstreams test CA", cwd=directory)
    for name, san in (("server", "IP:127.0.0.1,DNS:localhost"), ("other", "DNS:other.example")):
        openssl("req", "-new", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
                cwd=directory)
        (directory / f"{name}.ext").write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n"
                                               f"extendedKeyUsage=serverAuth\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=directory)
    openssl("req", "-x509", "-new", *ec, "-keyout", "self.key", "-out", "self.pem", "-days", "2",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", cwd=directory)
    return directory


TLS_SERVER = """
import socket, ssl, sys
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[1], sys.argv[2])
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
while True:
    conn, _ = listener.accept()
    conn.settimeout(5)
    try:
        with context.wrap_socket(conn, server_side=True) as tls:
            print("ok", flush=True)
            try:
                tls.recv(64)
            except OSError:
                pass
    except (OSError, ssl.SSLError) as exc:
        print(type(exc).__name__, flush=True)
"""


@contextlib.contextmanager
def tls_server(directory: Path, name: str):
    """A TLS listener on 127.0.0.1 presenting `name`.pem; it completes handshakes, then hangs up (no Bolt).

    In a process of its own, so that its handshakes are a real peer's. Yields the port and, once the block ends,
    each handshake's outcome.
    """
    server = subprocess.Popen([sys.executable, "-c", TLS_SERVER, str(directory / f"{name}.pem"),
                               str(directory / f"{name}.key")], stdout=subprocess.PIPE, text=True)
    handshakes: list[str] = []
    try:
        port = int(server.stdout.readline())
        yield port, handshakes
    finally:
        server.terminate()
        out, _ = server.communicate(timeout=10)
        handshakes.extend(out.split())


def key_fingerprint(directory: Path, name: str) -> str:
    """SHA-512 of the certificate's public key bits, by openssl (what libmgclient reported: the pin's definition)."""
    der = subprocess.run(["openssl", "x509", "-in", str(directory / f"{name}.pem"), "-noout", "-pubkey"],
                         check=True, capture_output=True).stdout
    spki = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "DER"], input=der, check=True,
                          capture_output=True).stdout
    import hashlib
    return hashlib.sha512(spki[-65:]).hexdigest()              # P-256: the uncompressed point ends the SPKI


def test_bolt_s_refuses_a_certificate_the_system_cas_do_not_vouch_for(certificates, monkeypatch):
    """bolt+s verifies the certificate in the driver's own handshake (system CAs and host name): a self-signed or
    mis-named server is refused, not retried, and the error says what to use instead."""
    monkeypatch.setenv("SSL_CERT_FILE", str(certificates / "ca.pem"))    # the system CAs, plus the test CA
    for name, reason in (("self", "self.signed certificate"), ("other", "mismatch|doesn't match|not valid for")):
        with tls_server(certificates, name) as (port, _):
            with pytest.raises(SinkError, match=rf"bolt\+s://127\.0\.0\.1:{port}: the server's certificate is not "
                                                rf"trusted: .*({reason}).*bolt\+ssc://") as err:
                open_sink(f"bolt+s://127.0.0.1:{port}?retries=3").write([Statement("RETURN 1")])
        assert err.value.__cause__ is None and not err.value.transient


def test_bolt_s_accepts_a_verified_server_in_one_handshake(certificates, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(certificates / "ca.pem"))
    with tls_server(certificates, "server") as (port, handshakes):
        with pytest.raises(SinkError) as err:                   # the listener speaks TLS but not Bolt
            open_sink(f"bolt+s://127.0.0.1:{port}?retries=1").write([Statement("RETURN 1")])
    assert "certificate" not in str(err.value) and err.value.transient
    assert handshakes == ["ok"], "the driver's own handshake verifies the certificate: no second connection"


def test_bolt_s_with_a_pinned_key_that_differs_is_refused(certificates, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(certificates / "ca.pem"))
    with tls_server(certificates, "server") as (port, _):
        with pytest.raises(SinkError, match="is not the pinned fingerprint") as err:
            open_sink(f"bolt+s://127.0.0.1:{port}?retries=3&fingerprint={'ab' * 64}").write([Statement("RETURN 1")])
    assert not err.value.transient


def test_bolt_ssc_is_the_explicit_self_signed_choice(certificates):
    pinned = key_fingerprint(certificates, "self")
    with tls_server(certificates, "self") as (port, handshakes):
        for query in ("", f"&fingerprint={pinned}"):            # TLS accepted (any key, or the pinned one)
            with pytest.raises(SinkError) as err:               # then no Bolt behind it
                open_sink(f"bolt+ssc://127.0.0.1:{port}?retries=1{query}").write([Statement("RETURN 1")])
            assert err.value.transient and "pinned" not in str(err.value)
        with pytest.raises(SinkError, match="is not the pinned fingerprint"):
            open_sink(f"bolt+ssc://127.0.0.1:{port}?retries=1&fingerprint={'ab' * 64}").write([Statement("RETURN 1")])
    assert handshakes[:2] == ["ok", "ok"]


# -- the fallback state directory -------------------------------------------------------------
@pytest.fixture
def fallback_env(monkeypatch, tmp_path):
    monkeypatch.delenv("MGSTREAMS_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "mgstreams"


def test_fallback_state_dirs_are_created_private(fallback_env, monkeypatch, tmp_path):
    with umask(0o022):
        assert default_state_dir() == fallback_env
        assert mode_of(fallback_env) == 0o700
        (tmp_path / "not-a-dir").write_text("")
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "not-a-dir"))    # the home state dir cannot be made
        monkeypatch.setattr("tempfile.tempdir", str(tmp_path))              # the shared /tmp
        fallback = default_state_dir()
        assert fallback == tmp_path / f"mgstreams-{os.getuid()}" and mode_of(fallback) == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory another user's needs root")
def test_fallback_state_dir_of_another_user_is_refused(fallback_env):
    fallback_env.mkdir(parents=True, mode=0o700)
    os.chown(fallback_env, 4242, 4242)
    with pytest.raises(ConfigError, match=rf"state_dir: '{re.escape(str(fallback_env))}' is owned by uid 4242, not by "):
        default_state_dir()


def test_fallback_state_dir_writable_by_others_or_a_symlink_is_refused(fallback_env, tmp_path):
    fallback_env.mkdir(parents=True, mode=0o700)
    os.chmod(fallback_env, 0o777)
    with pytest.raises(ConfigError, match=rf"state_dir: '{re.escape(str(fallback_env))}' \(owner .*\) is group- or "
                                          rf"world-writable \(mode 0777\)"):
        default_state_dir()
    os.rmdir(fallback_env)
    (tmp_path / "theirs").mkdir()
    fallback_env.symlink_to(tmp_path / "theirs")
    with pytest.raises(ConfigError, match=rf"state_dir: '{re.escape(str(fallback_env))}' is a symlink"):
        default_state_dir()


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory another user's needs root")
def test_the_shared_tmp_fallback_is_refused_when_someone_else_made_it_first(monkeypatch, tmp_path):
    monkeypatch.delenv("MGSTREAMS_STATE_DIR", raising=False)
    (tmp_path / "not-a-dir").write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "not-a-dir"))    # the home state dir cannot be made
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    squatted = tmp_path / f"mgstreams-{os.getuid()}"
    squatted.mkdir(mode=0o755)
    os.chown(squatted, 4242, 4242)
    with pytest.raises(ConfigError, match=rf"'{re.escape(str(squatted))}' is owned by uid 4242"):
        default_state_dir()
    os.chown(squatted, os.getuid(), os.getgid())
    assert default_state_dir() == squatted
