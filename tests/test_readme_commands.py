"""Every command in README.md's fenced code blocks is run or checked here (issue 6).

The README is parsed, not copied: each command of a ```bash, ```cypher or
```python block is matched by one rule below, and a command no rule handles
fails `test_every_readme_command_has_a_rule`, so the README stays honest.

Run for real (on fresh embedded Kafka clusters holding the README's topic
`orders` literally; each test gets its own cluster because librdkafka's mock
cluster does not act on LeaveGroup, so a second `mgstreams_orders` group member
would wait ~45 s for the first one's session to expire):

- `mgstreams ...`: through click's CliRunner, each `[--optional]` group both
  left out and given; DIR is a temporary state directory (also given as
  $MGSTREAMS_STATE_DIR, the documented default), `--watch` gets `--count 1` so
  it ends, `start` gets a short `--duration`. `mgstreams kafka` runs the
  installed entry point in a subprocess and is stopped with SIGTERM.
- `mgstreams backfill ...`: the `--dry-run` line as written; the two others
  through Spark (the shared local session), with host names and paths adapted.
  The Bolt sink of the `--topics` line is replaced by a cypherl directory: there
  is no Memgraph here, and a refused Bolt connection is retried 5 times with
  backoff (~40 s with Spark) before the one-line error.
- ```cypher```: `CALL streams.*` and `CALL mg.*` statements through the `_mgp`
  test backend (tests/mgp_backend), with `kafka:29092` adapted and the default
  `bolt://localhost:7687` sink served by an in-memory recorder.
- ```python```: exec'ed with the bootstrap servers, paths (and `spark`, the
  shared session) adapted.
- `zip -r ...`: run for real into a temporary directory.

Checked statically, because this machine has no Docker engine, no Memgraph,
no `mgconsole` and no Spark cluster: `docker compose ...` (services, profile,
build section, the pinned `apache/kafka` image whose scripts live in
/opt/kafka/bin), `mgconsole < demo-out/...` (the demo writes those files;
tests/test_demo_e2e.py runs the demo), `make demo` / `make test` (the Makefile
targets; not run here: test_demo_e2e.py runs the demo, and `make test` is this
suite), `spark-submit ... spark_bridge/backfill_main.py ARGS` (the script runs
with the same ARGS plus `--dry-run`, which plans against the cluster without
Spark), `export PYSPARK_PYTHON=...`, and `.venv/bin/python bench/*.py` (exist,
`--help` exits 0; tests/test_bench_smoke.py runs benches small).
"""
from __future__ import annotations

import datetime
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from stream_registry import StreamConfig, StreamRegistry
from mgstreams.cli import _attach_optional_commands, cli
from mgstreams.embedded_kafka import EmbeddedKafka

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PER_PARTITION = 1300          # > 1200: the README's `{"orders:0": 1200}` examples start inside the log
PARTITIONS = 3                # the README creates `orders` with 3 partitions

_attach_optional_commands()   # `mgstreams backfill`, as the console script does


# -- parsing the README ----------------------------------------------------------------
def code_blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in
            re.finditer(r"^```(\w*)\n(.*?)^```", README.read_text(), flags=re.S | re.M)]


def shell_commands() -> list[str]:
    """Commands of ```bash blocks: continuation lines joined, comments and blank lines dropped."""
    commands = []
    for lang, text in code_blocks():
        if lang != "bash":
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
SHELL_RULES = {
    "make": r"^(KAFKA_BOOTSTRAP_SERVERS=\S+ )?make (demo|test)$",
    "mgconsole": r"^(cat \S+ \| |docker compose exec -T memgraph )?mgconsole( --import-mode=batched-parallel)? "
                 r"< demo-out/\S+\.cypherl$|^cat demo-out/\S+ \| mgconsole --import-mode=batched-parallel$",
    "docker": r"^docker compose (?!exec -T memgraph mgconsole <)",
    "backfill": r"^mgstreams backfill ",
    "mgstreams": r"^mgstreams (?!backfill )",
    "export": r"^export PYSPARK_PYTHON=\$\(pwd\)/\.venv/bin/python$",
    "spark-submit": r"^spark-submit ",
    "zip": r"^zip -r \S+\.zip( \S+)+$",
    "bench": r"^\.venv/bin/python bench/\w+\.py$",
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
    assert not unclaimed, f"README commands no rule of {__name__} checks (add one): {unclaimed}"
    assert len(shell_commands()) >= 25 and len(cypher_statements()) >= 12, "the README parser lost commands"


# -- an embedded cluster with the README's topics ------------------------------------------
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
        yield kafka


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    """The registry's state; also $MGSTREAMS_STATE_DIR, the README's default for DIR."""
    directory = tmp_path / "state"
    monkeypatch.setenv("MGSTREAMS_STATE_DIR", str(directory))
    return directory


def create_orders_stream(cluster, state_dir, out: Path) -> None:
    registry = StreamRegistry(state_dir, autostart=False)
    registry.create(StreamConfig("orders", ["orders"], cluster.bootstrap_servers,
                                 "stream_registry.builtin_transformations.merge_messages", f"cypherl://{out}",
                                 batch_interval_ms=20))
    registry.close()


def run_cli(args: list[str]):
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, f"mgstreams {shlex.join(args)}: exit {result.exit_code}: {result.stderr}"
    return result


def variants(command: str) -> list[str]:
    """`[--optional]` groups all left out, and all given (brackets dropped); `A | B` in a comment is
    documentation of SPEC, not a command."""
    without = re.sub(r"\s*\[[^\[\]]*\]", "", command)
    with_all = re.sub(r"\[([^\[\]]*)\]", r"\1", command)
    return [without] if without == with_all else [without, with_all]


def cli_args(command: str, state_dir: Path) -> list[str]:
    args = shlex.split(command)[1:]
    args = [str(state_dir) if a == "DIR" else a for a in args]
    if "--duration" in args:
        args[args.index("--duration") + 1] = "4"       # S: the group assigns after ~0.2 s here
    if "--watch" in args and "--count" not in args:
        args += ["--count", "1"]                       # --watch refreshes until Ctrl-C otherwise
    return args


# -- mgstreams ------------------------------------------------------------------------------
def test_mgstreams_cli_commands(cluster, state_dir, tmp_path):
    out = tmp_path / "orders.cypherl"
    create_orders_stream(cluster, state_dir, out)
    commands = [c for c in shell("mgstreams") if not c.startswith("mgstreams kafka ")]
    assert commands, "the README documents the operator CLI"
    ran = []
    for command in commands:
        for variant in variants(command):
            if re.match(r"mgstreams start \w+$", variant):
                continue   # without --duration it hosts the stream until Ctrl-C; the other variant runs it
            result = run_cli(cli_args(variant, state_dir))
            ran.append(variant)
            if "--json" in variant and "--watch" not in variant:
                json.loads(result.stdout)
            if variant.startswith("mgstreams set-offset orders '{\"orders:0\": 42}'"):
                rows = [line.split()[:5] for line in result.stdout.splitlines()[1:]]
                assert rows == [["orders", "0", "-", "42", "pending"]], rows   # stopped: applied at start
            if variant.startswith("mgstreams start "):
                assert result.stdout.splitlines()[-1] == "orders stopped"
    assert any(v.startswith("mgstreams start orders --duration") for v in ran)
    # `start` applied the pending change: partition 0 from 42, the others from the beginning.
    assert len(out.read_text().splitlines()) == PARTITIONS * PER_PARTITION - 42
    assert ran[-1] == "mgstreams drop orders"
    assert json.loads(run_cli(["list", "--json"]).stdout) == []   # `drop orders` ran last


def test_mgstreams_kafka_runs_until_sigterm():
    [command] = [c for c in shell("mgstreams") if c.startswith("mgstreams kafka ")]
    executable = shutil.which("mgstreams", path=os.path.dirname(sys.executable)) or shutil.which("mgstreams")
    assert executable, "the console script `mgstreams` is installed with the package"
    process = subprocess.Popen([executable, *shlex.split(command)[1:]], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        bootstrap = process.stdout.readline().strip()
        metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
        brokers = int(shlex.split(command)[shlex.split(command).index("--brokers") + 1])
        topic, partitions = shlex.split(command)[shlex.split(command).index("--partitions-topic") + 1].split(":")
        assert len(metadata.brokers) == brokers and len(metadata.topics[topic].partitions) == int(partitions)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# -- mgstreams backfill ---------------------------------------------------------------------
def commit(cluster, group: str, offsets: dict[tuple[str, int], int]) -> None:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def adapt_hosts_and_paths(command: str, cluster, tmp_path: Path, state_dir: Path) -> str:
    """Only host names and paths change: Kafka -> the embedded cluster; /data, /shared and relative
    outputs -> temporary paths; the Bolt sink -> a cypherl directory (see the module docstring)."""
    command = re.sub(r"kafka:\d+", cluster.bootstrap_servers, command)
    command = command.replace("cypherl:///data/backfill", f"cypherl://{tmp_path / 'backfill'}")
    command = command.replace("/shared/mgstreams-state", str(state_dir))
    command = command.replace("--report backfill.json", f"--report {tmp_path / 'backfill.json'}")
    command = re.sub(r"--sink bolt://memgraph:7687", f"--sink cypherl://{tmp_path / 'bolt-substitute'}", command)
    return command


@pytest.fixture
def stream_with_commits(cluster, state_dir, tmp_path):
    """Stream `orders`, run until it committed everything, stopped: `--until committed` has offsets."""
    create_orders_stream(cluster, state_dir, tmp_path / "live.cypherl")
    registry = StreamRegistry(state_dir, autostart=False)
    try:
        registry.start("orders")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if [r.committed_offset for r in registry.describe("orders")] == [PER_PARTITION] * PARTITIONS:
                break
            time.sleep(0.1)
        registry.stop("orders")
        assert [r.committed_offset for r in registry.describe("orders")] == [PER_PARTITION] * PARTITIONS
    finally:
        registry.close()


def test_mgstreams_backfill_commands(cluster, state_dir, tmp_path, stream_with_commits, spark):
    commit(cluster, "orders_live", {**{("orders", p): 20 for p in range(PARTITIONS)},
                                    **{("refunds", p): 0 for p in range(PARTITIONS)}})
    commands = shell("backfill")
    assert len(commands) == 3
    for command in commands:
        adapted = adapt_hosts_and_paths(command, cluster, tmp_path, state_dir)
        result = run_cli(shlex.split(adapted)[1:])
        if "--dry-run" in command:
            rows = [line.split() for line in result.stdout.splitlines()[1:]]
            assert ["orders", "0", "1200", str(PER_PARTITION), str(PER_PARTITION - 1200)] in rows, rows
            assert not (tmp_path / "backfill").exists() or "--dry-run" in command
        elif "--stream orders" in command:
            report = json.loads((tmp_path / "backfill.json").read_text())
            assert report["records"] == PER_PARTITION * PARTITIONS, report
            files = sorted((tmp_path / "backfill").glob("*.cypherl"))
            assert len(files) >= 8   # --min-partitions 8
            assert sum(len(f.read_text().splitlines()) for f in files) == PER_PARTITION * PARTITIONS
        else:   # --topics orders,refunds --group orders_live, Bolt sink substituted
            files = sorted((tmp_path / "bolt-substitute").glob("*.cypherl"))
            assert {f.name.rsplit("-", 2)[0] for f in files} == {f"orders-{p}" for p in range(PARTITIONS)}
            text = "".join(f.read_text() for f in files)
            assert text.count("UNWIND") == PARTITIONS   # one batch of 20 per range (--batch-size 5000)


# -- spark-submit, zip, export ----------------------------------------------------------------
def test_spark_submit_commands_take_the_documented_arguments(cluster, state_dir, tmp_path, stream_with_commits):
    """No Spark cluster here: each `spark-submit [options] SCRIPT ARGS` runs `python SCRIPT ARGS --dry-run`
    (the plan, without Spark) with hosts and paths adapted; the master URLs are spark-submit's own."""
    commands = shell("spark-submit")
    assert commands
    for command in commands:
        tokens = shlex.split(adapt_hosts_and_paths(command, cluster, tmp_path, state_dir))
        script = next(t for t in tokens if t.endswith(".py"))
        assert script == "spark_bridge/backfill_main.py" and (ROOT / script).is_file()
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
    for package in ("spark_bridge", "stream_registry"):
        assert f"{package}/__init__.py" in names
    probe = (f"import sys; sys.path.insert(0, {str(archive)!r}); import spark_bridge.backfill, stream_registry; "
             f"assert stream_registry.__file__.startswith({str(archive)!r}), stream_registry.__file__")
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
        assert "$(STAMP)" in targets[target], "both commands create .venv and install first"
        assert {"demo": "-m mgstreams.demo", "test": "-m pytest"}[target] in targets[target]
        if command.startswith("KAFKA_BOOTSTRAP_SERVERS="):
            assert 'os.environ.get("KAFKA_BOOTSTRAP_SERVERS")' in (ROOT / "tests" / "conftest.py").read_text()


def test_demo_options_in_the_readme_parse():
    from mgstreams.demo import parse_args

    line = re.search(r"`\.venv/bin/python -m spark_bridge\.demo ([^`]+)`", README.read_text()).group(1)
    args = parse_args(shlex.split(re.sub(r"\[([^\[\]]*)\]", r"\1", line.replace("local[2]", "LOCAL2"))
                                  .replace("DIR", "d").replace(" N", " 5").replace("URI", "bolt://h:1")
                                  .replace("LOCAL2", "local[2]")))
    assert (args.out, args.seed, args.events, args.master, args.memgraph_uri) == ("d", 5, 5, "local[2]",
                                                                                 "bolt://h:1")


def test_mgconsole_commands_load_files_the_demo_writes():
    """No mgconsole here; the files are the ones the demo writes (tests/test_demo_e2e.py runs it)."""
    demo = (ROOT / "spark_bridge" / "demo.py").read_text()
    for command in shell("mgconsole"):
        path = re.search(r"demo-out/(\S+)", command).group(1)
        written = path.split("/")[0] if "/" in path else path
        assert f'"{written}"' in demo, f"{command}: the demo does not write {written}"
        assert 'default="demo-out"' in demo and "--out demo-out" in (ROOT / "Makefile").read_text()


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_docker_compose_commands(compose):
    """No Docker engine here: each command's services, profile and paths are checked in the file."""
    services = compose["services"]
    kafka_image = services["kafka"]["image"]
    assert kafka_image.startswith("apache/kafka:"), "its scripts live in /opt/kafka/bin"
    commands = shell("docker")
    assert commands
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
                assert "build" in services["memgraph"]
        elif verb == "exec":
            rest = [t for t in tokens[1:] if t != "-T"]
            service, program = rest[0], rest[1]
            assert service in services, command
            if program.startswith("/opt/kafka/bin/"):
                assert service == "kafka" and program.endswith(".sh"), command
                assert "--bootstrap-server" in rest and rest[rest.index("--bootstrap-server") + 1] == \
                    "localhost:9092"
                assert "HOST://localhost:9092" in services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
            else:
                assert program == "mgconsole" and service == "memgraph", command
        else:
            raise AssertionError(f"no check for `docker compose {verb}`: {command}")
    assert "kafka:29092" in services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"], \
        "the Cypher walkthrough's streams.create uses kafka:29092"


def test_bench_commands_exist_and_answer_help():
    commands = shell("bench")
    assert len(commands) == 3
    for command in commands:
        script = command.split()[1]
        assert (ROOT / script).is_file(), command
        done = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, f"{command} --help: {done.stderr[-1000:]}"


# -- python blocks ---------------------------------------------------------------------------
def test_python_api_example(cluster, tmp_path):
    [block] = [b for b in python_blocks() if PYTHON_RULES["python_api"] in b]
    out = tmp_path / "orders.cypherl"
    code = (block.replace('"/var/lib/mgstreams"', repr(str(tmp_path / "state")))
            .replace('"localhost:9092"', repr(cluster.bootstrap_servers))
            .replace('"cypherl:///tmp/orders.cypherl"', repr(f"cypherl://{out}")))
    assert code != block and "localhost:9092" not in code and "/tmp/orders" not in code
    # Keep the stream running a moment after set_offset so it delivers, then let the block stop it.
    namespace: dict = {}
    exec(compile(code.replace("reg.stop(", "__import__('time').sleep(1.5); reg.stop("), "README", "exec"),
         namespace)
    reg = namespace["reg"]
    assert namespace["StreamRegistry"] is StreamRegistry
    changes = StreamRegistry(tmp_path / "state", autostart=False)
    try:
        assert {h.status for h in changes.history("orders")} == {"applied"}
        assert changes.get("orders").status == "stopped", changes.get("orders")
    finally:
        changes.close()
    assert "TRANSFER" in out.read_text() and reg is not None


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
def memgraph(state_dir, monkeypatch):
    from mgp_backend import mgp_environment
    from stream_helpers import RecordingSink
    from stream_registry.graph import sinks
    from stream_registry.registry.registry import reset_default_registry

    # streams.create's default sink is bolt://localhost:7687: Memgraph itself in the container.
    recorder = RecordingSink()
    monkeypatch.setitem(sinks.SCHEMES, "bolt", sinks.Scheme(parse=sinks.SCHEMES["bolt"].parse,
                                                            open=lambda settings, credentials: recorder))
    reset_default_registry()
    with mgp_environment([ROOT / "query_modules"]) as server:
        server.recorder = recorder
        yield server
    reset_default_registry()


def walkthrough_order(statements: list[str]) -> list[str]:
    """The walkthrough (from `streams.create` on) in order; CALLs shown elsewhere (the intro's
    `set_stream_offset('orders', 42)`) run on its stream right after `streams.start`."""
    first = next(i for i, s in enumerate(statements) if s.startswith("CALL streams.create("))
    start = next(i for i, s in enumerate(statements) if s.startswith("CALL streams.start("))
    walkthrough = [s for s in statements if s.startswith("CALL mg.")] + statements[first:]
    others = [s for s in statements if s not in walkthrough]
    at = walkthrough.index(statements[start]) + 1
    return walkthrough[:at] + others + walkthrough[at:]


def test_cypher_block(cluster, memgraph):
    """`CALL streams.*` and `CALL mg.*` run on the _mgp backend. `CREATE INDEX` and `MATCH` are graph
    queries (no Cypher engine here): the recorded statements show what `MATCH (m:KafkaMessage)` would find."""
    statements = walkthrough_order(cypher_statements())
    assert sorted(statements) == sorted(cypher_statements())
    called = []
    for statement in statements:
        if re.search(CYPHER_RULES["graph"], statement):
            continue
        name, args, yielded = parse_call(statement.replace('"kafka:29092"', repr(cluster.bootstrap_servers)))
        if name == "mg.load_all":
            memgraph.load_all()
            continue
        if name == "mg.procedures":
            names = sorted(r["name"] for r in memgraph.procedures() if r["name"].startswith("streams."))
            assert names == sorted(f"streams.{p}" for p in ("create", "start", "stop", "drop", "list",
                                                            "set_stream_offset", "offsets", "history"))
            continue
        rows = memgraph.call(name, *args)
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
        elif name in ("streams.create", "streams.start", "streams.stop", "streams.drop"):
            assert rows == [{"name": "orders", "status": {"streams.create": "created", "streams.start": "running",
                                                          "streams.stop": "stopped",
                                                          "streams.drop": "stopped"}[name]}] or \
                (name == "streams.start" and rows[0]["status"] == "starting"), rows
        elif name in ("streams.offsets", "streams.history", "streams.list"):
            assert rows, statement
    assert [c[0] for c in called][0] == "streams.create" and called[-1][0] == "streams.drop"
    assert memgraph.call("streams.list") == []
    # The stream (empty transform: one idempotent :KafkaMessage per message) wrote through the sink.
    statements_written = [s for batch in memgraph.recorder.batches for s in batch]
    assert statements_written and all("KafkaMessage" in s.query for s in statements_written)
