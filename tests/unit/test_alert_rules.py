"""The example Prometheus alert rules (docker/prometheus/alerts.yml) load in compose's Prometheus and speak the
host's metrics: every metric they name is one the host exports, every verdict and state one it reports."""
from __future__ import annotations

import re

import yaml
from test_docker_compose import COMPOSE_FILE, ROOT, command_of, exported_metric_names, flag, mounts_of

from stream_registry.model import StreamStatus, Verdict

RULES = ROOT / "docker" / "prometheus" / "alerts.yml"


def test_prometheus_loads_the_rules_compose_mounts():
    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    prometheus = services["prometheus"]
    mounts = mounts_of(prometheus)
    config = yaml.safe_load(mounts[flag(command_of(prometheus), "config.file")].read_text())
    assert [mounts[path] for path in config["rule_files"]] == [RULES.resolve()]


def test_every_rule_names_what_the_host_exports():
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert {"MgstreamsStreamFallingBehind", "MgstreamsStreamStalled", "MgstreamsStreamFailed"} <= \
        {rule["alert"] for rule in rules}
    exported = exported_metric_names()
    for rule in rules:
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule
        assert rule["labels"]["severity"] in ("critical", "warning") and rule["annotations"]["summary"], rule
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule
        for metric in re.findall(r"\b((?:mgstreams|kafka)_\w+)", rule["expr"]):
            assert metric in exported, (rule["alert"], metric)
        for verdict in re.findall(r'verdict="(\w+)"', rule["expr"]):
            Verdict(verdict)
        for status in re.findall(r'status="(\w+)"', rule["expr"]):
            StreamStatus(status)
        assert rule["expr"].count("(") == rule["expr"].count(")"), rule
