"""Truth under outages and data loss (issue 32), through a real `mgstreams serve`: a dead cluster is not OK, records
that left the log are counted, and create checks a Bolt sink. The bundled alert rules are evaluated by promtool
against the metrics the host serves in each case. Each test fails on the code before its fix.

The scenario documented in docs/how-to/outages-and-data-loss.md: that page's commands are checked here.
"""
from __future__ import annotations

import json
import re

import httpx
import pytest
from cli_helpers import invoke, mgstreams
from configs import stream_body
from host_helpers import HostProcess
from ports import free_port
from promtool import firing
from stream_helpers import FAST_REJOIN, wait_until

INTERVAL = 1.0        # the host's lag sample interval here
BROKERS = (1, 2, 3)
OUTAGE_SHOWN_WAIT_S = 180.0   # a generous wait for the ERR state; how fast it comes is bench/outage_shown.py's
BIG = 600 * 1024      # twelve records of this move the embedded cluster's log start (5 MiB per partition)
NEW_ALERTS = ["MgstreamsClusterUnreachable", "MgstreamsStreamErr", "MgstreamsRecordsLost", "MgstreamsNearLogStart"]


@pytest.fixture(scope="module")
def host(kafka, tmp_path_factory):
    with kafka.quick_rebalance():
        process = HostProcess(tmp_path_factory.mktemp("outages") / "state",
                              extra_args=("--lag-sample-interval", str(INTERVAL))).start()
        yield process
        process.stop()


@pytest.fixture(scope="module")
def api(host):
    with httpx.Client(base_url=host.url, timeout=60) as client:
        yield client


def _create(api, kafka, name: str, topic: str, **fields) -> None:
    body = stream_body(kafka, topic, name=name, group=f"out_{name}",
                       **{"sink": "null://", "batch_interval_ms": 20, "configs": FAST_REJOIN, **fields})
    response = api.post("/streams", json=body)
    assert response.status_code == 201, response.text
    assert api.put(f"/streams/{name}/start").status_code == 200


def _samples(text: str, name: str) -> dict[tuple, float]:
    out = {}
    for labels, value in re.findall(rf"^{name}\{{([^}}]*)\}} (\S+)$", text, re.M):
        out[tuple(sorted(re.findall(r'(\w+)="([^"]*)"', labels)))] = float(value)
    return out


def _fired(alerts: dict[str, list[dict]], stream: str) -> set[str]:
    return {name for name, fired in alerts.items() if any(labels.get("stream") == stream for labels in fired)}


# -- create checks a Bolt sink --------------------------------------------------------------------------------------
def test_create_refuses_a_bolt_sink_nothing_answers_on_unless_told_not_to_check(host, kafka):
    """`mgstreams create p7 --topic orders --sink bolt://...` printed `p7 created` with nothing listening."""
    topic = kafka.new_topic(partitions=1)
    sink = f"bolt://127.0.0.1:{free_port()}"
    refused = invoke("create", "p7", "--topic", topic, "--bootstrap", kafka.bootstrap_servers,
                     "--sink", sink, host=host)
    assert refused.exit_code != 0, refused.output
    assert f"sink: '{sink}' does not answer as a Bolt server" in refused.output, refused.output
    assert "Connection refused" in refused.output and "--no-check-sink" in refused.output, refused.output
    assert "p7" not in [s["name"] for s in httpx.get(f"{host.url}/streams").json()], "nothing was stored"
    created = invoke("create", "p7", "--topic", topic, "--bootstrap", kafka.bootstrap_servers,
                     "--sink", sink, "--no-check-sink", host=host)
    assert created.exit_code == 0 and "p7 created" in created.output, created.output
    assert httpx.delete(f"{host.url}/streams/p7").status_code == 200


# -- records that left the log --------------------------------------------------------------------------------------
def test_lost_records_are_counted_everywhere_until_acknowledged(host, api, kafka, embedded_kafka, tmp_path):
    """A stream stopped while retention moved the log start past its committed offset: librdkafka reset it to the
    log start and every surface said OK. Now the loss is in GET /streams/{name}, /metrics (per partition), the
    history (from where to where), the lag verdict (ERR) and the alert rules, until acknowledged."""
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 3, partitions=1)
    _create(api, kafka, "lossy", topic)
    wait_until(lambda: api.get("/streams/lossy/offsets").json()[0]["committed_offset"] == 3, 60, what="committed 3")
    assert api.put("/streams/lossy/stop").status_code == 200
    kafka.produce(topic, 12, partitions=1, payload=lambda i: b'{"pad": "' + b"x" * BIG + b'"}')
    log_start = api.get("/streams/lossy/offsets").json()[0]["log_start_offset"]
    assert log_start > 3, log_start
    wait_until(lambda: [p["log_start_offset"] for p in api.get("/streams/lossy/lag").json()["partitions"]]
               == [log_start], 30,
               what="a lag round that sees the log start past the committed offset")
    before = firing(api.get("/metrics").text, NEW_ALERTS, tmp_path)
    assert _fired(before, "lossy") == {"MgstreamsNearLogStart"}, before   # warned before the loss is counted
    assert api.put("/streams/lossy/start").status_code == 200
    info = wait_until(lambda: (i := api.get("/streams/lossy").json())["records_lost"] and i, 60, what="the count")
    lost = log_start - 3
    assert (info["records_lost"], info["records_lost_unacknowledged"]) == (lost, lost), info
    [row] = [h for h in api.get("/streams/lossy/history").json() if h["status"] == "lost"]
    assert (row["partition"], row["previous_offset"], row["offset"]) == (0, 3, log_start), row
    lag = wait_until(lambda: (v := api.get("/streams/lossy/lag").json())["status"] == "ERR" and v, 30,
                     what="the ERR verdict")
    assert f"{lost} record(s) left the log before the stream read them" in lag["message"], lag
    metrics = api.get("/metrics").text
    assert _samples(metrics, "mgstreams_records_lost_total") == {
        (("partition", "0"), ("stream", "lossy"), ("topic", topic)): float(lost)}
    assert _samples(metrics, "mgstreams_records_lost_unacknowledged")[(("stream", "lossy"),)] == float(lost)
    assert {"MgstreamsRecordsLost", "MgstreamsStreamErr"} <= _fired(firing(metrics, NEW_ALERTS, tmp_path), "lossy")
    described = mgstreams("describe", "lossy", host=host)
    assert f"records lost {lost} ({lost} not acknowledged)" in described.stdout, described.stdout
    page = api.get("/ui").text
    assert re.search(rf'data-stream="lossy" data-verdict="ERR">.*?<td data-count="lost">{lost} \({lost} not '
                     rf"acknowledged\)</td>", page), page[:3000]

    acknowledged = invoke("acknowledge-loss", "lossy", host=host)
    assert acknowledged.exit_code == 0 and f"lossy: {lost} lost record(s), all acknowledged" in acknowledged.output
    wait_until(lambda: api.get("/streams/lossy/lag").json()["status"] != "ERR", 30, what="ERR cleared")
    info = api.get("/streams/lossy").json()
    assert (info["records_lost"], info["records_lost_unacknowledged"]) == (lost, 0), info
    assert "MgstreamsRecordsLost" not in _fired(firing(api.get("/metrics").text, NEW_ALERTS, tmp_path), "lossy")
    api.delete("/streams/lossy")


def test_a_stopped_stream_with_nothing_waiting_is_no_red_stop(host, api, kafka):
    topic = kafka.new_topic(partitions=1)
    body = stream_body(kafka, topic, name="idle", group="out_idle", sink="null://", configs=FAST_REJOIN)
    assert api.post("/streams", json=body).status_code == 201
    wait_until(lambda: api.get("/streams/idle/lag").json()["status"] == "STOP", 30, what="idle STOP")
    page = api.get("/ui").text
    assert re.search(r'data-stream="idle" data-verdict="STOP">.*?background:#757575">STOP<', page), page[:3000]
    assert re.search(r'<td data-count="dead-lettered">0</td><td data-count="skipped">0</td>'
                     r'<td data-count="pending">0</td>', page)
    api.delete("/streams/idle")


# -- a dead cluster ------------------------------------------------------------------------------------------------
def test_a_dead_cluster_is_shown_everywhere(host, api, kafka, embedded_kafka, tmp_path):
    """With the embedded Kafka down under four running streams, `top`, /ui and /lag kept every stream `running`
    with a green OK for over 60 s, a stale records/s, mgstreams_stream_up 1: no alert rule could fire. The test
    waits for the state (generously: a loaded machine is slow); the issue's 30 s is bench/outage_shown.py's."""
    names = [f"dead{i}" for i in range(4)]
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 40, partitions=2)
    for name in names:
        _create(api, kafka, name, topic)
    for name in names:
        wait_until(lambda n=name: (v := api.get(f"/streams/{n}/lag").json())["total_lag"] == 0
                   and v["stream_status"] == "running", 60, what=f"{name} caught up")
    healthy = firing(api.get("/metrics").text, NEW_ALERTS, tmp_path)
    assert not any(_fired(healthy, name) for name in names), healthy
    for broker in BROKERS:
        embedded_kafka.broker_down(broker)
    try:
        for name in names:
            lag = wait_until(lambda n=name: (v := api.get(f"/streams/{n}/lag").json())["status"] == "ERR" and v,
                             OUTAGE_SHOWN_WAIT_S, what=f"{name} ERR")
            assert lag["records_per_second"] == 0.0 and "cannot be reached since 20" in lag["message"], lag
        def listed() -> list[dict]:
            return [s for s in api.get("/streams").json() if s["name"] in names]
        wait_until(lambda: all((s["error"] or "").startswith("all brokers down since 20") for s in listed()), 30,
                   what="the outage in every stream's error (GET /streams)")
        assert {s["status"] for s in listed()} == {"running"}, listed()
        metrics = api.get("/metrics").text
        assert {n: _samples(metrics, "mgstreams_cluster_up")[(("stream", n),)] for n in names} == \
            dict.fromkeys(names, 0.0)
        alerts = firing(metrics, NEW_ALERTS, tmp_path)
        assert all({"MgstreamsClusterUnreachable", "MgstreamsStreamErr"} <= _fired(alerts, n) for n in names), alerts
        page = api.get("/ui").text
        assert all(f'data-stream="{n}" data-verdict="ERR"' in page for n in names), page[:3000]
        top = mgstreams("top", "--once", host=host)
        rows = {line.split()[1]: line.split() for line in top.stdout.splitlines()[2:] if len(line.split()) > 1}
        assert all(rows[n][2:5] == ["running", "ERR", "0.0"] for n in names), top.stdout   # after `#` and NAME
        _outage_shown_as_unknown(api, host, names)
    finally:
        for broker in BROKERS:
            embedded_kafka.broker_up(broker)
    for name in names:
        wait_until(lambda n=name: api.get(f"/streams/{n}/lag").json()["status"] != "ERR", 90, what=f"{name} back")
        api.delete(f"/streams/{name}")


def _outage_shown_as_unknown(api, host, names: list[str]) -> None:
    """Issue 46: during the outage lag said `0` and every partition row stayed a green "OK caught up", describe
    took 12 s and failed, /health said ok; then the JSON still carried the last lag as a number. Now: the lag not
    known (with the last known value and its age) in `top` and `lag`, every partition row ERR saying so, describe's
    rows from the last round at once (each saying of when), /health degraded in KIP-1017's shape; in the JSON (the
    lag endpoints, describe's, the CLI's --json) the lag is null, the last known value and its age beside it."""
    top = mgstreams("top", "--once", host=host)
    for n in names:
        [row] = [line for line in top.stdout.splitlines() if re.match(rf"\d+ +{n} ", line)]
        assert re.search(r" ERR +0\.0 +\? \(last \d+, \d+ s ago\)", row), top.stdout   # the last value the round had
    every = {s["name"]: s for s in api.get("/lag").json()}
    for n in names:
        _lag_not_known(every[n])
    lag = api.get(f"/streams/{names[0]}/lag").json()
    _lag_not_known(lag)
    assert lag["partitions"] and all(p["status"] == "ERR" and p["alarm"] for p in lag["partitions"]), lag
    assert all(p["message"].startswith("not known: the stream's cluster cannot be reached since 20")
               and "last known at 20" in p["message"] for p in lag["partitions"]), lag
    as_json = mgstreams("lag", names[0], "--json", host=host)
    assert as_json.returncode == 0, as_json.stderr
    _lag_not_known(json.loads(as_json.stdout))
    shown = mgstreams("lag", names[0], host=host)
    table, _, line = shown.stdout.strip().rpartition("\n")
    assert f"not known (last {lag['last_known_total_lag']}, " in line and " OK " not in table, shown.stdout
    assert all(f"? (last {p['last_known_lag']})" in table for p in lag["partitions"]), shown.stdout
    described = api.get(f"/streams/{names[0]}/offsets")
    assert described.status_code == 200, described.text
    _rows_not_known(described.json())
    _rows_not_known(json.loads(mgstreams("describe", names[0], "--json", host=host).stdout))
    table = mgstreams("describe", names[0], host=host)
    assert table.returncode == 0 and "the stream's cluster cannot be reached; last known at 20" in table.stdout, \
        table.stdout + table.stderr
    assert "TASK" in table.stdout.splitlines()[1], table.stdout
    metrics = api.get("/metrics").text   # no lag series while not known (kafka-lag-exporter drops them too)
    assert not any(dict(labels).get("stream") in names
                   for series in ("kafka_consumergroup_group_lag", "kafka_consumergroup_group_sum_lag")
                   for labels in _samples(metrics, series)), metrics
    health = httpx.get(f"{host.url}/health", timeout=30)
    assert health.status_code == 200 and health.json()["status"] == "degraded", health.text
    assert f"{len(names)} of {len(names)} running stream(s) cannot reach" in health.json()["message"], health.text
    assert not any(n in health.text for n in names), "a probe without the token learns no stream's name"


def _lag_not_known(lag: dict) -> None:
    """A stream's lag round (JSON) while its cluster cannot be reached: null lag, the last known value beside it."""
    assert (lag["total_lag"], lag["max_lag"], lag["cluster_up"]) == (None, None, False), lag
    assert isinstance(lag["last_known_total_lag"], int) and isinstance(lag["last_known_max_lag"], int), lag
    assert lag["last_known_at"].startswith("20") and lag["last_known_age_s"] >= 0, lag
    assert lag["partitions"] and all(
        p["lag"] is None and p["lag_seconds"] is None and isinstance(p["last_known_lag"], int)
        and p["last_known_at"] == lag["last_known_at"] and p["last_known_age_s"] == lag["last_known_age_s"]
        for p in lag["partitions"]), lag
    assert sum(p["last_known_lag"] for p in lag["partitions"]) == lag["last_known_total_lag"], lag


def _rows_not_known(rows: list[dict]) -> None:
    """describe's rows (JSON) from the last round: the lag null, the last known one, when and how long ago."""
    assert rows and all(r["lag"] is None and r["position"] is None and isinstance(r["last_known_lag"], int)
                        and r["last_known_at"].startswith("20") and r["last_known_age_s"] >= 0 for r in rows), rows
