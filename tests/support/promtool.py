"""The bundled alert rules (docker/prometheus/alerts.yml) evaluated by Prometheus's own `promtool test rules`
against metrics a real host served: each sample of a scrape becomes a constant input series, and promtool says
which alerts fire after 5 minutes of it.

promtool comes with Debian's `prometheus` package; the Makefile's `test` target installs it (as root), and a
test that needs it is skipped, saying so, where it is not installed.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from paths import ROOT
from prometheus_client.parser import text_string_to_metric_families

RULES = ROOT / "docker" / "prometheus" / "alerts.yml"
EVAL_AT = "5m"


def require_promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not installed (Debian's prometheus package ships it: apt-get install prometheus, "
                    "or `make test` as root)")
    return path


def series_of(metrics_text: str) -> list[dict]:
    """promtool input series: every sample of a scrape (with job="mgstreams"), constant over 10 minutes."""
    out = []
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            labels = {"job": "mgstreams", "instance": "host:8765", **sample.labels}
            shown = ",".join(f'{k}={json.dumps(v)}' for k, v in sorted(labels.items()))
            out.append({"series": f"{sample.name}{{{shown}}}", "values": f"{sample.value:g}x20"})
    return out


def firing(metrics_text: str, alerts: list[str], tmp: Path) -> dict[str, list[dict]]:
    """For each alert of `alerts`: the label sets it fires with after 5 minutes of `metrics_text` (empty: it does
    not fire). promtool answers whether a test's expectations hold, so each alert is tested against "fires with
    nothing" first; its failure report lists what fired instead."""
    promtool = require_promtool()
    out: dict[str, list[dict]] = {}
    for alert in alerts:
        test = {"rule_files": [str(RULES)], "evaluation_interval": "30s",
                "tests": [{"interval": "30s", "input_series": series_of(metrics_text),
                           "alert_rule_test": [{"eval_time": EVAL_AT, "alertname": alert, "exp_alerts": []}]}]}
        path = tmp / f"promtool-{alert}.yml"
        path.write_text(yaml.safe_dump(test))
        done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
        if done.returncode == 0:
            out[alert] = []
            continue
        report = done.stdout + done.stderr
        assert "got:[" in report, report[-3000:]
        out[alert] = _got(report)
    return out


def _got(report: str) -> list[dict]:
    """The label sets of `got:[...]` in promtool's failure report (`0:\\n Labels:{alertname="X", stream="s"}`)."""
    got = report[report.index("got:["):]
    return [dict(re.findall(r'(\w+)="([^"]*)"', labels)) for labels in re.findall(r"Labels:\{([^}]*)\}", got)]
