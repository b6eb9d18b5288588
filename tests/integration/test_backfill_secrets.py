"""The backfill command keeps Kafka secrets off its command line and the Spark UI off (issue 26).

A command line is readable by every local user (`ps`, /proc/<pid>/cmdline): a
secret given as `--config KEY=VALUE` is refused, naming the option, and goes in
a `--config-file` instead. The Spark web UI (every interface, with links that
kill jobs) starts only with `--spark-ui`.
"""
from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from cli_helpers import mgstreams
from configs import MERGE
from paths import ROOT


def test_a_secret_on_the_command_line_is_refused_and_a_config_file_carries_it(kafka, tmp_path):
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 5, partitions=1)
    secret = f"pw-{uuid.uuid4().hex}"
    common = ["--topics", topic, "--bootstrap-servers", kafka.bootstrap_servers, "--transform", MERGE,
              "--from", "earliest", "--sink", f"cypherl://{tmp_path / 'out'}", "--dry-run"]
    for key in ("sasl.password", "ssl.key.pem", "sasl.oauthbearer.client.secret"):
        refused = mgstreams("backfill", *common, "--config", f"{key}={secret}", timeout=120)
        assert refused.returncode == 1, refused.stderr
        assert f"--config: {key!r} is a secret" in refused.stderr and secret not in refused.stderr
    settings = tmp_path / "kafka.properties"
    settings.write_text(f"# the readers' settings\nsasl.password={secret}\nclient.id=backfill\n")
    settings.chmod(0o600)
    planned = mgstreams("backfill", *common, "--config-file", str(settings), timeout=120)
    assert planned.returncode == 0, planned.stderr
    assert "plan: 1 range(s), 5 offset(s)" in planned.stderr
    assert secret not in planned.stdout + planned.stderr
    broken = tmp_path / "broken.properties"
    broken.write_text(f"no equals sign {secret}\n")
    bad = mgstreams("backfill", *common, "--config-file", str(broken), timeout=120)
    assert bad.returncode == 1 and "--config-file: line 1" in bad.stderr and secret not in bad.stderr


@pytest.mark.spark   # two JVMs of its own: on the worker that holds the run's Spark (tests/conftest.py xdist_group)
def test_the_spark_ui_is_off_unless_asked_for():
    """A session of its own, in a process of its own (a test run's shared session would be reused)."""
    code = ("from spark_bridge.spark_session import build_session\n"
            "import sys\n"
            "on = len(sys.argv) > 1\n"
            "s = build_session('local[1]', conf={'spark.ui.enabled': 'true', 'spark.ui.port': '0'} if on else None)\n"
            "print('UI', s.sparkContext.uiWebUrl)\n"
            "s.stop()\n")
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=180)
    assert "UI None" in off.stdout, off.stderr[-2000:]
    on = subprocess.run([sys.executable, "-c", code, "on"], capture_output=True, text=True, cwd=ROOT, timeout=180)
    assert "UI http://" in on.stdout, on.stderr[-2000:]
