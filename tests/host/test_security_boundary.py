"""The security boundary as allowlists (issue 26), attacked through real hosts.

What a Cypher user, a web page and a network neighbour can make the host do:
- load native code (plugin.library.paths, ssl.engine.location, ...) from configs,
  credentials, the API, the query module or a planted state file: never; a probe
  library built with `cc` writes a marker file from its constructor if loaded;
- drive the API from a web page (CSRF, DNS rebinding): refused by Host (421),
  Origin (403) and Content-Type (415) before the token or any handler;
- make the host reach other machines (bootstrap servers, Bolt sinks, OIDC token
  endpoints) or probe its file system: only operator-allowed hosts and
  directories, with one answer whatever the file system holds;
- read the host's token from a stream process's environment: it is not there;
- swap a directory for a symlink while a file sink is opened: nothing is
  written outside the allowed directory;
- hold the host with slow connections or many creates: closed within a short deadline, capped, 503 naming the cap.
"""
from __future__ import annotations

import ctypes
import json
import logging
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from functools import partial
from pathlib import Path

import httpx
import pytest
from configs import MERGE, stream_body
from host_helpers import HostProcess
from host_helpers import http as host_client
from mgp_backend import QueryError, mgp_environment
from paths import ROOT
from ports import free_port
from stream_helpers import wait_until

from stream_registry.errors import ConfigError, SinkError
from stream_registry.graph.sinks import OutputPolicy, open_sink
from stream_registry.kafka.client import new_consumer
from stream_registry.registry.state.state_store import STATE_FILE

JSON = {"Content-Type": "application/json"}


# -- the probe: native code that proves it ran -------------------------------------------------
@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    """A shared library whose constructor creates the marker file (and which exports librdkafka's plugin
    entry point, `conf_init`, and OpenSSL's engine entry points, so every loader accepts it)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc) to build the probe library")
    where = tmp_path_factory.mktemp("probe")
    marker = where / "LOADED"
    source = where / "probe.c"
    source.write_text(f"""
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void loaded(void) {{
    int fd = open("{marker}", O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {{ write(fd, "loaded\\n", 7); close(fd); }}
}}
int conf_init(void *conf, void **plug_opaquep, char *errstr, unsigned long errstr_size) {{ return 0; }}
int bind_engine(void *e, const char *id, const void *fns) {{ return 1; }}
unsigned long v_check(unsigned long v) {{ return v; }}
""")
    library = where / "libprobe.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(library), str(source)], check=True, capture_output=True)
    # the probe works: loading it writes the marker
    subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(library)!r})"], check=True)
    assert marker.exists()
    marker.unlink()
    return library, marker


CODE_LOADERS = [
    ("configs", "plugin.library.paths"),
    ("credentials", "plugin.library.paths"),
    ("configs", "ssl.engine.location"),
    ("credentials", "ssl.engine.location"),
    ("configs", "ssl.providers"),
]


create_body = partial(stream_body, name=None, group="sec", transform=MERGE, sink="null://")   # a fresh name each


@pytest.fixture
def guarded_host(tmp_path):
    """A host as an operator starts it: no token given, so it generates one."""
    host = HostProcess(tmp_path / "state", generated_token=True).start()
    yield host
    host.stop()


def api(host: HostProcess, **headers) -> httpx.Client:
    return host_client(host, host.token, timeout=60, **headers)


@pytest.mark.parametrize("where, key", CODE_LOADERS)
def test_no_library_is_loaded_through_post_streams(guarded_host, kafka, probe, where, key):
    library, marker = probe
    marker.unlink(missing_ok=True)          # each attack is judged on its own
    topic = kafka.new_topic(partitions=1)
    with api(guarded_host) as http:
        response = http.post("/streams", json=create_body(kafka, topic, **{where: {key: str(library)}}))
        assert not marker.exists(), f"the probe library ran in the host ({response.status_code})"
        assert response.status_code == 400, response.text
        assert response.json()["error"].startswith(f"{where}[{key!r}]: "), response.text
        assert http.get("/streams").json() == []
    assert not marker.exists()
    assert str(library) not in guarded_host.log()


def test_kinit_cmd_is_never_run(guarded_host, kafka, tmp_path):
    marker = tmp_path / "KINIT-RAN"
    topic = kafka.new_topic(partitions=1)
    for where in ("configs", "credentials"):
        with api(guarded_host) as http:
            response = http.post("/streams", json=create_body(kafka, topic, **{where: {
                "sasl.mechanism": "GSSAPI", "security.protocol": "SASL_PLAINTEXT",
                "sasl.kerberos.kinit.cmd": f"touch {marker}"}}))
        assert response.status_code == 400 and "sasl.kerberos.kinit.cmd" in response.json()["error"]
    time.sleep(0.5)
    assert not marker.exists()


def test_no_library_is_loaded_through_the_query_module(guarded_host, kafka, probe, monkeypatch):
    library, marker = probe
    marker.unlink(missing_ok=True)          # each attack is judged on its own
    monkeypatch.setenv("MGSTREAMS_URL", guarded_host.url)
    monkeypatch.delenv("MGSTREAMS_TOKEN", raising=False)      # the documented setup: the host's token file
    monkeypatch.setenv("MGSTREAMS_TOKEN_FILE", str(guarded_host.state_dir / "api-token"))
    topic = kafka.new_topic(partitions=1)
    with mgp_environment([ROOT / "query_modules"]) as memgraph:
        memgraph.load_all()
        for where, key in CODE_LOADERS:
            configs = {key: str(library)} if where == "configs" else {}
            credentials = {key: str(library)} if where == "credentials" else {}
            try:
                memgraph.call("streams.create", f"q_{uuid.uuid4().hex[:6]}", [topic], kafka.bootstrap_servers,
                              MERGE, "null://", "", 100, 100, configs, credentials)
                refused = None
            except QueryError as exc:
                refused = str(exc)
            assert not marker.exists(), f"the probe library ran in the host through {where}[{key!r}]"
            assert refused is not None and f"{where}[{key!r}]" in refused, refused
        assert memgraph.call("streams.list") == []
    assert not marker.exists()


def test_a_planted_state_file_loads_no_library_at_start(tmp_path, kafka, probe):
    """A stored config is checked again when the host reads it back: the host refuses to start, naming it."""
    library, marker = probe
    marker.unlink(missing_ok=True)          # each attack is judged on its own
    topic = kafka.new_topic(partitions=1)
    host = HostProcess(tmp_path / "state", generated_token=True).start()
    with api(host) as http:
        assert http.post("/streams", json=create_body(kafka, topic, name="planted")).status_code == 201
    assert host.terminate() == 0
    host.stop()
    with sqlite3.connect(tmp_path / "state" / STATE_FILE) as db:
        [(text,)] = db.execute("SELECT config FROM streams WHERE name = 'planted'").fetchall()
        config = json.loads(text)
        config["configs"] = {"plugin.library.paths": str(library)}
        db.execute("UPDATE streams SET config = ?, desired_running = 1 WHERE name = 'planted'",
                   (json.dumps(config),))
    again = HostProcess(tmp_path / "state", generated_token=True)
    with pytest.raises(Exception) as refused:
        again.start(timeout=30)
    again.stop()
    assert "plugin.library.paths" in str(refused.value) and "stream 'planted'" in str(refused.value)
    time.sleep(1)
    assert not marker.exists()


def test_properties_off_the_allowlist_are_refused_and_operators_can_widen_it(tmp_path, kafka):
    topic = kafka.new_topic(partitions=1)
    host = HostProcess(tmp_path / "state", env={"MGSTREAMS_ALLOWED_CONFIGS": "queue.buffering.max.ms"},
                       generated_token=True).start()
    try:
        with api(host) as http:
            for configs in ({"debug": "all"}, {"interceptor.classes": "x"}, {"test.mock.num.brokers": 3},
                            {"sasl.oauthbearer.metadata.authentication.type": "azure_imds"}):
                response = http.post("/streams", json=create_body(kafka, topic, configs=configs))
                [key] = configs
                assert response.status_code == 400 and response.json()["error"].startswith(f"configs[{key!r}]")
            accepted = http.post("/streams", json=create_body(kafka, topic, configs={
                "queue.buffering.max.ms": 5, "session.timeout.ms": 6000}))
            assert accepted.status_code == 201, accepted.text
    finally:
        host.stop()
    refused = subprocess.run([sys.executable, "-m", "mgstreams", "serve", "--state-dir", str(tmp_path / "s2"),
                              "--listen", "127.0.0.1:0"], capture_output=True, text=True, cwd=ROOT, timeout=30,
                             env={**os.environ, "MGSTREAMS_ALLOWED_CONFIGS": "plugin.library.paths"})
    assert refused.returncode == 1 and "MGSTREAMS_ALLOWED_CONFIGS: 'plugin.library.paths'" in refused.stderr


# -- the browser boundary -----------------------------------------------------------------------
def test_a_cross_origin_text_plain_post_and_a_foreign_host_are_refused(guarded_host, kafka):
    topic = kafka.new_topic(partitions=1)
    body = json.dumps(create_body(kafka, topic, name="csrf"))
    token = {"Authorization": f"Bearer {guarded_host.token}"} if guarded_host.token else {}
    port = guarded_host.url.rsplit(":", 1)[1]
    with httpx.Client(base_url=guarded_host.url, timeout=30, headers=token) as http:
        # what a page at evil.example can send without a preflight
        csrf = http.post("/streams", content=body, headers={"Origin": "https://evil.example",
                                                            "Content-Type": "text/plain"})
        assert csrf.status_code == 403 and csrf.json()["error"].startswith("origin: ")
        for origin in ("null", f"http://evil.example:{port}", f"http://127.0.0.1:{int(port) + 1}"):
            assert http.post("/streams", content=body, headers={"Origin": origin, **JSON}).status_code == 403
        plain = http.post("/streams", content=body, headers={"Content-Type": "text/plain"})
        assert plain.status_code == 415 and plain.json()["error"].startswith("content-type: ")
        form = http.post("/streams", content=body, headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert form.status_code == 415
        # DNS rebinding: the page's own name in Host
        for host in (f"attacker.example:{port}", "attacker.example", f"localhost.evil.example:{port}"):
            rebound = http.get("/streams", headers={"Host": host})
            assert rebound.status_code == 421 and rebound.json()["error"].startswith("host: "), host
        assert http.get("/streams").json() == []
        # the host's own origin and names are served
        same = http.post("/streams", content=body, headers={"Origin": guarded_host.url, **JSON})
        assert same.status_code == 201, same.text
        assert http.get("/streams", headers={"Host": f"localhost:{port}"}).status_code == 200


def test_a_host_given_no_token_makes_one_and_its_clients_read_it(tmp_path):
    state = tmp_path / "state"
    host = HostProcess(state, generated_token=True).start()
    try:
        token_file = state / "api-token"
        assert oct(token_file.stat().st_mode & 0o777) == "0o600" and len(host.token) >= 32
        assert host.token == token_file.read_text().strip()
        with httpx.Client(base_url=host.url, timeout=30) as http:
            assert http.get("/streams").status_code == 401
            # a browser opens the lag page with the token in its address; no other route takes it there
            assert http.get("/ui", params={"token": host.token}).status_code == 200
            assert http.get("/ui", params={"token": host.token + "x"}).status_code == 401
            assert http.get("/streams", params={"token": host.token}).status_code == 401
        env = {k: v for k, v in os.environ.items() if not k.startswith("MGSTREAMS_")}
        for extra in ({"MGSTREAMS_TOKEN_FILE": str(token_file)}, {"MGSTREAMS_STATE_DIR": str(state)}):
            listed = subprocess.run([sys.executable, "-m", "mgstreams", "--url", host.url, "list", "--json"],
                                    capture_output=True, text=True, cwd=ROOT, timeout=60, env={**env, **extra})
            assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stderr
        assert host.terminate() == 0
    finally:
        host.stop()
    again = HostProcess(state, generated_token=True).start()      # a restart serves with the same token
    try:
        assert again.token == host.token
    finally:
        again.stop()
    for mode in (0o644, 0o700):   # readable by others; or executable: a token file is 0600 or 0400
        (state / "api-token").chmod(mode)
        refused = subprocess.run([sys.executable, "-m", "mgstreams", "serve", "--state-dir", str(state),
                                  "--listen", "127.0.0.1:0"], capture_output=True, text=True, cwd=ROOT, timeout=30)
        assert refused.returncode == 1 and f"mode {mode:04o}" in refused.stderr and host.token not in refused.stderr


# -- network reach and the file system --------------------------------------------------------
def test_hosts_beyond_the_allowlist_are_refused_and_paths_answer_alike(guarded_host, kafka, tmp_path):
    topic = kafka.new_topic(partitions=1)
    existing = tmp_path / "exists.pem"
    existing.write_text("not a certificate")
    with api(guarded_host) as http:
        cases = [
            ({"bootstrap_servers": "kafka.evil.example:9092"}, "bootstrap_servers: host 'kafka.evil.example'"),
            ({"bootstrap_servers": f"{kafka.bootstrap_servers},10.1.2.3:9092"}, "bootstrap_servers: host '10.1.2.3'"),
            ({"sink": "bolt://memgraph.evil.example:7687"}, "sink: host 'memgraph.evil.example'"),
            ({"configs": {"sasl.oauthbearer.method": "oidc",
                          "sasl.oauthbearer.token.endpoint.url": "https://idp.evil.example/token"}},
             "configs['sasl.oauthbearer.token.endpoint.url']: host 'idp.evil.example'"),
        ]
        for overrides, error in cases:
            response = http.post("/streams", json=create_body(kafka, topic, **overrides))
            assert response.status_code == 400 and response.json()["error"].startswith(error), response.text
        errors = set()
        for path in (existing, tmp_path / "missing.pem", tmp_path, "/etc/passwd", "/nonexistent/x"):
            response = http.post("/streams", json=create_body(kafka, topic, configs={
                "security.protocol": "SSL", "ssl.ca.location": str(path)}))
            assert response.status_code == 400
            errors.add(response.json()["error"].replace(str(path), "PATH"))
        assert len(errors) == 1, errors        # no file-existence oracle
        assert http.get("/streams").json() == []


# -- processes ---------------------------------------------------------------------------------
def test_a_stream_process_environment_holds_no_token(tmp_path, kafka):
    token = f"tok-{uuid.uuid4().hex}-{uuid.uuid4().hex}"
    host = HostProcess(tmp_path / "state", token=token).start()
    try:
        topic = kafka.new_topic(partitions=1)
        with api(host) as http:
            body = create_body(kafka, topic, name="env", sink=f"cypherl://{tmp_path / 'state' / 'output' / 'o.cypherl'}")
            assert http.post("/streams", json=body).status_code == 201, host.log()
            assert http.put("/streams/env/start").status_code == 200
            pid = wait_until(lambda: http.get("/streams/env").json().get("pid"), timeout=30)
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        assert environ and token.encode() not in environ and b"MGSTREAMS_TOKEN=" not in environ
    finally:
        host.stop()
    assert token not in host.log()


def test_librdkafka_log_lines_are_redacted_whatever_logger_a_config_names(caplog):
    secret = f"pw-{uuid.uuid4().hex}"
    plain = logging.getLogger("a.plain.logger")
    with caplog.at_level(logging.DEBUG):
        consumer = new_consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "client.id": secret,
                                 "debug": "generic,broker", "logger": plain}, [secret])
        consumer.poll(0.5)
        consumer.close()
    assert caplog.records, "librdkafka logged nothing"
    assert not [r for r in caplog.records if secret in r.getMessage()]


# -- directories --------------------------------------------------------------------------------
def _exchange(libc, a: bytes, b: bytes) -> None:
    """renameat2(RENAME_EXCHANGE): swap two names atomically."""
    libc.syscall(316, -100, a, -100, b, 2)


def test_a_symlink_swapped_in_during_opens_never_redirects_a_write(tmp_path):
    """An intermediate directory flips between a real directory and a symlink leading out, as fast as the
    kernel allows, while a file sink under it is admitted and opened again and again."""
    allowed = tmp_path / "out"
    (allowed / "sub").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "decoy").symlink_to(outside)
    policy = OutputPolicy((str(allowed),), None)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    swapped = [bytes(allowed / "sub"), bytes(tmp_path / "decoy")]
    stop = threading.Event()

    def flip():
        while not stop.is_set():
            _exchange(libc, *swapped)
    flipper = threading.Thread(target=flip, daemon=True)
    flipper.start()
    opened = refused = 0
    try:
        for _ in range(3000):
            try:
                sink = open_sink(f"cypherl://{allowed}/sub/x.cypherl", output=policy)
            except (ConfigError, SinkError, OSError):
                refused += 1
                continue
            sink.close()
            opened += 1
    finally:
        stop.set()
        flipper.join()
    assert opened + refused == 3000
    assert list(outside.iterdir()) == [], f"written outside after {opened} opens"


def test_output_and_state_directories_must_be_private(tmp_path, kafka):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    refused = subprocess.run([sys.executable, "-m", "mgstreams", "serve", "--state-dir", str(shared),
                              "--listen", "127.0.0.1:0"], capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert refused.returncode == 1 and refused.stderr.startswith("mgstreams: error: state_dir: ")
    assert "writable by group or others" in refused.stderr
    refused = subprocess.run([sys.executable, "-m", "mgstreams", "serve", "--state-dir", str(tmp_path / "state"),
                              "--listen", "127.0.0.1:0", "--no-token"], capture_output=True, text=True, cwd=ROOT,
                             timeout=30, env={**os.environ, "MGSTREAMS_OUTPUT_DIRS": str(shared)})
    assert refused.returncode == 1, refused.stdout
    assert refused.stderr.startswith(f"mgstreams: error: MGSTREAMS_OUTPUT_DIRS: {str(shared)!r} is writable by "
                                     f"group or others"), refused.stderr
    # a private output directory holding a symlink that leads out: the write never follows it
    private = tmp_path / "private"
    (private / "sub").mkdir(parents=True)
    (private / "link").symlink_to(shared)
    host = HostProcess(tmp_path / "state", env={"MGSTREAMS_OUTPUT_DIRS": str(private)},
                       generated_token=True).start()
    try:
        topic = kafka.new_topic(partitions=1)
        with api(host) as http:
            response = http.post("/streams", json=create_body(kafka, topic, sink=f"cypherl://{private}/link/x.cypherl"))
        assert response.status_code == 400 and response.json()["error"].startswith("sink: "), response.text
    finally:
        host.stop()
    assert not (shared / "x.cypherl").exists()


# -- availability -----------------------------------------------------------------------------
def test_concurrent_creates_are_capped_with_a_503_and_listing_stays_fast(tmp_path, kafka):
    dead = f"127.0.0.1:{free_port()}"      # nothing listens: each create waits for Kafka
    host = HostProcess(tmp_path / "state", env={"MGSTREAMS_MAX_CREATES": "2"}, generated_token=True).start()
    try:
        statuses = []

        def create(i):
            with api(host) as http:
                statuses.append(http.post("/streams", json={"name": f"c{i}", "topics": ["t"],
                                                            "bootstrap_servers": dead, "sink": "null://"}))
        threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        time.sleep(1.0)
        with api(host) as http:
            started = time.monotonic()
            assert http.get("/streams").status_code == 200
            assert time.monotonic() - started < 2
        for thread in threads:
            thread.join(120)
        busy = [r for r in statuses if r.status_code == 503 and r.json()["error"].startswith("creates: ")]
        assert len(busy) >= 5 and "MGSTREAMS_MAX_CREATES" in busy[0].json()["error"], \
            [(r.status_code, r.text) for r in statuses]
    finally:
        host.stop()


def test_idle_and_excess_connections_are_closed(tmp_path):
    """A connection that shows no token is closed within the auth deadline (3 s), trickled headers too; past the
    pending pool (4 x MGSTREAMS_MAX_CONNECTIONS) the oldest silent connection is closed for a new one (issue 31)."""
    host = HostProcess(tmp_path / "state", env={"MGSTREAMS_MAX_CONNECTIONS": "8"}, generated_token=True).start()
    port = int(host.url.rsplit(":", 1)[1])
    idle = []
    try:
        for _ in range(32):                                    # the pending pool, full
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=30))
        time.sleep(0.5)                                        # silent long enough to count as idle
        idle[1].sendall(b"GET /health HTTP/1.1\r\nHo")        # a trickle of headers that never ends
        extra = socket.create_connection(("127.0.0.1", port), timeout=30)
        idle[0].settimeout(2)
        assert idle[0].recv(4096) == b"", "the oldest silent connection makes room"
        started = time.monotonic()
        for sock in (*idle[1:], extra):
            assert sock.recv(4096) == b""                      # closed by the host: no token shown in time
        assert time.monotonic() - started < 8
        with api(host) as http:                                # and the host serves again
            assert http.get("/health").status_code == 200
    finally:
        for sock in idle:
            sock.close()
        host.stop()
