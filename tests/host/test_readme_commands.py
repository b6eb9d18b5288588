"""Every command in the fenced code blocks of README.md and of the documentation site (docs/) is run or checked
here (issues 6, 9 and 35).

The pages are parsed, not copied: README.md first, then docs/ in the order of mkdocs.yml's `nav`, then any other
page under docs/ (a page not in the nav yet is checked all the same), as one document. A page whose commands a
test of its own runs says so on a line `<!-- commands: tests/host/test_x.py -->` (and that test names the page);
its blocks are left to that test. Each command of a
```bash, ```cypher or ```python block is matched by one rule below, and a command no rule handles fails
`test_every_readme_command_has_a_rule`, so the documentation stays honest. A new page's commands need a rule
here only when no existing rule (and its test) covers them. The walkthroughs (the CLI's, the toolkit's, curl's,
Cypher's) run their commands in this document order. docs/getting-started.md is run as one bash script.

Run for real (on fresh embedded Kafka clusters holding the README's topic
`orders` literally; each test gets its own cluster because librdkafka's mock
cluster does not act on LeaveGroup, so a second `mgstreams_orders` group member
would wait ~45 s for the first one's session to expire), against real stream
hosts (`mgstreams serve` child processes, tests/support/host_helpers.py):

- `mgstreams serve ...`: the installed console script, each `[--optional]` group
  both left out and given, with DIR, /var/lib/mgstreams and FILE as temporary
  paths, HOST:PORT as 127.0.0.1:0, URI a cypherl file; $MGSTREAMS_STATE_DIR (the
  documented default) points at a temporary directory. The default listen
  address is kept when 127.0.0.1:8765 is free, else `--listen 127.0.0.1:0` is
  added (another program on this shared machine may hold the port). Each host
  must answer /health (with or without its token; /streams is 401 without), honour `--default-sink`,
  and exit 0 on SIGTERM.
- `mgstreams ...` (the operator CLI): through click's CliRunner with
  $MGSTREAMS_URL set to a host holding the README's `orders` stream (created
  through the API); `--watch` gets `--count 1` so it ends; `--url http://db1:8765`
  names the test host while $MGSTREAMS_URL names a closed port. `mgstreams kafka`
  runs the installed entry point and is stopped with SIGTERM.
- `curl ...`: run by bash with the README's `export MGSTREAMS_URL=...` adapted to
  a host's URL, `localhost:9092` to the embedded cluster, $MGSTREAMS_STATE_DIR set
  to the host's state directory as the page says (its paths run as written), and
  `-w '\\n%{http_code}'` appended to read the status; each
  must exit 0 with the documented status and JSON. The bearer-token line runs
  against a host started with the token that the README's
  `export MGSTREAMS_TOKEN=$(openssl rand -hex 24)` line made in bash.
- `mgstreams backfill ...`: as written, in a working directory of its own (its
  `$PWD`), with getting started's `$KAFKA_BOOTSTRAP_SERVERS` (the embedded
  cluster) and `$MGSTREAMS_STATE_DIR` expanded as bash does; the two that run
  go through Spark (the shared local session). One change: the Bolt sink of the
  `--topics` line is a cypherl directory, as there is no Memgraph here (a refused
  Bolt connection is retried 5 times with backoff, ~40 s with Spark, before the
  one-line error).
- ```cypher```: `CALL streams.*` and `CALL mg.*` statements through the `_mgp`
  test backend (tests/support/mgp_backend) loading query_modules/streams.py, pointed at
  a real host ($MGSTREAMS_URL), with `kafka:29092` adapted and the default sink
  ($MGSTREAMS_DEFAULT_SINK, read when the module is imported) a cypherl file: the
  statements it holds are what `MATCH (m:KafkaMessage)` would find.
- ```python```: exec'ed with the bootstrap servers (and `spark`, the shared
  session) adapted; the Python API block's paths run as written.
- `zip -r ...`: run for real into a temporary directory.

Checked statically, because this machine has no Docker engine, no Memgraph,
no `mgconsole`, no root and no Spark cluster: `docker compose ...` (services,
profile, build sections, the pinned `apache/kafka` image whose scripts live in
/opt/kafka/bin, the host service the in-container CLI talks to),
`sudo cp query_modules/streams.py ...` (the file exists and imports only the
standard library and `mgp`: it is imported by a Python without site-packages),
`export MGSTREAMS_URL=...` (the host's default address; the curl lines use it),
`mgconsole < demo-out/...` (the demo writes those files; tests/spark/test_demo_e2e.py
runs the demo), `make demo` / `make test` (the Makefile targets; not run here:
test_demo_e2e.py runs the demo, and `make test` is this suite),
`spark-submit ... mgstreams/backfill_main.py ARGS` (the script runs with the same
ARGS, expanded as above in the repository, plus `--dry-run`, which plans against
the cluster without Spark),
`export PYSPARK_PYTHON=...`, and `.venv/bin/python bench/*.py` (exist, `--help`
exits 0; tests/host/test_bench_smoke.py runs benches small).
"""
from __future__ import annotations

import ast
import json
import os
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx
import pytest
from cli_helpers import console_script, invoke
from configs import MERGE as MERGE_MESSAGES
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from host_helpers import HostProcess
from kafka_records import commit_as
from mgclient_standin import mgclient as standin
from paths import ROOT, nav_pages
from ports import free_port
from stream_helpers import statement_lines, wait_until

from mgstreams.cli import cli
from mgstreams.embedded_kafka import EmbeddedKafka
from mgstreams.settings import DEFAULT_LISTEN, DEFAULT_URL
from stream_registry import StreamConfig, StreamRegistry
from stream_registry.errors import StreamStateError

README = ROOT / "README.md"
DOCS = ROOT / "docs"
GETTING_STARTED = DOCS / "getting-started.md"
PER_PARTITION = 1300          # > 1200: the README's `{"orders:0": 1200}` examples start inside the log
PARTITIONS = 3                # the README creates `orders` with 3 partitions


# -- parsing the README and the documentation site ------------------------------------------
# A page whose commands a test of its own runs (its own scenario, cluster or host) says so on a line of its own:
# `<!-- commands: tests/host/test_x.py -->`; that test must name the page. Its blocks are left out here.
OWN_TEST = re.compile(r"^<!-- commands: (tests/[\w/]+\.py) -->$", re.M)


def all_pages() -> list[Path]:
    """README.md, the nav's pages in order, then every other page under docs/ (sorted)."""
    import yaml

    listed = [DOCS / page for page in nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])]
    others = sorted(path for path in DOCS.rglob("*.md") if path not in listed)
    return [README, *listed, *others]


def pages() -> list[Path]:
    """all_pages() but those whose commands a test of their own runs (OWN_TEST)."""
    return [path for path in all_pages() if not OWN_TEST.search(path.read_text())]


def test_a_page_with_a_test_of_its_own_is_named_by_that_test():
    for path in all_pages():
        for test in OWN_TEST.findall(path.read_text()):
            assert (ROOT / test).is_file(), f"{path.relative_to(ROOT)}: {test} does not exist"
            assert str(path.relative_to(ROOT)) in (ROOT / test).read_text(), \
                f"{test} does not name {path.relative_to(ROOT)}, whose commands it is said to run"


def all_text() -> str:
    return "\n".join(path.read_text() for path in all_pages())


def fenced(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M)]


def code_blocks() -> list[tuple[str, str]]:
    return [block for path in pages() for block in fenced(path.read_text())]


def getting_started_blocks() -> list[str]:
    """The ```bash blocks of the getting-started page: run as one script each (test_getting_started_...)."""
    return [text for lang, text in fenced(GETTING_STARTED.read_text()) if lang == "bash"]


def shell_commands() -> list[str]:
    """Commands of ```bash blocks (but getting started's): continuation lines joined, comments and blank lines
    dropped."""
    commands = []
    started = getting_started_blocks()
    for lang, text in code_blocks():
        if lang != "bash" or text in started:
            continue
        text = re.sub(r"\\\n\s*", " ", text)
        for line in text.splitlines():
            command = " ".join(_strip_comment(line).split())
            if command:
                commands.append(command)
    return commands


def _strip_comment(line: str) -> str:
    quote, out = None, []
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            break
        out.append(char)
    return "".join(out).strip()


def cypher_statements() -> list[str]:
    statements = []
    for lang, text in code_blocks():
        if lang != "cypher":
            continue
        text = "\n".join(line for line in text.splitlines() if not line.strip().startswith("//"))
        statements += [" ".join(s.split()) for s in _split_outside_quotes(text, ";") if s.strip()]
    return statements


def python_blocks() -> list[str]:
    return [text for lang, text in code_blocks() if lang == "python"]


def _split_outside_quotes(text: str, sep: str) -> list[str]:
    parts, current, quote = [], [], None
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"`":
            quote = char
        elif char == sep:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


# -- rules: every command is claimed by exactly one ---------------------------------------
# The operator toolkit's walk-through (its own section, run in order by bash: it redirects into a file).
TOOLKIT = r"check |offsets |revert |pending |set-offset \S+ (?:-P|'\{\"group\"|--from-file)"
SHELL_RULES = {
    "make": r"^(KAFKA_BOOTSTRAP_SERVERS=\S+ )?make (demo|test|test-unit|test-tansu|lint)$",
    "mgconsole": r"^(cat \S+ \| |docker compose exec -T memgraph )?mgconsole"
                 r"( --username \S+ --password \"\$MEMGRAPH_PASSWORD\")?( --import-mode=batched-parallel)? "
                 r"< demo-out/\S+\.cypherl$|^cat demo-out/\S+ \| mgconsole --import-mode=batched-parallel$",
    "docker": r"^docker compose (?!exec -T memgraph mgconsole )",
    "serve": r"^mgstreams serve( |$)",
    "backfill": r"^mgstreams backfill ",
    "mgstreams": r"^mgstreams (?!backfill |serve( |$))(?!" + TOOLKIT + ")",
    "toolkit": "^mgstreams (?:" + TOOLKIT + ")",
    "curl": r"^curl ",
    "export-token": r"^export MGSTREAMS_TOKEN=\$\(openssl rand -hex 24\)$",
    "export-password": r"^export MEMGRAPH_PASSWORD=\$\(openssl rand -hex 24\)$",
    "export-url": r"^export MGSTREAMS_URL=http://[\w.-]+:\d+$",
    "install-module": r"^sudo cp query_modules/streams\.py /\S+/$",
    "export": r"^export PYSPARK_PYTHON=\$\(pwd\)/\.venv/bin/python$",
    "spark-submit": r"^spark-submit ",
    "zip": r"^zip -r \S+\.zip( \S+)+$",
    "bench": r"^\.venv/bin/python bench/\w+\.py( --[\w-]+ \S+)*$",
    "soak": r"^\.venv/bin/python -m bench\.soak( --[\w-]+ \S+)*$",
}
CYPHER_RULES = {
    "streams": r"^CALL streams\.\w+\(",
    "mg": r"^CALL mg\.(load_all|procedures)\(\)",
    "graph": r"^(CREATE INDEX ON|MATCH) ",   # graph queries: no Cypher engine here (see test_cypher_block)
}
PYTHON_RULES = {
    "kafka_source": "from spark_bridge.kafka_source import register",
    "python_api": "from stream_registry import StreamRegistry, StreamConfig",
}


def shell(kind: str) -> list[str]:
    return [c for c in shell_commands() if re.search(SHELL_RULES[kind], c)]


def test_every_readme_command_has_a_rule():
    unclaimed = [c for c in shell_commands() if sum(bool(re.search(r, c)) for r in SHELL_RULES.values()) != 1]
    unclaimed += [s for s in cypher_statements() if sum(bool(re.search(r, s)) for r in CYPHER_RULES.values()) != 1]
    unclaimed += [b for b in python_blocks() if sum(marker in b for marker in PYTHON_RULES.values()) != 1]
    assert not unclaimed, f"documented commands no rule of {__name__} checks (add one): {unclaimed}"
    assert len(shell_commands()) >= 45 and len(cypher_statements()) >= 12 and len(python_blocks()) == 2, \
        "the documentation parser lost commands"
    assert all(shell(kind) for kind in SHELL_RULES), [kind for kind in SHELL_RULES if not shell(kind)]


# -- an embedded cluster with the README's topics, hosts ------------------------------------
def transfer(i: int) -> bytes:
    """Demo-shaped payloads: `transfers.transfer` (the Python API example's transform) can read them."""
    return json.dumps({"transfer_id": f"t{i}", "from": f"acc{i % 7}", "to": f"acc{(i + 3) % 7}",
                       "amount": 10 + i % 90, "currency": "EUR", "ts": "2026-01-01T00:00:00Z"}).encode()


@pytest.fixture
def cluster():
    with EmbeddedKafka(brokers=3, initial_rebalance_delay_ms=200) as kafka:
        kafka.create_topic("orders", PARTITIONS, 3)
        kafka.create_topic("refunds", PARTITIONS, 3)
        producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 5})
        for i in range(PER_PARTITION * PARTITIONS):
            producer.produce("orders", value=transfer(i), partition=i % PARTITIONS)
        assert producer.flush(30) == 0
        del producer
        yield kafka


@pytest.fixture(autouse=True)
def no_outer_token(monkeypatch):
    """Hosts and clients here get a token only where a test gives one."""
    monkeypatch.delenv("MGSTREAMS_TOKEN", raising=False)


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    """A state directory; also $MGSTREAMS_STATE_DIR, the README's default for `--state-dir`."""
    directory = tmp_path / "state"
    monkeypatch.setenv("MGSTREAMS_STATE_DIR", str(directory))
    return directory


@pytest.fixture
def orders_host(cluster, tmp_path):
    """A host (its own state directory) on the cluster; stopped with SIGTERM after the test."""
    process = HostProcess(tmp_path / "host-state", generated_token=True).start()   # as `mgstreams serve` runs
    yield process
    process.stop()


def caught_up(host: HostProcess, name: str = "orders") -> bool:
    with host.client() as client:
        return all(r.committed_offset == r.log_end_offset for r in client.describe(name))


def run_cli(args: list[str]):
    result = invoke(*args)
    assert result.exit_code == 0, f"mgstreams {shlex.join(args)}: exit {result.exit_code}: {result.stderr}"
    return result


def variants(command: str) -> list[str]:
    """`[--optional]` groups all left out, and all given (brackets dropped); `A | B` in a comment is
    documentation of SPEC, not a command."""
    without = re.sub(r"\s*\[[^\[\]]*\]", "", command)
    with_all = re.sub(r"\[([^\[\]]*)\]", r"\1", command)
    return [without] if without == with_all else [without, with_all]


# -- mgstreams serve -------------------------------------------------------------------------
def port_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as the host binds
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def read_line(process: subprocess.Popen, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.1)
        if ready:
            return process.stdout.readline().decode()
        if process.poll() is not None:
            return ""
    return ""


DEFAULT_HOST, DEFAULT_PORT = DEFAULT_LISTEN.rsplit(":", 1)


def start_serve(args: list[str], env: dict, work: Path) -> tuple[subprocess.Popen, str, list[str], Path]:
    """The installed `mgstreams` with `args`; returns the process, its ready line, the args it got, its log."""
    for attempt in range(2):
        if "--listen" not in args and (attempt or not port_free(DEFAULT_HOST, int(DEFAULT_PORT))):
            args = [*args, "--listen", "127.0.0.1:0"]   # the default port is taken on this shared machine
        log = work / f"serve-{attempt}.log"
        with open(log, "wb") as stderr:
            process = subprocess.Popen([console_script(), *args], stdout=subprocess.PIPE, stderr=stderr, env=env,
                                       cwd=work)
        line = read_line(process, 30)
        if line:
            return process, line, args, log
        code = process.wait(30) if process.poll() is None else process.returncode
        process.stdout.close()
        if "--listen" in args or code != 1 or "cannot bind" not in log.read_text():
            raise AssertionError(f"mgstreams {shlex.join(args)}: exit {code} before serving: {log.read_text()}")
        # someone took the default port between the probe and the bind: once more on a free port
    raise AssertionError("unreachable")


def test_mgstreams_serve_commands(tmp_path, kafka):
    """Each `mgstreams serve` line serves (/health), honours its options and exits 0 on SIGTERM."""
    commands = shell("serve")
    assert len(commands) == 2
    topic = kafka.new_topic(partitions=1)
    ran = []
    for command in commands:
        for variant in variants(command):
            work = tmp_path / f"serve{len(ran)}"
            work.mkdir()
            token = f"token-{len(ran)}-{os.getpid()}"
            (work / "token").write_text(token + "\n")
            (work / "token").chmod(0o600)        # a token file others can read is refused
            default_sink = work / "default.cypherl"
            placeholders = {"/var/lib/mgstreams": str(work / "var-lib-mgstreams"), "DIR": str(work / "state"),
                            "HOST:PORT": "127.0.0.1:0", "FILE": str(work / "token"),
                            "URI": f"cypherl://{default_sink}", "S": "7"}
            args = [placeholders.get(a, a) for a in shlex.split(variant)[1:]]
            assert args[0] == "serve" and not set(args) & {"DIR", "HOST:PORT", "FILE", "URI", "S"}, args
            env = {**os.environ, "MGSTREAMS_STATE_DIR": str(work / "env-state")}   # the documented default
            env.pop("MGSTREAMS_DEFAULT_SINK", None)
            state = Path(args[args.index("--state-dir") + 1]) if "--state-dir" in args \
                else Path(env["MGSTREAMS_STATE_DIR"])
            process, line, args, log = start_serve(args, env, work)
            try:
                match = re.search(r"serving at (http://\S+) \(state: (.+?), \d+ stream", line)
                assert match, f"mgstreams {shlex.join(args)}: {line!r}"
                url = match.group(1)
                assert Path(match.group(2)) == state.resolve() and state.is_dir(), line
                if "--listen" not in args:
                    assert url == DEFAULT_URL
                if "--token-file" not in args:     # given none, the host made one in its state directory
                    assert f"token in {state.resolve() / 'api-token'}" in line, line
                    token = (state / "api-token").read_text().strip()
                headers = {"Authorization": f"Bearer {token}"}
                with httpx.Client(base_url=url, headers=headers, timeout=30) as api:
                    health = api.get("/health")
                    assert (health.status_code, health.json()["status"]) == (200, "healthy"), health.text
                    assert httpx.get(f"{url}/health", timeout=30).status_code == 200   # a probe needs no token
                    assert httpx.get(f"{url}/streams", timeout=30).status_code == 401
                    if "--default-sink" in args:
                        created = api.post("/streams", json={"name": "orders", "topics": [topic],
                                                             "bootstrap_servers": kafka.bootstrap_servers})
                        assert created.status_code == 201, created.text
                        assert created.json()["sink"] == f"cypherl://{default_sink}"
                process.send_signal(signal.SIGTERM)
                assert process.wait(timeout=30) == 0, log.read_text()
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
                process.stdout.close()
            ran.append(variant)
    assert "mgstreams serve" in ran and any("--token-file" in v and "--default-sink" in v for v in ran), ran


# -- mgstreams (the operator CLI) -------------------------------------------------------------
def test_mgstreams_cli_commands(cluster, orders_host, tmp_path, monkeypatch):
    out = tmp_path / "orders.cypherl"
    with orders_host.client() as client:
        client.create(name="orders", topics=["orders"], bootstrap_servers=cluster.bootstrap_servers,
                      transform=MERGE_MESSAGES, sink=f"cypherl://{out}", batch_interval_ms=20)
    monkeypatch.setenv("MGSTREAMS_URL", orders_host.url)
    monkeypatch.setenv("MGSTREAMS_TOKEN_FILE", str(orders_host.state_dir / "api-token"))
    commands = [c for c in shell("mgstreams") if not c.startswith("mgstreams kafka ")]
    assert commands, "the README documents the operator CLI"
    ran = []
    for command in commands:
        for variant in variants(command):
            args = shlex.split(variant)[1:]
            if "--watch" in args and "--count" not in args:
                args += ["--count", "1"]                       # --watch refreshes until Ctrl-C otherwise
            if args[0] == "--url":
                assert args[1] == "http://db1:8765", variant
                args[1] = orders_host.url
                # Only --url can reach the host: $MGSTREAMS_URL names a closed port.
                monkeypatch.setenv("MGSTREAMS_URL", f"http://127.0.0.1:{free_port()}")
            result = run_cli(args)
            ran.append(variant)
            if "--json" in args:
                documents = [json.loads(line) for line in result.stdout.splitlines()]
                assert len(documents) == 1, result.stdout
            rows = [line.split() for line in result.stdout.splitlines()[1:]]
            if args[:3] == ["set-offset", "orders", "earliest"]:
                assert [r[:2] + r[3:5] for r in rows] == [["orders", str(p), "0", "planned"]
                                                         for p in range(PARTITIONS)], result.stdout
            if args[:3] == ["set-offset", "orders", '{"orders:0": 42}']:
                assert [r[:5] for r in rows] == [["orders", "0", "-", "42", "pending"]], result.stdout  # stopped
            if args[:2] == ["history", "orders"] and "--json" in args:
                assert json.loads(result.stdout) == []         # a pending change is history once applied
            if args[:2] == ["start", "orders"]:
                assert result.stdout.strip() in ("orders starting", "orders running"), result.stdout
                wait_until(lambda: caught_up(orders_host), 60, 0.1, "the stream to commit every message")
            if args[:2] == ["stop", "orders"]:
                assert result.stdout.strip() == "orders stopped", result.stdout
            if args[:2] == ["alter", "orders"]:
                assert result.stdout.strip() == "orders altered (stopped)", result.stdout
                [listed] = json.loads(run_cli(["list", "--json"]).stdout)
                assert (listed["batch_size"], listed["configs"]) == (500, {"fetch.wait.max.ms": "50"}), listed
            if args[:2] == ["drop", "orders"]:
                assert result.stdout.strip() == "orders dropped", result.stdout
            if args[0] == "--url":
                assert result.stdout.split()[:2] == ["NAME", "STATUS"] and "orders" not in result.stdout
    assert ran[-1] == "mgstreams --url http://db1:8765 list", ran
    # `start` applied the pending change at assignment: partition 0 from 42, the others from the beginning.
    assert len(statement_lines(out)) == PARTITIONS * PER_PARTITION - 42
    monkeypatch.setenv("MGSTREAMS_URL", orders_host.url)
    monkeypatch.setenv("MGSTREAMS_TOKEN_FILE", str(orders_host.state_dir / "api-token"))
    assert json.loads(run_cli(["list", "--json"]).stdout) == []   # `drop orders` ran


def test_operator_toolkit_commands(cluster, orders_host, tmp_path):
    """The Operator toolkit block in order, each line by bash with the installed console script (one redirects
    into a file), against a host whose `orders` stream has caught up; the group `orders_backup` has commits."""
    out = tmp_path / "orders.cypherl"
    with orders_host.client() as client:
        client.create(name="orders", topics=["orders"], bootstrap_servers=cluster.bootstrap_servers,
                      transform=MERGE_MESSAGES, sink=f"cypherl://{out}", batch_interval_ms=20)
        client.start("orders")
    wait_until(lambda: caught_up(orders_host), 60, 0.1, "the stream to commit every message")
    backup = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "orders_backup"})
    backup.commit(offsets=[TopicPartition("orders", 0, 7), TopicPartition("orders", 1, 8)], asynchronous=False)
    backup.close()
    work = tmp_path / "work"
    work.mkdir()
    # `mgstreams` as this checkout's entry point (`python -m mgstreams`), whatever the installed script points at
    env = {**os.environ, "MGSTREAMS_URL": orders_host.url, "PYTHONPATH": str(ROOT),
           "MGSTREAMS_TOKEN_FILE": str(orders_host.state_dir / "api-token")}
    entry = f'mgstreams() {{ {shlex.quote(sys.executable)} -m mgstreams "$@"; }}\n'
    commands = shell("toolkit")
    assert len(commands) >= 8
    for command in commands:
        done = subprocess.run(["bash", "-c", entry + command], capture_output=True, text=True, timeout=60, env=env,
                              cwd=work)
        assert done.returncode == 0, f"{command}: exit {done.returncode}: {done.stderr}"
        args = shlex.split(command.split(" > ")[0])[1:]
        rows = [line.split() for line in done.stdout.splitlines()[1:]]
        if args[:3] == ["check", "orders", '{"orders:0": 42}']:
            assert [r[:3] for r in rows] == [["orders", "0", str(o)] for o in (42, 43, 44)], done.stdout
        elif args[:3] == ["check", "orders", "-PT15M"]:   # every record is newer: 10 from the beginning each
            assert sorted((r["partition"], r["offset"]) for r in json.loads(done.stdout)) == \
                [(p, o) for p in range(PARTITIONS) for o in range(10)]
        elif args[:2] == ["offsets", "export"]:
            assert (work / "orders-offsets.csv").read_text() == \
                "".join(f"orders,{p},{PER_PARTITION}\n" for p in range(PARTITIONS))
        elif args[:3] == ["set-offset", "orders", "-PT15M"]:
            assert [r[:5] for r in rows] == [["orders", str(p), str(PER_PARTITION), "0", "applied"]
                                             for p in range(PARTITIONS)], done.stdout
        elif args[:2] == ["set-offset", "orders"] and "group" in args[2]:
            assert [r[:5] for r in rows] == [["orders", "0", str(PER_PARTITION), "7", "planned"],
                                             ["orders", "1", str(PER_PARTITION), "8", "planned"],
                                             ["orders", "2", str(PER_PARTITION), str(PER_PARTITION), "unchanged"]]
        elif args[:2] == ["revert", "orders"] and "--dry-run" in args:   # one partition of the change
            assert [r[:2] + r[3:5] for r in rows] == [["orders", "0", str(PER_PARTITION), "planned"]], done.stdout
        elif args[:2] == ["revert", "orders"]:
            # every partition of change 1 (one call) back to 1300, where -PT15M found it (from wherever its
            # replay from 0 has got to meanwhile)
            assert [r[:2] + r[3:5] for r in rows] == [["orders", str(p), str(PER_PARTITION), "applied"]
                                                      for p in range(PARTITIONS)], done.stdout
            assert all(line.rstrip().endswith("revert of change 1") for line in done.stdout.splitlines()[1:])
        elif "--from-file" in args:
            assert [(r[1], r[3], r[4]) for r in rows] == [(str(p), str(PER_PARTITION), "planned")
                                                          for p in range(PARTITIONS)], done.stdout
        elif args[:2] == ["pending", "orders"]:
            assert rows == [] and done.stdout.split() == ["TOPIC", "PARTITION", "OFFSET", "PREVIOUS-OFFSET",
                                                          "REQUESTED-AT", "MESSAGE"]
            assert done.stderr == ("cancelled 0 pending offset(s)\n" if "--cancel" in args else "")
        else:
            raise AssertionError(f"no check for {command}")
    with orders_host.client() as client:
        assert sorted((h.partition, h.offset, h.message) for h in client.history("orders")[:PARTITIONS]) == \
            [(p, PER_PARTITION, "revert of change 1") for p in range(PARTITIONS)]


@pytest.mark.parametrize("engine", ["embedded", "tansu"])
def test_mgstreams_kafka_runs_until_sigterm(engine):
    [command] = [c for c in shell("mgstreams") if c.startswith("mgstreams kafka ")
                 and ("--engine tansu" in c) == (engine == "tansu")]
    process = subprocess.Popen([console_script(), *shlex.split(command)[1:]], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        bootstrap = process.stdout.readline().strip()
        metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
        words = shlex.split(command)
        brokers = int(words[words.index("--brokers") + 1]) if "--brokers" in words else 1
        topic, partitions = shlex.split(command)[shlex.split(command).index("--partitions-topic") + 1].split(":")
        assert len(metadata.brokers) == brokers and len(metadata.topics[topic].partitions) == int(partitions)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# -- curl and the exports ---------------------------------------------------------------------
def curl(command: str, url: str, env: dict | None = None) -> tuple[int, str]:
    """A README curl line in bash, after the README's `export MGSTREAMS_URL=...` with the URL adapted;
    `-w` appends the HTTP status on a line of its own. Returns (status, body)."""
    [export] = shell("export-url")
    script = f"{export.split('=', 1)[0]}={shlex.quote(url)}\n{command} -w '\\n%{{http_code}}'"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, f"{command}: exit {done.returncode}: {done.stderr}"
    body, _, status = done.stdout.rpartition("\n")
    return int(status), body


def route(command: str) -> tuple[str, str, dict]:
    """(method, path, JSON body) of a curl line."""
    method = re.search(r" -X (\w+)", command)
    path = re.search(r"\$MGSTREAMS_URL(/[^\s\"']*)", command).group(1)
    data = re.search(r" -d '(.*)'", command)   # a `'"$VAR"'` inside is the shell's: read as "VAR"
    body = json.loads(re.sub(r"""'"\$(\w+)"'""", r"\1", data.group(1))) if data else {}
    return method.group(1) if method else "GET", path.split("?")[0], body


def test_curl_commands(cluster, orders_host, tmp_path):
    """The API walkthrough in README order, each line by curl, each answer as documented. Paths run as written:
    $MGSTREAMS_STATE_DIR names the host's state directory, as the page says; only the Kafka address is the test
    cluster's (a fixed port on a shared machine)."""
    out = orders_host.state_dir / "output" / "orders.cypherl"
    commands = [c for c in shell("curl") if "Authorization" not in c]
    seen = []
    for command in commands:
        adapted = command.replace("localhost:9092", cluster.bootstrap_servers)
        assert "localhost" not in adapted, adapted
        method, path, body = route(command)
        status, text = curl(adapted, orders_host.url, {"MGSTREAMS_TOKEN": orders_host.token,
                                                       "MGSTREAMS_STATE_DIR": str(orders_host.state_dir)})
        answer = json.loads(text) if path != "/metrics" else text
        seen.append((method, path))
        assert status == (201 if (method, path) == ("POST", "/streams") else 200), (command, status, text)
        if path.endswith("/start"):   # as a user would: later changes then know where each partition stood
            wait_until(lambda: caught_up(orders_host), 60, 0.1, "the stream to catch up")
        if path == "/health":
            assert answer["status"] == "healthy", answer
        elif (method, path) == ("POST", "/streams"):
            assert {k: answer[k] for k in ("name", "topics", "bootstrap_servers", "sink", "status",
                                           "consumer_group", "transform")} == {
                "name": "orders", "topics": ["orders"], "bootstrap_servers": cluster.bootstrap_servers,
                "sink": f"cypherl://{out}", "status": "created", "consumer_group": "mgstreams_orders",
                "transform": MERGE_MESSAGES}, answer
        elif path == "/streams/orders/check":
            assert [(r["topic"], r["partition"], r["offset"]) for r in answer] == [("orders", 0, o) for o in (42, 43, 44)]
            assert all(r["query"].startswith("MERGE (m:KafkaMessage") for r in answer), answer
        elif path == "/streams/orders/history/1/revert":
            # change 1: every partition from 1300 (caught up) to 0 in one call; all back to 1300, from wherever
            # their replay has got to
            assert [(r["partition"], r["offset"], r["status"], r["message"]) for r in answer] == \
                [(p, PER_PARTITION, "applied", "revert of change 1") for p in range(PARTITIONS)], answer
        elif path == "/streams/orders/pending":
            assert answer == [], "a running stream holding every partition has nothing pending"
        elif (method, path) == ("PATCH", "/streams/orders"):
            assert (answer["status"], answer["batch_size"], answer["configs"]) == \
                ("stopped", 500, {"fetch.wait.max.ms": 50}), answer
        elif path.endswith(("/start", "/stop")) or method == "DELETE":
            assert answer["name"] == "orders", answer
            assert answer["status"] in ({"starting", "running"} if path.endswith("/start") else {"stopped"}), answer
        elif (method, path) == ("GET", "/streams/orders/offsets"):
            assert [(r["topic"], r["partition"], r["log_start_offset"], r["log_end_offset"]) for r in answer] == \
                [("orders", p, 0, PER_PARTITION) for p in range(PARTITIONS)], answer
            assert all({"committed_offset", "position", "lag", "assigned"} <= set(r) for r in answer), answer
        elif method == "PATCH" and body.get("dry_run"):
            assert [(r["topic"], r["partition"], r["offset"], r["status"]) for r in answer] == \
                [("orders", 0, 42, "planned")], answer
        elif method == "PATCH":
            assert [(r["partition"], r["offset"], r["status"]) for r in answer] == \
                [(p, 0, "applied") for p in range(PARTITIONS)], answer
        elif path == "/streams/orders/history":
            assert 1 <= len(answer) <= 5 and {(r["offset"], r["status"]) for r in answer} == {(0, "applied")}
            assert [r["changed_at"] for r in answer] == sorted((r["changed_at"] for r in answer), reverse=True)
        elif path == "/metrics":
            assert re.search(r'^mgstreams_stream_up\{stream="orders"\} 1(\.0)?$', answer, re.M), answer
            assert re.search(r'^mgstreams_stream_status\{status="running",stream="orders"\} 1', answer, re.M)
        else:
            raise AssertionError(f"no check for {method} {path}: {command}")
    assert set(seen) == {("GET", "/health"), ("POST", "/streams"), ("PUT", "/streams/orders/start"),
                         ("GET", "/streams/orders/offsets"), ("PATCH", "/streams/orders/offsets"),
                         ("GET", "/streams/orders/history"), ("GET", "/metrics"), ("PUT", "/streams/orders/stop"),
                         ("DELETE", "/streams/orders"), ("POST", "/streams/orders/check"),
                         ("POST", "/streams/orders/history/1/revert"), ("GET", "/streams/orders/pending"),
                         ("DELETE", "/streams/orders/pending"), ("PATCH", "/streams/orders")}, seen
    assert seen[-1] == ("DELETE", "/streams/orders")
    with orders_host.client() as client:
        assert client.list() == []
    assert out.read_text().count("KafkaMessage") >= PER_PARTITION   # the stream wrote through its sink


def test_export_token_then_curl_with_the_token(tmp_path):
    """The README's token line, run by bash; a host started with that token answers the bearer-token curl
    line (and refuses the same line with a wrong token)."""
    [export] = shell("export-token")
    done = subprocess.run(["bash", "-c", f'{export}\nprintf %s "$MGSTREAMS_TOKEN"'], capture_output=True,
                          text=True, timeout=30, check=True)
    token = done.stdout
    assert re.fullmatch(r"[0-9a-f]{48}", token), token
    [command] = [c for c in shell("curl") if "Authorization" in c]
    host = HostProcess(tmp_path / "token-state", token=token).start()
    try:
        assert curl(command, host.url, {"MGSTREAMS_TOKEN": token}) == (200, "[]")
        status, text = curl(command, host.url, {"MGSTREAMS_TOKEN": token[::-1]})
        assert status == 401 and json.loads(text)["error"].startswith("authorization:"), text
    finally:
        host.stop()


def test_export_memgraph_password_makes_a_password_compose_requires(compose):
    """The README's password line, run by bash, gives compose the MEMGRAPH_PASSWORD it refuses to start without."""
    [export] = shell("export-password")
    done = subprocess.run(["bash", "-c", f'{export}\nprintf %s "$MEMGRAPH_PASSWORD"'], capture_output=True,
                          text=True, timeout=30, check=True)
    assert re.fullmatch(r"[0-9a-f]{48}", done.stdout), done.stdout
    assert compose["services"]["memgraph"]["environment"]["MEMGRAPH_PASSWORD"].startswith("${MEMGRAPH_PASSWORD:?")


def test_export_url_is_the_hosts_default_address(compose):
    """`export MGSTREAMS_URL=...` names where `mgstreams serve` listens by default (test_mgstreams_serve_commands
    checks a default host serves there); the curl test runs it with the test host's URL."""
    [export] = shell("export-url")
    assert export.split("=", 1)[1] == DEFAULT_URL == f"http://{DEFAULT_LISTEN}"
    assert all("$MGSTREAMS_URL/" in c for c in shell("curl"))
    assert re.search(r"^mgstreams serve --state-dir \S+\s+# 127\.0\.0\.1:8765;", all_text(), re.M)
    # compose refuses to start without the token; Memgraph reads it from the secret made of it
    assert compose["services"]["mgstreams"]["environment"]["MGSTREAMS_TOKEN"].startswith("${MGSTREAMS_TOKEN:?")
    assert compose["secrets"]["mgstreams_token"] == {"environment": "MGSTREAMS_TOKEN"}
    assert compose["services"]["memgraph"]["environment"]["MGSTREAMS_TOKEN_FILE"] == "/run/secrets/mgstreams_token"


def test_install_module_command_copies_one_self_contained_file(compose, tmp_path):
    """No root and no Memgraph here: the copied file exists, imports only the standard library and `mgp`, and
    imports in a Python without site-packages (with a stand-in `mgp`); the target is Memgraph's default query
    modules directory (the compose Memgraph lists it first)."""
    [command] = shell("install-module")
    _sudo, _cp, source, target = shlex.split(command)
    path = ROOT / source
    tree = ast.parse(path.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{source}: relative import of {node.module}"
            imported.add(node.module.split(".")[0])
    assert "mgp" in imported and imported - {"mgp"} <= sys.stdlib_module_names, imported
    assert not any(isinstance(n, ast.Name) and n.id == "__import__" for n in ast.walk(tree))
    stub = tmp_path / "mgp-stub"
    stub.mkdir()
    (stub / "mgp.py").write_text(
        "class _T:\n    def __getitem__(self, item): return self\n    def __call__(self, *a, **k): return self\n"
        "Record = List = Map = Any = Nullable = LocalDateTime = _T()\n"
        "def read_proc(f): return f\n")
    probe = (f"import sys; sys.path[:0] = [{str(stub)!r}, {str(path.parent)!r}]; import streams; "
             f"assert not [m for m in sys.modules if m.split('.')[0] in "
             f"('confluent_kafka', 'stream_registry', 'mgstreams', 'httpx')], sorted(sys.modules)")
    subprocess.run([sys.executable, "-I", "-S", "-c", probe], check=True, timeout=60, cwd=stub)
    directories = next(a for a in compose["services"]["memgraph"]["command"]
                       if a.startswith("--query-modules-directory="))
    assert target.rstrip("/") == directories.split("=", 1)[1].split(",")[0] == "/usr/lib/memgraph/query_modules"


# -- mgstreams backfill ---------------------------------------------------------------------
def as_the_shell_expands(command: str, environ: dict[str, str]) -> str:
    """The command's `$NAME` / `${NAME}` expanded from `environ` as bash would (an unset one fails the test)."""
    return re.sub(r"\$\{?(\w+)\}?", lambda m: environ[m[1]], command)


def backfill_environment(cluster, state_dir: Path, working_dir: Path) -> dict[str, str]:
    """What the pages' shell has: getting started's KAFKA_BOOTSTRAP_SERVERS and MGSTREAMS_STATE_DIR, and PWD."""
    return {"KAFKA_BOOTSTRAP_SERVERS": cluster.bootstrap_servers, "MGSTREAMS_STATE_DIR": str(state_dir),
            "PWD": str(working_dir)}


def without_memgraph(command: str, where: Path) -> str:
    """The one change: there is no Memgraph here, so a Bolt sink becomes a cypherl directory (see the module
    docstring); every path and every other host runs as written."""
    return command.replace("--sink bolt://memgraph:7687", f"--sink cypherl://{where / 'bolt-substitute'}")


@pytest.fixture
def stream_with_commits(cluster, state_dir, tmp_path):
    """Stream `orders` in the state directory (as a host leaves it), run until it committed everything, stopped:
    `--stream orders` reads its configuration there and `--until committed` has offsets."""
    registry = StreamRegistry(state_dir)
    try:
        registry.create(StreamConfig("orders", ["orders"], cluster.bootstrap_servers, MERGE_MESSAGES,
                                     f"cypherl://{tmp_path / 'live.cypherl'}", batch_interval_ms=20))
        registry.start("orders")
        wait_until(lambda: [r.committed_offset for r in registry.describe("orders")] == [PER_PARTITION] * PARTITIONS,
                   60, 0.1, "the stream to commit every message")
        registry.stop("orders")
        assert [r.committed_offset for r in registry.describe("orders")] == [PER_PARTITION] * PARTITIONS
    finally:
        registry.close()


def test_mgstreams_backfill_commands(cluster, state_dir, tmp_path, stream_with_commits, spark, monkeypatch):
    """The page's lines run as written in a working directory of their own (its `$PWD`, where `backfill.json`
    goes), with the variables getting started exports; only the Bolt sink is a cypherl directory here."""
    commit_as(cluster, "orders_live", {**{("orders", p): 20 for p in range(PARTITIONS)},
                                    **{("refunds", p): 0 for p in range(PARTITIONS)}})
    working = tmp_path / "working"
    working.mkdir()
    monkeypatch.chdir(working)
    environ = backfill_environment(cluster, state_dir, working)
    commands = shell("backfill")
    assert len(commands) == 3
    for command in commands:
        result = run_cli(shlex.split(without_memgraph(as_the_shell_expands(command, environ), tmp_path))[1:])
        if "--dry-run" in command:
            rows = [line.split() for line in result.stdout.splitlines()[1:]]
            assert ["orders", "0", "1200", str(PER_PARTITION), str(PER_PARTITION - 1200)] in rows, rows
            assert not (working / "backfill").exists() or "--dry-run" in command
        elif "--stream orders" in command:
            report = json.loads((working / "backfill.json").read_text())
            assert report["records"] == PER_PARTITION * PARTITIONS, report
            files = sorted((working / "backfill").glob("*.cypherl"))
            assert len(files) >= 8   # --min-partitions 8
            assert sum(len(statement_lines(f)) for f in files) == PER_PARTITION * PARTITIONS
        else:   # --topics orders,refunds --group orders_live, Bolt sink substituted
            files = sorted((tmp_path / "bolt-substitute").glob("*.cypherl"))
            assert {f.name.rsplit("-", 2)[0] for f in files} == {f"orders-{p}" for p in range(PARTITIONS)}
            text = "".join(f.read_text() for f in files)
            assert text.count("UNWIND") == PARTITIONS   # one batch of 20 per range (--batch-size 5000)


# -- spark-submit, zip, export ----------------------------------------------------------------
def test_spark_submit_commands_take_the_documented_arguments(cluster, state_dir, tmp_path, stream_with_commits):
    """No Spark cluster here: each `spark-submit [options] SCRIPT ARGS` runs `python SCRIPT ARGS --dry-run`
    (the plan, without Spark) as written, in the repository (its `$PWD`: `mgstreams/backfill_main.py`,
    `--modules-dir query_modules`); the master URLs are spark-submit's own."""
    commands = shell("spark-submit")
    assert commands
    environ = backfill_environment(cluster, state_dir, ROOT)
    for command in commands:
        tokens = shlex.split(without_memgraph(as_the_shell_expands(command, environ), tmp_path))
        script = next(t for t in tokens if t.endswith(".py"))
        assert script == "mgstreams/backfill_main.py" and (ROOT / script).is_file()
        options = tokens[1:tokens.index(script)]
        assert options[0] == "--master" and re.match(r"^(local\[\d+\]|spark://[\w.-]+:\d+)$", options[1])
        args = tokens[tokens.index(script) + 1:]
        done = subprocess.run([sys.executable, script, *args, "--dry-run"], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, f"{command}\n{done.stderr[-2000:]}"
        assert done.stdout.splitlines()[0].split() == ["TOPIC", "PARTITION", "FROM", "UNTIL", "OFFSETS"]
        if "--py-files" in options:
            assert options[options.index("--py-files") + 1] in " ".join(shell("zip"))


def test_zip_for_py_files_holds_importable_packages(tmp_path):
    [command] = shell("zip")
    tokens = shlex.split(command)
    archive = tmp_path / tokens[2]
    subprocess.run(["zip", "-q", "-r", str(archive), *tokens[3:]], cwd=ROOT, check=True)
    names = zipfile.ZipFile(archive).namelist()
    packages = ("mgstreams", "spark_bridge", "stream_registry")
    for package in packages:
        assert f"{package}/__init__.py" in names
    probe = (f"import sys; sys.path.insert(0, {str(archive)!r}); "
             f"import mgstreams.cli.backfill, spark_bridge.backfill, stream_registry; "
             f"bad = [m.__file__ for m in (mgstreams, spark_bridge, stream_registry) "
             f"if not m.__file__.startswith({str(archive)!r})]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, check=True, timeout=60)


def test_export_pyspark_python_names_the_venv_interpreter():
    [command] = shell("export")
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^VENV\s*\?=\s*\.venv$", makefile, re.M) and "$(BIN)/python" in makefile
    assert command.endswith("/.venv/bin/python")


# -- make, mgconsole, docker compose, benches: checked statically ----------------------------------
def make_targets() -> dict[str, str]:
    targets, current = {}, None
    for line in (ROOT / "Makefile").read_text().splitlines():
        match = re.match(r"^([\w.-]+):", line)
        if match:
            current = match.group(1)
            targets[current] = line
        elif current and line.startswith("\t"):
            targets[current] += "\n" + line
    return targets


def test_make_commands():
    """Not run here: test_demo_e2e.py runs the demo's steps, and `make test` is this suite."""
    targets = make_targets()
    for command in shell("make"):
        target = command.split()[-1]
        assert target in targets, command
        stamp = "$(DEMO_STAMP)" if target == "demo" else "$(STAMP)"
        assert stamp in targets[target].splitlines()[0], "every command creates .venv and installs first"
        assert {"demo": "-m mgstreams.demo", "test": "-m pytest", "test-unit": "-m pytest tests/unit",
                "test-tansu": "MGSTREAMS_TEST_BROKER=tansu $(BIN)/python -m pytest",
                "lint": "$(BIN)/ruff check ."}[target] in targets[target]
        if target == "demo":   # only what the demo needs: the Spark extra and mgp, not the test extra
            text = (ROOT / "Makefile").read_text()
            recipe = text[text.index("$(DEMO_STAMP): pyproject.toml"):].split("\n\n")[0]
            assert "-e '.[spark]' 'mgp>=1.1'" in recipe and "[test]" not in recipe, recipe
        if command.startswith("KAFKA_BOOTSTRAP_SERVERS="):
            assert 'os.environ.get("KAFKA_BOOTSTRAP_SERVERS")' in (ROOT / "tests" / "conftest.py").read_text()


def test_demo_options_in_the_readme_parse():
    from mgstreams.demo import main

    line = re.search(r"`\.venv/bin/python -m mgstreams\.demo ([^`]+)`", all_text()).group(1)
    args = main.make_context("demo", shlex.split(re.sub(r"\[([^\[\]]*)\]", r"\1", line.replace("local[2]", "LOCAL2"))
                                                .replace("DIR", "d").replace(" N", " 5").replace("URI", "bolt://h:1")
                                                .replace("LOCAL2", "local[2]"))).params
    assert (args["out"], args["seed"], args["events"], args["master"], args["memgraph_uri"]) == \
        ("d", 5, 5, "local[2]", "bolt://h:1")


def test_mgconsole_commands_load_files_the_demo_writes(compose):
    """No mgconsole here; the files are the ones the demo writes (tests/spark/test_demo_e2e.py runs it). Into the
    compose Memgraph, which has a user and a password, as its own user (issue 35)."""
    demo = "".join(path.read_text() for path in (ROOT / "mgstreams" / "demo").glob("*.py"))
    user = re.fullmatch(r"\$\{MEMGRAPH_USER:-(\w+)\}", compose["services"]["memgraph"]["environment"]["MEMGRAPH_USER"])
    for command in shell("mgconsole"):
        if command.startswith("docker compose "):
            assert f'--username {user.group(1)} --password "$MEMGRAPH_PASSWORD"' in command, command
        path = re.search(r"demo-out/(\S+)", command).group(1)
        written = path.split("/")[0] if "/" in path else path
        assert f'"{written}"' in demo, f"{command}: the demo does not write {written}"
        assert 'default="demo-out"' in demo and "--out demo-out" in (ROOT / "Makefile").read_text()


def test_docker_compose_commands(compose):
    """No Docker engine here: each command's services, profile and paths are checked in the file, with the
    README prose's `docker compose exec mgstreams mgstreams ...` (the CLI in the host's container)."""
    services = compose["services"]
    kafka_image = services["kafka"]["image"]
    assert kafka_image.startswith("apache/kafka:"), "its scripts live in /opt/kafka/bin"
    inline = re.findall(r"`(docker compose exec mgstreams [^`]+)`", all_text())
    assert inline, "the README shows the CLI in the host's container"
    commands = shell("docker") + inline
    for command in commands:
        tokens = shlex.split(command.split("<")[0])[2:]
        if "--profile" in tokens:
            profile = tokens[tokens.index("--profile") + 1]
            assert any(profile in s.get("profiles", []) for s in services.values()), command
            tokens = tokens[tokens.index("--profile") + 2:]
        verb = tokens[0]
        if verb == "up":
            assert set(tokens[1:]) <= {"-d", "--build"}, command
            if "--build" in tokens:
                for service in ("mgstreams", "memgraph"):
                    assert (ROOT / services[service]["build"]["dockerfile"]).is_file(), service
        elif verb == "exec":
            rest = [t for t in tokens[1:] if t != "-T"]
            service, program = rest[0], rest[1]
            assert service in services, command
            if program.startswith("/opt/kafka/bin/"):
                assert service == "kafka" and program.endswith(".sh"), command
                assert "--bootstrap-server" in rest and rest[rest.index("--bootstrap-server") + 1] == \
                    "localhost:9092"
                assert "HOST://localhost:9092" in services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
            elif program == "mgstreams":
                # The CLI in the host's container: its default URL is where the host listens there, and it
                # sends the container's $MGSTREAMS_TOKEN.
                assert service == "mgstreams" and rest[2] in cli.commands, command
                host = services["mgstreams"]
                assert host["command"][:2] == ["mgstreams", "serve"], host["command"]
                listen = host["command"][host["command"].index("--listen") + 1]
                assert listen.rsplit(":", 1)[1] == DEFAULT_URL.rsplit(":", 1)[1], listen
                assert "MGSTREAMS_TOKEN" in host["environment"]
            else:
                assert program == "mgconsole" and service == "memgraph", command
        else:
            raise AssertionError(f"no check for `docker compose {verb}`: {command}")
    assert "kafka:29092" in services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"], \
        "the Cypher walkthrough's streams.create uses kafka:29092"
    memgraph_env = services["memgraph"]["environment"]
    assert memgraph_env["MGSTREAMS_URL"] == "http://mgstreams:8765", "Cypher reaches the host service"
    assert memgraph_env["MGSTREAMS_DEFAULT_SINK"] == "bolt://memgraph:7687", "as the README says"


def test_bench_commands_exist_and_answer_help():
    commands = shell("bench")
    assert len(commands) >= 8, commands   # each one exists and answers --help below
    for command in commands:
        script = command.split()[1]
        assert (ROOT / script).is_file(), command
        done = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, f"{command} --help: {done.stderr[-1000:]}"


def test_soak_commands_parse():
    """Not run here (tests/test_soak.py runs short soaks): the README's options are the soak's own."""
    from bench.soak.__main__ import build_parser

    commands = shell("soak")
    assert len(commands) == 2
    for command in commands:
        args = build_parser().parse_args(shlex.split(command)[3:])
        assert args.minutes == 2, command
    assert build_parser().parse_args(shlex.split(commands[1])[3:]).delivery == "exactly_once"


# -- python blocks ---------------------------------------------------------------------------
def test_python_api_example(cluster, monkeypatch):
    """Paths as written (the block makes its own state directory); only the Kafka address is the test cluster's.
    No MGSTREAMS_OUTPUT_DIRS (the suite's): the default allowed directory, as a reader's shell has."""
    monkeypatch.delenv("MGSTREAMS_OUTPUT_DIRS", raising=False)
    [block] = [b for b in python_blocks() if PYTHON_RULES["python_api"] in b]
    code = block.replace('"localhost:9092"', repr(cluster.bootstrap_servers))
    assert "localhost:9092" not in code
    # Keep the stream running a moment after set_offset so it delivers, then let the block stop it.
    namespace: dict = {}
    exec(compile(code.replace("reg.stop(", "__import__('time').sleep(1.5); reg.stop("), "README", "exec"),
         namespace)
    assert namespace["StreamRegistry"] is StreamRegistry and namespace["reg"] is not None
    state = Path(namespace["state"])
    out = state / "output" / "orders.cypherl"   # the page's sink, in the default allowed directory
    registry = StreamRegistry(state)   # the block closed its registry: the directory is free again
    try:
        assert {h.status.value for h in registry.history("orders")} == {"applied"}
        assert registry.get("orders").status.value == "stopped", registry.get("orders")
        with pytest.raises(StreamStateError, match="already"):   # "a second one ... raises StreamStateError"
            StreamRegistry(state)
    finally:
        registry.close()
    assert "TRANSFER" in out.read_text()
    shutil.rmtree(state)


def test_kafka_source_example(cluster, spark):
    [block] = [b for b in python_blocks() if PYTHON_RULES["kafka_source"] in b]
    code = block.replace('"kafka:9092"', repr(cluster.bootstrap_servers))
    assert code != block
    namespace = {"spark": spark}
    exec(compile(code, "README", "exec"), namespace)
    rows = namespace["df"].groupBy("partition").count().collect()
    # Spark's dialect: partition 0 from 1200, partition 1 from -2 = earliest, to latest.
    counts = {r["partition"]: r["count"] for r in rows}
    assert counts[0] == PER_PARTITION - 1200 and counts[1] == PER_PARTITION, counts


# -- cypher blocks -----------------------------------------------------------------------------
class _CypherLiteral:
    TOKEN = re.compile(r"""\s*(?:(?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|(?P<int>-?\d+)
                           |(?P<word>true|false|null)|(?P<key>`[^`]+`|[A-Za-z_]\w*)\s*:|(?P<punct>[\[\]{},]))""",
                       re.X | re.I)

    def __init__(self, text: str):
        self.tokens = [(m.lastgroup, m.group(m.lastgroup)) for m in self.TOKEN.finditer(text)]
        assert "".join(text.split()), text
        self.i = 0

    def values(self) -> list:
        out = []
        while self.i < len(self.tokens):
            out.append(self.value())
            if self.i < len(self.tokens):
                assert self.next() == ("punct", ","), self.tokens
        return out

    def next(self):
        token = self.tokens[self.i]
        self.i += 1
        return token

    def value(self):
        kind, text = self.next()
        if kind == "str":
            return json.loads('"' + text[1:-1].replace('\\"', '"').replace('"', '\\"') + '"')
        if kind == "int":
            return int(text)
        if kind == "word":
            return {"true": True, "false": False, "null": None}[text.lower()]
        if text == "[":
            return self._items("]", lambda: self.value(), [])
        if text == "{":
            return self._items("}", self._pair, {})
        raise AssertionError(f"unexpected {text!r}")

    def _pair(self):
        kind, key = self.next()
        assert kind == "key", key
        return key.strip("`"), self.value()

    def _items(self, close, item, into):
        while self.tokens[self.i] != ("punct", close):
            got = item()
            into.update([got]) if isinstance(into, dict) else into.append(got)
            if self.tokens[self.i] == ("punct", ","):
                self.i += 1
        self.i += 1
        return into


def parse_call(statement: str) -> tuple[str, list, list[str]]:
    match = re.match(r"^CALL (\w+\.\w+)\((.*?)\)(?: YIELD (.+?))?(?: WHERE .*?)?(?: RETURN .*)?$", statement)
    assert match, statement
    name, args, yielded = match.groups()
    return name, _CypherLiteral(args).values() if args.strip() else [], \
        [y.strip() for y in yielded.split(",")] if yielded else []


def test_cypher_literal_parser():
    assert parse_call('CALL streams.set_stream_offset("orders", {`orders:0`: 42, `orders:1`: "latest"}) '
                      "YIELD partition, offset RETURN *") == \
        ("streams.set_stream_offset", ["orders", {"orders:0": 42, "orders:1": "latest"}], ["partition", "offset"])
    assert parse_call("CALL s.p('a', ['b'], -1, true, 10000)")[1] == ["a", ["b"], -1, True, 10000]


@pytest.fixture
def memgraph(orders_host, tmp_path, monkeypatch):
    """The _mgp backend, its query modules directory holding query_modules/; the module is a client of a real
    host. MGSTREAMS_DEFAULT_SINK (Memgraph's environment in compose: Memgraph itself) is a cypherl file here:
    the host is another process, and it writes there. The module reads it when imported (`mg.load_all`)."""
    from mgp_backend import mgp_environment

    monkeypatch.setenv("MGSTREAMS_URL", orders_host.url)
    monkeypatch.setenv("MGSTREAMS_TOKEN_FILE", str(orders_host.state_dir / "api-token"))
    monkeypatch.setenv("MGSTREAMS_DEFAULT_SINK", f"cypherl://{tmp_path / 'memgraph.cypherl'}")
    with mgp_environment([ROOT / "query_modules"]) as server:
        server.host = orders_host
        server.default_sink = tmp_path / "memgraph.cypherl"
        yield server


def walkthrough_order(statements: list[str]) -> list[str]:
    """The walkthrough (from `streams.create` to `streams.drop`) in order; CALLs shown elsewhere (the intro's
    `set_stream_offset('orders', 42)`, the reference's `streams.lag`) run on its stream right after
    `streams.start`."""
    first = next(i for i, s in enumerate(statements) if s.startswith("CALL streams.create("))
    start = next(i for i, s in enumerate(statements) if s.startswith("CALL streams.start("))
    last = next(i for i, s in enumerate(statements) if i > first and s.startswith("CALL streams.drop("))
    walkthrough = [s for s in statements if s.startswith("CALL mg.")] + statements[first:last + 1]
    others = [s for s in statements if s not in walkthrough]
    at = walkthrough.index(statements[start]) + 1
    return walkthrough[:at] + others + walkthrough[at:]


MESSAGE_LINE = re.compile(r'MERGE \(m:KafkaMessage \{topic: "orders", partition: (\d+), offset: (\d+)\}\)')


def test_cypher_block(cluster, memgraph):
    """`CALL streams.*` and `CALL mg.*` run on the _mgp backend against the host. `CREATE INDEX` and `MATCH` are
    graph queries (no Cypher engine here): the default sink's statements show what `MATCH (m:KafkaMessage)`
    would find. Before `streams.stop` the test waits, as a user would, until the stream has caught up."""
    statements = walkthrough_order(cypher_statements())
    assert sorted(statements) == sorted(cypher_statements())
    called = []
    for statement in statements:
        if re.search(CYPHER_RULES["graph"], statement):
            continue
        # the compose Memgraph (no Memgraph here): the default sink's file instead, credentials and all
        compose_sink = '"bolt://memgraph:7687"'
        name, args, yielded = parse_call(statement.replace('"kafka:29092"', repr(cluster.bootstrap_servers))
                                         .replace(compose_sink, json.dumps(f"cypherl://{memgraph.default_sink}")))
        if name == "streams.create" and compose_sink in statement:   # logs in as compose's Memgraph user
            assert args[9]["bolt.username"] == "mgstreams" and args[9]["bolt.password"], args
        if name == "mg.load_all":
            memgraph.load_all()
            continue
        if name == "mg.procedures":
            names = sorted(r["name"] for r in memgraph.procedures() if r["name"].startswith("streams."))
            assert names == sorted(f"streams.{p}" for p in ("create", "alter", "start", "stop", "drop", "list",
                                                            "set_stream_offset", "offsets", "history", "lag",
                                                            "health", "revert", "pending", "check"))
            continue
        if name == "streams.stop":
            wait_until(lambda: caught_up(memgraph.host), 60, 0.1, "the stream to catch up")
        rows = memgraph.call(name, *args)
        if name == "streams.start":   # as a user would: later changes then know where each partition stood
            wait_until(lambda: caught_up(memgraph.host), 60, 0.1, "the stream to catch up")
        for row in rows:
            assert set(yielded) <= set(row), (statement, row)
        called.append((name, args, rows))
        if name == "streams.set_stream_offset":
            assert rows and all(r["status"] in ({"planned", "clamped"} if args[-1] is True else {"applied"})
                                for r in rows), (statement, rows)
            if args[1] == 42:
                assert {(r["partition"], r["offset"]) for r in rows} == {(p, 42) for p in range(PARTITIONS)}
            if isinstance(args[1], dict):
                got = {r["partition"]: r["offset"] for r in rows}
                assert got == {0: 42, 1: PER_PARTITION}, rows
        elif name in ("streams.create", "streams.start", "streams.stop", "streams.drop", "streams.alter"):
            assert rows == [{"name": "orders", "status": {"streams.create": "created", "streams.start": "running",
                                                          "streams.stop": "stopped", "streams.alter": "stopped",
                                                          "streams.drop": "stopped"}[name]}] or \
                (name == "streams.start" and rows[0]["status"] == "starting"), rows
        elif name == "streams.list":
            assert [(r["name"], r["topics"], r["consumer_group"], r["error"]) for r in rows] == \
                [("orders", ["orders"], "mgstreams_orders", None)], rows
        elif name in ("streams.offsets", "streams.history"):
            assert rows, statement
        elif name == "streams.check":
            assert [(r["topic"], r["partition"], r["offset"]) for r in rows] == [("orders", 0, o) for o in (42, 43, 44)]
            assert all(r["query"].startswith("MERGE (m:KafkaMessage") for r in rows), rows
        elif name == "streams.revert":
            changes = [h for h in memgraph.call("streams.history", "orders") if h["change_id"] == args[1]]
            assert sorted((r["partition"], r["offset"], r["status"], r["message"]) for r in rows) == \
                sorted((c["partition"], c["previous_offset"], "applied", f"revert of change {args[1]}")
                       for c in changes), rows
        elif name == "streams.pending":
            assert rows == [], "a running stream holding every partition has nothing pending"
    assert [c[0] for c in called][0] == "streams.create" and called[-1][0] == "streams.drop"
    assert memgraph.call("streams.list") == []
    # The stream (empty transform: one idempotent :KafkaMessage per message) wrote to the default sink: what
    # `MATCH (m:KafkaMessage)` finds. -1 replayed partition 2 from its start; partition 0 from 42 on.
    lines = statement_lines(memgraph.default_sink)
    assert lines and all(MESSAGE_LINE.match(line) for line in lines), lines[:3]
    found = {(int(m.group(1)), int(m.group(2))) for m in map(MESSAGE_LINE.match, lines)}
    assert {(2, o) for o in range(PER_PARTITION)} | {(0, o) for o in range(42, PER_PARTITION)} <= found


# -- getting started: the section's first block as one bash script, for real ------------------------------
def test_getting_started_block_runs_as_written(tmp_path):
    """The block as written, in bash, in an empty directory: embedded Kafka, a host, a topic with sample data, a
    stream into a cypherl file, describe, set-offset, check, lag; then the Bolt switch's create. Only the
    host's address is adapted when 127.0.0.1:8765 is taken on this shared machine. The background jobs are
    ended when the script exits."""
    first, bolt, own = getting_started_blocks()
    script = first
    url = DEFAULT_URL
    if not port_free(DEFAULT_HOST, int(DEFAULT_PORT)):
        port = free_port()
        script = script.replace("mgstreams serve >", f"mgstreams serve --listen 127.0.0.1:{port} >")
        url = f"http://127.0.0.1:{port}"
    assert script.count("mgstreams serve") == 1 and "mgstreams kafka > kafka.txt &" in script
    checks = f"""
{bolt}
{own}
for i in $(seq 300); do [ "$(cat mgstreams-state/output/payments.cypherl | wc -l)" -ge 700 ] && break; sleep 0.2; done
for i in $(seq 300); do [ "$(cat mgstreams-state/output/amounts.cypherl | wc -l)" -ge 1000 ] && break; sleep 0.2; done
mgstreams list --json > list.json
curl -sf "{url}/ui?token=$(cat mgstreams-state/api-token)" -o ui.html
"""
    # create checks a Bolt sink (connect, log in): the Bolt switch's Memgraph is the pymgclient stand-in here
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}",
           "MGSTREAMS_URL": url, "PYTHONPATH": os.pathsep.join(
               (standin.PYTHONPATH_ENTRY, *filter(None, [os.environ.get("PYTHONPATH")])))}
    for name in ("MGSTREAMS_STATE_DIR", "KAFKA_BOOTSTRAP_SERVERS", "MGSTREAMS_TOKEN"):
        env.pop(name, None)
    done = subprocess.run(["bash", "-e", "-c", "trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n" + script + checks],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    out = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\n{out[-3000:]}\n{done.stderr[-3000:]}"
    assert "topic transfers created (3 partition(s))" in out and "produced 1000 message(s) to transfers" in out
    assert re.search(r"^payments (starting|running)$", out, re.M), out
    described = [line.split() for line in out.splitlines() if line.startswith("mgstreams_payments ")]
    assert [row[1:3] for row in described] == [["transfers", str(p)] for p in range(3)], out
    moved = [line.split() for line in out.splitlines() if line.startswith("transfers ") and "applied" in line]
    assert [(r[1], r[3]) for r in moved] == [(str(p), "100") for p in range(3)], out
    previews = {tuple(line.split()[:3]) for line in out.splitlines() if re.match(r"transfers +\d +1[01] +\S", line)}
    assert previews == {("transfers", str(p), str(o)) for p in range(3) for o in (10, 11)}, out
    assert re.search(r"^stream payments (starting|running): [A-Z]+ ", out, re.M) and "payments_graph created" in out
    listed = {s["name"]: s for s in json.loads((tmp_path / "list.json").read_text())}
    assert listed["payments_graph"]["sink"] == "bolt://localhost:7687" and listed["payments"]["status"] == "running"
    statements = statement_lines(tmp_path / "mgstreams-state" / "output" / "payments.cypherl")
    assert len(statements) >= 700 and "payments" in (tmp_path / "ui.html").read_text()   # offsets 100 on
    assert len([line for line in statement_lines(tmp_path / "mgstreams-state" / "output" / "amounts.cypherl")
                if line.startswith("MERGE (t:Amount")]) >= 1000   # the reader's own transformation, no restart
    log = (tmp_path / "serve.log").read_text()   # the host's log went to the file the page names
    assert "stream payments: created" in log and "stream amounts: created" in log, log[-2000:]
    assert len(GETTING_STARTED.read_text().splitlines()) < 100
