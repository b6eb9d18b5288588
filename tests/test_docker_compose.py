"""docker-compose.yml and the Memgraph Dockerfile, checked without a Docker engine.

What can be checked from the files: the services and their health checks,
pinned images, that every COPY source exists in the build context, the query
modules directories, the state volume and the env vars the code reads, and
that Kafka's listeners and advertised listeners agree.
"""
from __future__ import annotations

import base64
import re
import shlex
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
MAGE_MODULES = "/usr/lib/memgraph/query_modules"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


@pytest.fixture(scope="module")
def memgraph_build(services) -> dict:
    build = services["memgraph"]["build"]
    context = (COMPOSE_FILE.parent / build["context"]).resolve()
    return {"context": context, "dockerfile": context / build["dockerfile"], "args": build.get("args", {})}


def parse_dockerfile(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comments dropped."""
    instructions, pending = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, rest = line.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
    return instructions


@pytest.fixture(scope="module")
def dockerfile(memgraph_build) -> list[tuple[str, str]]:
    return parse_dockerfile(memgraph_build["dockerfile"])


def env_of(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def command_of(service: dict) -> list[str]:
    command = service.get("command") or []
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


def flag(args: list[str], name: str) -> str | None:
    for arg in args:
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


# -- services ------------------------------------------------------------------
def test_services_and_optional_lab(services):
    assert {"kafka", "memgraph"} <= set(services)
    assert "profiles" not in services["kafka"] and "profiles" not in services["memgraph"]
    assert services["lab"]["profiles"] == ["lab"], "Memgraph Lab is optional: behind a profile"
    assert env_of(services["lab"])["QUICK_CONNECT_MG_HOST"] == "memgraph"


def test_every_image_is_pinned(services, dockerfile, memgraph_build):
    for name, service in services.items():
        if "image" not in service:
            continue
        image = service["image"]
        assert ":" in image.rsplit("/", 1)[-1], f"{name}: image {image!r} has no tag"
        assert not image.endswith(":latest"), f"{name}: image {image!r} is not pinned"
    assert services["kafka"]["image"].startswith("apache/kafka:")
    args = {k: v for k, v in (a.split("=", 1) for kw, a in dockerfile if kw == "ARG" and "=" in a)}
    args.update({k: str(v) for k, v in memgraph_build["args"].items()})
    [base] = [rest for kw, rest in dockerfile if kw == "FROM"]
    base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)
    repository, _, tag = base.partition(":")
    assert repository == "memgraph/memgraph-mage"
    assert re.fullmatch(r"\d+\.\d+(\.\d+)?", tag), f"base image tag {tag!r} is not a pinned version"
    # The image name compose gives our build says which MAGE it is built on.
    assert tag in services["memgraph"]["image"]


def test_health_checks_and_start_order(services):
    for name in ("kafka", "memgraph"):
        test = services[name]["healthcheck"]["test"]
        assert test[0] in ("CMD", "CMD-SHELL") and len(test) > 1, name
    assert "kafka-broker-api-versions.sh" in services["kafka"]["healthcheck"]["test"][1]
    assert "mgconsole" in services["memgraph"]["healthcheck"]["test"][1]
    assert services["memgraph"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert services["lab"]["depends_on"]["memgraph"]["condition"] == "service_healthy"


def test_memgraph_ports(services):
    assert "7687:7687" in services["memgraph"]["ports"]


# -- the plugin inside Memgraph ----------------------------------------------------------
def test_copy_sources_exist_in_the_build_context(dockerfile, memgraph_build):
    copies = [rest for kw, rest in dockerfile if kw == "COPY"]
    assert copies
    for rest in copies:
        parts = [p for p in shlex.split(rest) if not p.startswith("--")]
        for source in parts[:-1]:
            assert (memgraph_build["context"] / source).exists(), f"COPY source {source!r} is not in the repo"


def test_query_modules_directory_keeps_mage_and_adds_ours(services, dockerfile):
    value = flag(command_of(services["memgraph"]), "query-modules-directory")
    assert value, "memgraph needs --query-modules-directory"
    dirs = value.split(",")
    assert dirs[0] == MAGE_MODULES, "keep MAGE's modules directory in the list"
    ours = [d for d in dirs if d != MAGE_MODULES]
    assert ours, "add the plugin's directory"
    copied_to = {shlex.split(rest)[-1].rstrip("/") for kw, rest in dockerfile if kw == "COPY"
                 if shlex.split(rest)[0].rstrip("/") == "query_modules"}
    assert set(d.rstrip("/") for d in ours) <= copied_to, "the directory must be where query_modules/ is copied"
    assert (ROOT / "query_modules" / "streams.py").is_file()
    assert flag(command_of(services["memgraph"]), "log-level") in ("INFO", "DEBUG", "TRACE", "WARNING")


def test_transformations_are_found_in_the_query_modules_directories(services):
    """The registry resolves `module.function` in $MGSTREAMS_QUERY_MODULES_DIR too."""
    from stream_registry.graph.transform import QUERY_MODULES_ENV

    value = flag(command_of(services["memgraph"]), "query-modules-directory")
    configured = re.split(r"[:,]", env_of(services["memgraph"])[QUERY_MODULES_ENV])
    assert set(configured) == set(value.split(","))


def test_state_dir_is_a_named_volume(compose, services, dockerfile):
    source = "\n".join(p.read_text() for p in (ROOT / "stream_registry").glob("*.py"))
    assert 'os.environ.get("MGSTREAMS_STATE_DIR")' in source, "the code reads MGSTREAMS_STATE_DIR"
    state_dir = env_of(services["memgraph"])["MGSTREAMS_STATE_DIR"]
    mounts = dict(volume.split(":")[::-1][:2][::-1] for volume in services["memgraph"]["volumes"])
    volume = {target: src for src, target in mounts.items()}[state_dir]
    assert volume in compose["volumes"], "the state lives on a named volume"
    # The image prepares the directory for its non-root user, so the volume is writable.
    runs = " ".join(rest for kw, rest in dockerfile if kw == "RUN")
    assert f"mkdir -p {state_dir}" in runs and "chown" in runs
    assert ("ENV", f"MGSTREAMS_STATE_DIR={state_dir}") in dockerfile


def test_image_runs_as_memgraph_and_installs_for_the_system_python(dockerfile, memgraph_build):
    users = [rest for kw, rest in dockerfile if kw == "USER"]
    assert users[-1] == "memgraph", "the image must end as the memgraph user"
    pip_runs = [rest for kw, rest in dockerfile if kw == "RUN" and "pip install" in rest]
    assert pip_runs and all("--break-system-packages" in run for run in pip_runs)
    assert any("--no-deps" in run for run in pip_runs), "the project's own deps name Spark and the mgp stub"
    requirements = (memgraph_build["context"] / "docker/memgraph/requirements.txt").read_text()
    names = {re.split(r"[<>=!~ ]", line.strip())[0].lower()
             for line in requirements.splitlines() if line.strip() and not line.startswith("#")}
    assert "confluent-kafka" in names
    assert "mgp" not in names and "pyspark" not in names
    assert re.search(r"^gqlalchemy\s*(==\s*1\.8\.|>=\s*1\.8\s*,\s*<\s*1\.9)", requirements, re.M), \
        "gqlalchemy must stay on 1.8.x (1.9+ requires TensorFlow)"
    # Every runtime dependency of the project is installed (except Spark-side and type stubs).
    pyproject = (ROOT / "pyproject.toml").read_text()
    declared = re.search(r"^dependencies = \[(.*?)\]", pyproject, re.S | re.M).group(1)
    for dep in re.findall(r'"([A-Za-z0-9_.-]+)', declared):
        if dep.lower() not in {"pyspark", "pyarrow", "pandas", "mgp"}:
            assert dep.lower() in names, f"{dep} is a runtime dependency missing from the image"


# -- Kafka -----------------------------------------------------------------------------
def _listeners(value: str) -> dict[str, tuple[str, int]]:
    result = {}
    for item in value.split(","):
        name, _, address = item.partition("://")
        host, _, port = address.rpartition(":")
        result[name] = (host, int(port))
    return result


def test_kafka_kraft_single_node(services):
    env = env_of(services["kafka"])
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node_id = env["KAFKA_NODE_ID"]
    voter_id, _, voter = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].partition("@")
    assert voter_id == node_id
    listeners = _listeners(env["KAFKA_LISTENERS"])
    controller = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert controller in listeners and int(voter.rpartition(":")[2]) == listeners[controller][1]
    assert voter.rpartition(":")[0] == services["kafka"]["hostname"]
    for key in ("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
                "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"):
        assert env[key] == "1", f"{key} must be 1 on a single node"
    cluster_id = env["CLUSTER_ID"]
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16, "CLUSTER_ID is a base64url UUID"


def test_kafka_listeners_for_host_and_compose_network(services):
    kafka = services["kafka"]
    env = env_of(kafka)
    listeners = _listeners(env["KAFKA_LISTENERS"])
    advertised = _listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    protocols = dict(item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(listeners) <= set(protocols)
    controller = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert controller not in advertised, "the controller listener is not advertised to clients"
    assert set(advertised) == set(listeners) - {controller}
    for name, (_, port) in advertised.items():
        assert listeners[name][1] == port, f"{name}: advertised port differs from the bound one"
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] in advertised
    hosts = {host for host, _ in advertised.values()}
    assert "localhost" in hosts, "a listener for clients on the host"
    assert kafka["hostname"] in hosts, "a listener for clients on the compose network"
    [(host_name, (_, host_port))] = [(n, a) for n, a in advertised.items() if a[0] == "localhost"]
    assert f"{host_port}:{host_port}" in kafka["ports"], "the host listener's port is published"
    assert host_port == 9092
    [(_, (_, network_port))] = [(n, a) for n, a in advertised.items() if a[0] == kafka["hostname"]]
    assert network_port == 29092


def test_compose_network_address_is_documented(services):
    header = COMPOSE_FILE.read_text().split("services:")[0]
    assert "localhost:9092" in header and f"{services['kafka']['hostname']}:29092" in header
