"""The backfill's engines: local (this process) and Spark write the same thing; auto picks from the plan;
without the [spark] extra the local engine still works and the Spark engine names the extra."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from configs import MERGE
from test_spark_backfill import cypherl_keys

from mgstreams.cli.backfill import backfill as backfill_command
from spark_bridge.backfill import run_backfill
from spark_bridge.engine import (
    CostModel,
    Engine,
    SparkUnavailable,
    choose_engine,
    estimate_local,
    estimate_spark,
    spark_target,
)
from spark_bridge.engine_costs import COSTS_FILE, RUNS_KEPT, MeasuredCosts
from spark_bridge.engine_costs import Run as CostRun
from spark_bridge.job import BackfillJob, plan_job
from spark_bridge.local_engine import run_local
from spark_bridge.range_plan import OffsetRange, RangePlan
from stream_registry.errors import ConfigError
from stream_registry.offset_spec import parse_offset_spec


def plan_of(total: int, ranges: int = 8) -> RangePlan:
    size = total // ranges
    return RangePlan((), tuple(OffsetRange("t", p, 0, size) for p in range(ranges)))


# -- choosing -------------------------------------------------------------------------------
def test_spark_targets_from_master_and_remote():
    assert spark_target("local[2]", cores=2).workers == 2
    assert spark_target("local[3,2]", cores=2).workers == 3
    assert spark_target("local", cores=2).workers == 1
    assert spark_target(None, cores=4).workers == 4                      # local[*]
    cluster = spark_target("spark://m:7077", cores=2)
    assert not cluster.same_machine and cluster.startup_seconds > spark_target("local[2]").startup_seconds
    here, there = spark_target(remote="sc://localhost:15002", cores=2), spark_target(remote="sc://db1:15002")
    assert here.same_machine and not there.same_machine
    assert here.startup_seconds < spark_target("local[2]").startup_seconds      # the server is up already
    assert spark_target(remote="local[2]").startup_seconds > spark_target("local[2]").startup_seconds
    assert spark_target("local[2]", active_session=True).startup_seconds < 2


def test_auto_picks_local_for_small_plans_and_spark_where_it_pays():
    model, local2 = CostModel(), spark_target("local[2]", cores=2)
    small = choose_engine("auto", plan_of(20_000), local2, model, spark_available=True, cores=2)
    assert small.engine is Engine.LOCAL and small.local_seconds < small.spark_seconds
    assert "local ≈" in small.reason and "spark local[2] ≈" in small.reason
    huge = choose_engine("auto", plan_of(50_000_000), local2, model, spark_available=True, cores=2)
    assert huge.engine is Engine.SPARK and huge.spark_seconds < huge.local_seconds
    # the break-even lies where the estimates cross; a warm session or Connect server moves it down
    warm = spark_target("local[2]", active_session=True, cores=2)
    mid = plan_of(2_000_000)
    assert choose_engine("auto", mid, local2, model, spark_available=True, cores=2).engine is Engine.LOCAL
    assert choose_engine("auto", mid, warm, model, spark_available=True, cores=2).engine is Engine.SPARK
    # one range is one Spark task: nothing to gain from Spark on one core's worth of work
    assert choose_engine("auto", plan_of(50_000_000, ranges=1), warm, model, spark_available=True,
                         cores=2).engine is Engine.LOCAL
    assert estimate_spark(0, 0, warm, model, cores=2) == warm.startup_seconds
    assert estimate_local(int(model.local_rate), model) == pytest.approx(model.local_start + 1.0)


def test_explicit_engines_and_auto_without_spark():
    target = spark_target("local[2]", cores=2)
    assert choose_engine("local", plan_of(10**9), target).engine is Engine.LOCAL
    assert choose_engine("spark", plan_of(10), target).engine is Engine.SPARK
    no_spark = choose_engine("auto", plan_of(10**9), target, spark_available=False)
    assert no_spark.engine is Engine.LOCAL and "mgstreams[spark]" in no_spark.reason
    assert no_spark.to_dict()["engine"] == "local" and no_spark.to_dict()["records"] == 10**9
    with pytest.raises(ConfigError, match="engine: expected auto, spark or local, got 'fast'"):
        choose_engine("fast", plan_of(10), target)


def test_spark_unavailable_names_the_extra(monkeypatch):
    from spark_bridge import engine

    monkeypatch.setattr(engine.importlib.util, "find_spec", lambda name: None if name == "pyarrow" else object())
    with pytest.raises(SparkUnavailable, match=r"--engine spark: needs pyarrow \(not installed\); install the "
                                               r"Spark extra: pip install 'mgstreams\[spark\]'"):
        choose_engine("spark", plan_of(10), spark_target("local[2]"))


# -- the local engine ----------------------------------------------------------------------------
def test_local_engine_writes_what_spark_writes(spark, kafka, tmp_path):
    topic = kafka.new_topic(3)
    kafka.produce(topic, 90, partitions=3, key=lambda i: b"k%d" % i)
    outputs, reports = {}, {}
    for name in ("local", "spark"):
        job = BackfillJob(kafka.bootstrap_servers, (topic,), parse_offset_spec(4), parse_offset_spec("latest"), MERGE,
                          f"cypherl://{tmp_path / name}", batch_size=7, min_partitions=5)
        range_plan = plan_job(job)
        calls = []
        if name == "local":
            reports[name] = run_local(job, range_plan, on_progress=lambda d, t, calls=calls: calls.append((d, t)))
            assert calls == [(i, 5) for i in range(1, 6)]
        else:
            reports[name] = run_backfill(spark, job, range_plan)
        outputs[name] = {p.name: p.read_bytes() for p in (tmp_path / name).iterdir()}
    assert outputs["local"] == outputs["spark"] and len(outputs["local"]) == 5
    assert cypherl_keys(tmp_path / "local") == Counter({(topic, p, o): 1 for p in range(3) for o in range(4, 30)})
    fields = lambda r: [(p.range_index, p.range, p.records, p.statements, p.batches, Path(p.output).name)
                        for p in r.partitions]
    assert fields(reports["local"]) == fields(reports["spark"])


def test_cli_auto_on_a_small_plan_runs_locally_and_says_why(kafka, tmp_path):
    topic = kafka.new_topic(2)
    kafka.produce(topic, 40, partitions=2)
    args = ["--topics", topic, "--bootstrap-servers", kafka.bootstrap_servers, "--from", "earliest",
            "--transform", MERGE, "--sink", f"cypherl://{tmp_path / 'out'}"]
    dry = CliRunner().invoke(backfill_command, [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "engine: local (auto: 40 offset(s) in 2 range(s): local ≈" in dry.stderr
    assert not (tmp_path / "out").exists()
    result = CliRunner().invoke(backfill_command, [*args, "--report", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["engine"]["engine"] == "local" and report["engine"]["requested"] == "auto"
    assert report["engine"]["estimate_seconds"]["local"] < report["engine"]["estimate_seconds"]["spark"]
    assert report["records"] == 40 and "spark session start" not in result.stderr
    assert cypherl_keys(tmp_path / "out") == Counter({(topic, p, o): 1 for p in range(2) for o in range(20)})


@pytest.mark.parametrize("args, message", [
    (["--engine", "local", "--master", "local[2]"], "--master: 'local[2]' names a Spark engine, but --engine local"),
    (["--engine", "local", "--remote", "sc://h:15002"], "--remote: 'sc://h:15002' names a Spark engine"),
    (["--master", "local[2]", "--remote", "sc://h:1"], "--remote: give --master (classic Spark) or --remote"),
    (["--remote", "http://h:1"], "--remote: expected sc://host:port (a Spark Connect server) or local[N]"),
    (["--prepare"], "--prepare: creates indexes and constraints in Memgraph, so it needs a bolt://"),
    (["--writers", "0"], "Invalid value for '--writers'"),
])
def test_cli_engine_option_errors_name_the_option(args, message):
    result = CliRunner().invoke(backfill_command, ["--topics", "t", "--bootstrap-servers", "h:1", "--from", "earliest",
                                                   "--transform", MERGE, "--sink", "null://", *args])
    assert result.exit_code in (1, 2), result.output
    assert message in result.stderr, result.stderr


# -- without the [spark] extra ----------------------------------------------------------------------
HIDE_SPARK = textwrap.dedent("""
    import sys

    class HideSpark:
        '''What an install without mgstreams[spark] looks like: pyspark, pyarrow, pandas and py4j are absent.'''
        HIDDEN = ("pyspark", "pyarrow", "pandas", "py4j")

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in self.HIDDEN:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, HideSpark())
""")


def test_without_the_spark_extra_local_works_and_spark_names_the_extra(kafka, tmp_path):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HIDE_SPARK)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), *filter(None, [os.environ.get("PYTHONPATH")])])}

    def run(*args, module="mgstreams"):
        return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120,
                              cwd=tmp_path, env=env)

    probe = subprocess.run([sys.executable, "-c", "import pyarrow"], capture_output=True, text=True, env=env)
    assert probe.returncode == 1 and "No module named 'pyarrow'" in probe.stderr      # the hook hides them
    assert "backfill" in run("--help").stdout
    topic = kafka.new_topic(2)
    kafka.produce(topic, 30, partitions=2)
    common = ["backfill", "--topics", topic, "--bootstrap-servers", kafka.bootstrap_servers, "--from", "earliest",
              "--transform", MERGE]
    local = run(*common, "--engine", "local", "--sink", f"cypherl://{tmp_path / 'local'}")
    assert local.returncode == 0, local.stderr
    assert "engine: local (asked for (--engine local))" in local.stderr
    assert cypherl_keys(tmp_path / "local") == Counter({(topic, p, o): 1 for p in range(2) for o in range(15)})
    auto = run(*common, "--sink", f"cypherl://{tmp_path / 'auto'}")
    assert auto.returncode == 0, auto.stderr
    assert "engine: local (auto: Spark is not installed (mgstreams[spark] gives it))" in auto.stderr
    spark = run(*common, "--engine", "spark", "--sink", f"cypherl://{tmp_path / 'spark'}")
    assert spark.returncode == 1
    assert spark.stderr.strip().splitlines()[-1] == (
        "mgstreams: error: --engine spark: needs pyspark, pyarrow, pandas (not installed); install the Spark "
        "extra: pip install 'mgstreams[spark]' (or run with --engine local)")
    assert not (tmp_path / "spark").exists()


def test_a_spark_connect_token_never_shows(kafka, tmp_path):
    topic = kafka.new_topic(1)
    kafka.produce(topic, 3)
    token = "tok-" + uuid.uuid4().hex
    args = ["--topics", topic, "--bootstrap-servers", kafka.bootstrap_servers, "--from", "earliest",
            "--transform", MERGE, "--sink", "null://"]
    dry = CliRunner().invoke(backfill_command, [*args, "--engine", "spark", "--remote", f"sc://127.0.0.1:1/;token={token}",
                                                "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "engine: spark (asked for (--engine spark, sc://127.0.0.1:1/;token=****))" in dry.stderr
    bad = CliRunner().invoke(backfill_command, [*args, "--remote", f"grpc://h/;token={token}"])
    assert bad.exit_code == 1 and "--remote: expected sc://host:port" in bad.stderr
    assert "token=****" in bad.stderr
    for text in (dry.stdout, dry.stderr, bad.stdout, bad.stderr):
        assert token not in text


# -- the estimate follows what the engines measurably cost here ----------------------------------------------------
def test_measured_costs_move_the_choice_from_the_constants(tmp_path):
    """At 2M records the constants pick local (130k records/s); measured here the local engine ran 57k records/s
    and Spark local[2] 90k after an 11 s start (last round's figures): auto then picks Spark, and says why."""
    local2, mid = spark_target("local[2]", cores=2), plan_of(2_000_000)
    assert choose_engine("auto", mid, local2, spark_available=True, cores=2).engine is Engine.LOCAL
    costs = MeasuredCosts(tmp_path)
    for records in (20_000, 200_000, 2_000_000):
        costs.record(CostRun("local", "", MERGE, records, 0.3 + records / 57_000))
        costs.record(CostRun("spark", "local[2]", MERGE, records, 1.5 + records / 90_000, start=11.0))
    kept = MeasuredCosts.load(tmp_path)
    choice = choose_engine("auto", mid, local2, spark_available=True, cores=2, costs=kept, transform=MERGE)
    assert choice.engine is Engine.SPARK
    assert choice.local_seconds == pytest.approx(0.3 + 2_000_000 / 57_000, rel=1e-6)
    assert choice.spark_seconds == pytest.approx(11.0 + 1.5 + 2_000_000 / 90_000, rel=1e-6)
    assert "measured: 3 run(s) here, 57,000 records/s" in choice.reason and "measured: 3 run(s) here, 90,000" in \
        choice.reason
    small = choose_engine("auto", plan_of(200_000), local2, spark_available=True, cores=2, costs=kept, transform=MERGE)
    assert small.engine is Engine.LOCAL
    # another transformation's runs count until this one has its own; another Spark target's never do
    other = choose_engine("auto", mid, local2, spark_available=True, cores=2, costs=kept, transform="m.other")
    assert other.local_seconds == choice.local_seconds
    far = choose_engine("auto", mid, spark_target("local[4]", cores=4), spark_available=True, cores=4, costs=kept,
                        transform=MERGE)
    assert "not run here yet" in far.reason


def test_measured_costs_keep_the_last_runs_and_survive_a_bad_file(tmp_path):
    costs = MeasuredCosts(tmp_path)
    for i in range(RUNS_KEPT + 3):
        assert costs.record(CostRun("local", "", MERGE, 1000 * (i + 1), 1.0 + i))
    kept = MeasuredCosts.load(tmp_path).runs
    assert [r.records for r in kept] == [1000 * (i + 1) for i in range(3, RUNS_KEPT + 3)]
    one = MeasuredCosts(None, [CostRun("local", "", MERGE, 10_000, 2.1, at=1.0)])   # one run: the prior fixed part
    fitted = one.fitted("local", "", MERGE, prior_fixed=0.1)
    assert (fitted.fixed, fitted.rate) == (pytest.approx(0.1), pytest.approx(10_000 / 2.0))
    (tmp_path / COSTS_FILE).write_text("{not json")
    assert MeasuredCosts.load(tmp_path).runs == []
    assert choose_engine("auto", plan_of(20_000), spark_target("local[2]", cores=2), spark_available=True,
                         costs=MeasuredCosts.load(tmp_path), transform=MERGE).engine is Engine.LOCAL


def test_cli_backfill_keeps_what_its_engine_cost_for_the_next_estimate(kafka, tmp_path):
    """A backfill through the CLI records its engine's run in the state directory; the next plan's estimate is
    that measurement, not the constants."""
    topic = kafka.new_topic(2)
    kafka.produce(topic, 40, partitions=2)
    state = tmp_path / "state"
    args = ["--topics", topic, "--bootstrap-servers", kafka.bootstrap_servers, "--from", "earliest",
            "--transform", MERGE, "--sink", f"cypherl://{tmp_path / 'out'}", "--state-dir", str(state)]
    first = CliRunner().invoke(backfill_command, [*args, "--dry-run"])
    assert first.exit_code == 0, first.output
    assert "local ≈ 0.1 s (not run here yet: the model's constants)" in first.stderr
    ran = CliRunner().invoke(backfill_command, args)
    assert ran.exit_code == 0, ran.output
    runs = json.loads((state / COSTS_FILE).read_text())["runs"]
    assert [(r["engine"], r["target"], r["transform"], r["records"]) for r in runs] == [("local", "", MERGE, 40)]
    assert runs[0]["seconds"] > 0
    after = CliRunner().invoke(backfill_command, [*args, "--dry-run"])
    assert after.exit_code == 0, after.output
    assert "(measured: 1 run(s) here," in after.stderr
