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


def test_the_rules_cover_an_unreachable_cluster_and_lost_records():
    """Issue 32: a dead cluster and records that left the log each have a rule (tests/host/test_outages_host.py
    evaluates them with promtool against a real host's metrics in each case)."""
    rules = {rule["alert"]: rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]}
    assert "mgstreams_cluster_up == 0" in rules["MgstreamsClusterUnreachable"]["expr"]
    assert 'verdict="ERR"' in rules["MgstreamsStreamErr"]["expr"]
    assert "mgstreams_records_lost_unacknowledged" in rules["MgstreamsRecordsLost"]["expr"]
    assert "kafka_partition_earliest_offset" in rules["MgstreamsNearLogStart"]["expr"]


def test_promtool_checks_the_rules():
    """Prometheus's own parser and linter accept the file (promtool check rules)."""
    import subprocess

    from promtool import require_promtool
    done = subprocess.run([require_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr
