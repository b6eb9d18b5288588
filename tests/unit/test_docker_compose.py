"""docker-compose.yml and the two Dockerfiles, checked without a Docker engine.

What can be checked from the files: the services and their health checks,
pinned images, that every COPY source exists in the build context and passes
its .dockerignore, that Memgraph's image carries only the query module (a
client of the stream host) and the host's image no Spark, the state volume,
the token, the env vars the code reads, and that Kafka's listeners and
advertised listeners agree.
"""
from __future__ import annotations

import ast
import base64
import fnmatch
import json
import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml
from paths import ROOT

COMPOSE_FILE = ROOT / "docker-compose.yml"
MAGE_MODULES = "/usr/lib/memgraph/query_modules"


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def build_of(service: dict) -> dict:
    build = service["build"]
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
def memgraph_build(services) -> dict:
    return build_of(services["memgraph"])


@pytest.fixture(scope="module")
def host_build(services) -> dict:
    return build_of(services["mgstreams"])


@pytest.fixture(scope="module")
def dockerfile(memgraph_build) -> list[tuple[str, str]]:
    return parse_dockerfile(memgraph_build["dockerfile"])


@pytest.fixture(scope="module")
def host_dockerfile(host_build) -> list[tuple[str, str]]:
    return parse_dockerfile(host_build["dockerfile"])


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


def copies(dockerfile) -> list[tuple[list[str], str]]:
    """(sources, destination) of every COPY, options dropped."""
    result = []
    for kw, rest in dockerfile:
        if kw == "COPY":
            parts = [p for p in shlex.split(rest) if not p.startswith("--")]
            result.append((parts[:-1], parts[-1]))
    return result


def ignored(build: dict, path: str) -> bool:
    """Whether BuildKit's <Dockerfile>.dockerignore (last matching rule wins) drops `path`."""
    rules = [line.strip() for line in Path(f"{build['dockerfile']}.dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    result = False
    for rule in rules:
        negate, pattern = rule.startswith("!"), rule.lstrip("!").rstrip("/")
        if pattern == "**" or fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/") \
                or fnmatch.fnmatch(path, pattern.replace("**/", "*/")):
            result = not negate
    return result


# -- services ------------------------------------------------------------------
def test_services_and_optional_lab(services):
    assert {"kafka", "mgstreams", "memgraph"} <= set(services)
    for name in ("kafka", "mgstreams", "memgraph"):
        assert "profiles" not in services[name]
    assert services["lab"]["profiles"] == ["lab"], "Memgraph Lab is optional: behind a profile"
    assert env_of(services["lab"])["QUICK_CONNECT_MG_HOST"] == "memgraph"


def test_every_image_is_pinned(services, dockerfile, memgraph_build, host_dockerfile):
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
    assert tag in services["memgraph"]["image"], "the image name says which MAGE it is built on"
    [host_base] = [rest for kw, rest in host_dockerfile if kw == "FROM"]
    repository, _, tag = host_base.partition(":")
    assert repository == "python" and re.match(r"3\.1[1-9]", tag), "the host needs Python >= 3.11"


def test_health_checks_and_start_order(services):
    for name in ("kafka", "mgstreams", "memgraph"):
        test = services[name]["healthcheck"]["test"]
        assert test[0] in ("CMD", "CMD-SHELL") and len(test) > 1, name
    assert "kafka-broker-api-versions.sh" in services["kafka"]["healthcheck"]["test"][1]
    assert "mgconsole" in services["memgraph"]["healthcheck"]["test"][1]
    host_check = " ".join(services["mgstreams"]["healthcheck"]["test"])
    assert "/health" in host_check and "MGSTREAMS_TOKEN" in host_check, "the health check sends the token"
    assert services["mgstreams"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert services["mgstreams"]["restart"] == "unless-stopped"
    assert services["lab"]["depends_on"]["memgraph"]["condition"] == "service_healthy"


def test_docker_stop_waits_for_every_stream_process_to_commit(services):
    """`docker stop` sends SIGTERM, then SIGKILL after stop_grace_period (10 s by default): the host needs its
    streams' stop timeout (`serve --stop-timeout`, default model.STOP_TIMEOUT_S) plus its own shutdown."""
    from stream_registry.model import STOP_TIMEOUT_S

    command = services["mgstreams"]["command"]
    timeout = float(command[command.index("--stop-timeout") + 1]) if "--stop-timeout" in command \
        else STOP_TIMEOUT_S
    grace = services["mgstreams"]["stop_grace_period"]
    assert grace.endswith("s") and float(grace[:-1]) >= timeout + 10, (grace, timeout)


def published(port: str) -> tuple[str, str, str]:
    """(host address, host port, container port) of a short-syntax port mapping ('' when no address)."""
    parts = port.rsplit(":", 2)
    return ("", *parts) if len(parts) == 2 else tuple(parts)


def test_every_port_is_published_on_loopback_only(services):
    """Anyone who reaches the machine must not reach Kafka (PLAINTEXT), Memgraph, Lab or the API (issue 26)."""
    seen = []
    for name, service in services.items():
        for port in service.get("ports", []):
            assert isinstance(port, str), f"{name}: use the short syntax ADDRESS:HOST:CONTAINER ({port!r})"
            address, host_port, _ = published(port)
            assert address == "127.0.0.1", f"{name} publishes {port!r} beyond loopback"
            seen.append((name, host_port))
    assert {("kafka", "9092"), ("memgraph", "7687"), ("memgraph", "7444"), ("lab", "3000"),
            ("mgstreams", "8765")} <= set(seen)
    assert "expose" not in services["kafka"] and "network_mode" not in services["kafka"]
    header = COMPOSE_FILE.read_text().split("services:")[0]
    assert "127.0.0.1" in header and "deliberately" in header, "the file says how to open a port on purpose"


def test_memgraph_runs_with_a_user_and_password(services):
    env = env_of(services["memgraph"])
    assert env["MEMGRAPH_USER"] and env["MEMGRAPH_PASSWORD"].startswith("${MEMGRAPH_PASSWORD:?"), \
        "compose refuses to start Memgraph without a password; none is committed"
    check = services["memgraph"]["healthcheck"]["test"][1]
    assert "--username" in check and "--password" in check, "the health check logs in"


def test_the_host_reaches_and_answers_only_the_compose_names(services):
    env = env_of(services["mgstreams"])
    assert set(env["MGSTREAMS_ALLOWED_HOSTS"].split(",")) >= {"kafka", "memgraph"}
    assert "*" not in env["MGSTREAMS_ALLOWED_HOSTS"].split(",")
    assert env["MGSTREAMS_SERVER_NAMES"].split(",") == ["mgstreams"], "Memgraph calls http://mgstreams:8765"


def test_copy_sources_exist_and_pass_the_dockerignore(memgraph_build, dockerfile, host_build, host_dockerfile):
    for build, instructions in ((memgraph_build, dockerfile), (host_build, host_dockerfile)):
        assert copies(instructions)
        for sources, _ in copies(instructions):
            for source in sources:
                assert (build["context"] / source).exists(), f"COPY source {source!r} is not in the repo"
                assert not ignored(build, source.rstrip("/")), f"{source!r} is excluded by the .dockerignore"


# -- the stream host ---------------------------------------------------------------------
def test_host_serves_beyond_loopback_with_a_required_token(services):
    host = services["mgstreams"]
    command = command_of(host)
    assert command[:2] == ["mgstreams", "serve"]
    listen = command[command.index("--listen") + 1]
    assert listen == "0.0.0.0:8765"
    token = env_of(host)["MGSTREAMS_TOKEN"]
    assert token.startswith("${MGSTREAMS_TOKEN:?"), "compose refuses to start without a token; none is committed"
    from mgstreams.host.serve import Listen
    assert not Listen.parse(listen).loopback, "so `mgstreams serve` itself insists on the token"


def test_state_dir_is_a_named_volume_owned_by_the_host_user(compose, services, host_dockerfile):
    from mgstreams import settings
    assert settings.STATE_DIR_ENV == "MGSTREAMS_STATE_DIR"   # what `mgstreams serve` reads (settings.default_state_dir)
    host = services["mgstreams"]
    state_dir = env_of(host)["MGSTREAMS_STATE_DIR"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in host["volumes"]}
    assert mounts[state_dir] in compose["volumes"], "the state lives on a named volume"
    assert "volumes" not in services["memgraph"] or not any(
        v.split(":")[1] == state_dir for v in services["memgraph"]["volumes"]), "only the host owns the state"
    runs = " ".join(rest for kw, rest in host_dockerfile if kw == "RUN")
    user = [rest for kw, rest in host_dockerfile if kw == "USER"][-1]
    assert user != "root" and f"mkdir -p {state_dir}" in runs and f"chown {user}:{user} {state_dir}" in runs


def test_host_image_installs_the_base_package_without_spark(host_dockerfile):
    pip_runs = [rest for kw, rest in host_dockerfile if kw == "RUN" and "pip install" in rest]
    assert pip_runs and not any("[spark]" in run or "pyspark" in run for run in pip_runs)
    pyproject = (ROOT / "pyproject.toml").read_text()
    base = re.search(r"^dependencies = \[(.*?)\]", pyproject, re.S | re.M).group(1)
    assert not re.search(r"pyspark|pyarrow|pandas|\"mgp", base), "Spark comes only with mgstreams[spark]"


def test_host_finds_transformations_in_its_query_modules_directory(services, host_dockerfile):
    """The bundled ones (copied into the image), then the operator's own: ./transformations, mounted (issue 35)."""
    from stream_registry.graph.transform import QUERY_MODULES_ENV
    bundled, own = env_of(services["mgstreams"])[QUERY_MODULES_ENV].split(",")
    assert any(src == ["query_modules/"] and dest.rstrip("/") == bundled for src, dest in copies(host_dockerfile))
    mounted = mounts_of(services["mgstreams"])
    assert mounted[own] == (ROOT / "transformations").resolve() and mounted[own].is_dir()
    assert any(v.endswith(f"{own}:ro") for v in services["mgstreams"]["volumes"]), "read only in the host"


def test_streams_created_from_cypher_default_to_the_compose_memgraph(services):
    for name in ("mgstreams", "memgraph"):
        assert env_of(services[name])["MGSTREAMS_DEFAULT_SINK"] == "bolt://memgraph:7687"
    assert any(p.split(":")[-1] == "7687" for p in services["memgraph"]["ports"])


# -- Memgraph: the query module only --------------------------------------------------------
def test_memgraph_image_carries_only_the_module_file(dockerfile):
    assert not [rest for kw, rest in dockerfile if kw == "RUN"], "nothing is installed into Memgraph's Python"
    assert copies(dockerfile) == [(["query_modules/streams.py"], "/usr/lib/mgstreams/query_modules/streams.py")]
    assert [rest for kw, rest in dockerfile if kw == "USER"][-1] == "memgraph"


def test_the_module_imports_only_the_standard_library_and_mgp():
    tree = ast.parse((ROOT / "query_modules" / "streams.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module and not node.level}
    assert imported - {"mgp"} <= set(sys.stdlib_module_names), imported - {"mgp"} - set(sys.stdlib_module_names)
    assert "mgp" in imported


def test_module_reaches_the_host_with_its_token(services):
    env = env_of(services["memgraph"])
    host = services["mgstreams"]
    port = command_of(host)[command_of(host).index("--listen") + 1].rpartition(":")[2]
    assert env["MGSTREAMS_URL"] == f"http://mgstreams:{port}"
    # the token reaches Memgraph as a secret's file, not in its environment
    assert "MGSTREAMS_TOKEN" not in env
    assert env["MGSTREAMS_TOKEN_FILE"] == "/run/secrets/mgstreams_token"
    assert "mgstreams_token" in services["memgraph"]["secrets"]
    module = (ROOT / "query_modules" / "streams.py").read_text()
    assert "MGSTREAMS_URL" in module and "MGSTREAMS_TOKEN_FILE" in module


def test_query_modules_directory_keeps_mage_and_adds_ours(services, dockerfile):
    value = flag(command_of(services["memgraph"]), "query-modules-directory")
    assert value, "memgraph needs --query-modules-directory"
    dirs = value.split(",")
    assert dirs[0] == MAGE_MODULES, "keep MAGE's modules directory in the list"
    ours = {d.rstrip("/") for d in dirs if d != MAGE_MODULES}
    assert ours == {str(Path(dest).parent) for _, dest in copies(dockerfile)}
    assert flag(command_of(services["memgraph"]), "log-level") in ("INFO", "DEBUG", "TRACE", "WARNING")


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
    assert f"127.0.0.1:{host_port}:{host_port}" in kafka["ports"], "the host listener's port is published on loopback"
    assert host_port == 9092
    [(_, (_, network_port))] = [(n, a) for n, a in advertised.items() if a[0] == kafka["hostname"]]
    assert network_port == 29092


def test_compose_network_address_is_documented(services):
    header = COMPOSE_FILE.read_text().split("services:")[0]
    assert "localhost:9092" in header and f"{services['kafka']['hostname']}:29092" in header


# -- monitoring: Prometheus and Grafana behind the "monitoring" profile ------------------------------
def mounts_of(service: dict) -> dict[str, Path]:
    """Bind mounts of repository files: destination in the container -> the file or directory here."""
    out = {}
    for volume in service.get("volumes", []):
        source, destination = volume.split(":")[:2]
        if source.startswith("./"):
            out[destination] = (COMPOSE_FILE.parent / source).resolve()
    return out


def exported_metric_names() -> set[str]:
    """The sample names the host's /metrics can carry, from its own collector."""
    from mgstreams.host.metrics import RegistryCollector

    class NoStreams:
        def list(self):
            return []
    names = set()
    for family in RegistryCollector(NoStreams(), None).collect():
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names |= {family.name + suffix for suffix in ("_bucket", "_sum", "_count")}
        else:
            names.add(family.name)
    return names


def test_monitoring_is_optional_behind_a_profile(services):
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["monitoring"], name
        assert all(p.startswith("127.0.0.1:") for p in services[name]["ports"]), "published on loopback only"
    assert services["prometheus"]["depends_on"]["mgstreams"]["condition"] == "service_healthy"
    assert "prometheus" in services["grafana"]["depends_on"]
    header = COMPOSE_FILE.read_text().split("services:")[0]
    assert "--profile monitoring" in header


def test_prometheus_scrapes_the_host_with_its_token(compose, services):
    from mgstreams.host.serve import DEFAULT_LAG_SAMPLE_INTERVAL_S

    prometheus = services["prometheus"]
    config_path = flag(command_of(prometheus), "config.file")
    config_file = mounts_of(prometheus)[config_path]
    config = yaml.safe_load(config_file.read_text())
    [job] = config["scrape_configs"]
    host = services["mgstreams"]
    port = command_of(host)[command_of(host).index("--listen") + 1].rpartition(":")[2]
    assert job["static_configs"] == [{"targets": [f"mgstreams:{port}"]}]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    assert job["scrape_interval"] == f"{DEFAULT_LAG_SAMPLE_INTERVAL_S:g}s", "as often as the host samples lag"
    auth = job["authorization"]
    assert auth.get("type", "Bearer") == "Bearer" and "credentials" not in auth, "no token in the repository"
    secret = auth["credentials_file"].removeprefix("/run/secrets/")
    assert secret in prometheus["secrets"]
    assert compose["secrets"][secret] == {"environment": "MGSTREAMS_TOKEN"}, "the host's own token"
    assert "MGSTREAMS_TOKEN" in env_of(host)


def test_grafana_shows_the_lag_dashboard_from_prometheus(services):
    grafana = services["grafana"]
    mounts = mounts_of(grafana)
    provisioning = mounts["/etc/grafana/provisioning"]
    [datasource] = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert datasource["type"] == "prometheus" and datasource["url"] == "http://prometheus:9090"
    assert any(p.endswith(":9090") for p in services["prometheus"]["ports"])
    [provider] = yaml.safe_load((provisioning / "dashboards" / "mgstreams.yml").read_text())["providers"]
    dashboards = mounts[provider["options"]["path"]]
    home = env_of(grafana)["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(provider["options"]["path"] + "/")
    dashboard = json.loads((dashboards / home.rpartition("/")[2]).read_text())
    assert dashboard["uid"] == "mgstreams-lag" and dashboard["panels"]

    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [a["expr"] for a in dashboard["annotations"]["list"]]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    used = {name for expr in exprs for name in re.findall(r"\b(?:kafka|mgstreams)_[a-z_]+\b", expr)}
    exported = exported_metric_names()
    assert used <= exported, f"the dashboard queries metrics the host does not export: {used - exported}"
    for name in ("kafka_consumergroup_group_lag", "kafka_consumergroup_group_lag_seconds",
                 "kafka_consumergroup_group_max_lag_seconds", "kafka_consumergroup_group_sum_lag",
                 "mgstreams_stream_status", "mgstreams_offset_changes_total"):
        assert name in used, f"the dashboard shows {name}"
    assert {p["datasource"]["uid"] for p in dashboard["panels"]} == {"${datasource}"}, \
        "panels use the data source variable, so the JSON imports into any Grafana"


def test_the_host_exports_kafka_lag_exporters_names():
    assert {"kafka_consumergroup_group_offset", "kafka_consumergroup_group_lag", "kafka_consumergroup_group_lag_seconds",
            "kafka_consumergroup_group_max_lag", "kafka_consumergroup_group_max_lag_seconds",
            "kafka_consumergroup_group_sum_lag", "kafka_partition_latest_offset", "kafka_partition_earliest_offset",
            "mgstreams_stream_up", "mgstreams_stream_status", "mgstreams_records_total", "mgstreams_batches_total",
            "mgstreams_batch_seconds_bucket", "mgstreams_offset_changes_total",
            "mgstreams_dead_letter_records_total"} <= exported_metric_names()
