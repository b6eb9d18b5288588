"""The host's page at /ui: server-side HTML and SVG, checked as rendered values and in a real headless Chromium
(the distribution's package) loading it from a real host: stream names, verdicts, plotted points, a marker for
an offset change, and pixels of the chart in a screenshot kept as a test artifact."""
from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import struct
import subprocess
import time
import uuid
import zlib
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
import websocket
from host_helpers import HostProcess, http
from stream_helpers import FAST_REJOIN, wait_until

from mgstreams.host import ui
from stream_registry.lag import LagSecondsMethod, Verdict
from stream_registry.lag.verdict import OffsetChangeMark
from stream_registry.model import LagPoint, PartitionLag, StreamLag, StreamStatus

NOW = 1_800_000_000.0
ARTIFACTS_46B = Path("/work/coord/artifacts-46b")   # this session's board, when the tests run beside it
INTERVAL = 0.2


class Dom(HTMLParser):
    """Elements as (tag, attributes) and their text, from HTML the browser (or the host) produced."""

    def __init__(self, html: str):
        super().__init__()
        self.elements: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def find(self, tag: str, **attrs) -> list[dict]:
        return [a for t, a in self.elements if t == tag and all(a.get(k.replace("_", "-")) == v
                                                                  for k, v in attrs.items())]


def stream_lag(name: str, status: Verdict, message: str = "every partition OK", lag: int = 0) -> StreamLag:
    part = PartitionLag(topic="orders", partition=0, committed_offset=10, log_start_offset=0, log_end_offset=10 + lag,
                        lag=lag, lag_seconds=1.5 if lag else 0.0, lag_seconds_method=LagSecondsMethod.TIMESTAMP,
                        status=status,
                        message=message)
    return StreamLag(name=name, consumer_group=f"mgstreams_{name}", stream_status=StreamStatus.RUNNING, status=status,
                     message=message, total_lag=lag, max_lag=lag,
                     max_lag_seconds=part.lag_seconds, records_per_second=12.0, sampled_at=None, interval_s=5.0,
                     partitions=(part,))


# -- the page as values ------------------------------------------------------------------------------------
def test_page_lists_streams_draws_an_hour_and_marks_changes():
    points = [LagPoint(at=NOW - 4000, total_lag=999, max_lag_seconds=9.0, records_per_second=0.0,
                       status=Verdict.OK)] + \
        [LagPoint(at=NOW - 3000 + 300 * i, total_lag=10 * i, max_lag_seconds=float(i), records_per_second=1.0,
                  status=Verdict.OK) for i in range(10)]
    changes = [OffsetChangeMark(7, NOW - 1200, "orders", 0, 50, 0), OffsetChangeMark(3, NOW - 5000, "orders", 0, 9, 1)]
    html = ui.page([stream_lag("orders", Verdict.REWIND, "orders:0: set_stream_offset moved it back"),
                    stream_lag("evil", Verdict.STOP, "<script>alert(1)</script>", lag=4)],
                   lambda name: (points, changes) if name == "orders" else ([], []), NOW)
    dom = Dom(html)
    assert [(r["data-stream"], r["data-verdict"]) for r in dom.find("tr") if "data-stream" in r] == \
        [("orders", "REWIND"), ("evil", "STOP")]
    lag_chart = dom.find("svg", data_kind="lag")[0]
    assert lag_chart["data-points"] == "10", "the point older than an hour is not drawn"
    polyline = dom.find("polyline")[0]
    assert len(polyline["points"].split()) == 10
    assert [c["data-change-id"] for c in dom.find("line") if c.get("class") == "change"] == ["7", "7"]
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert dom.find("svg", data_kind="lag", data_points="0"), "a stream without samples says so"
    assert "no samples yet" in "".join(dom.text)
    assert html.count(f"<script>{ui.SCRIPT}</script>") == 1 and html.lower().count("<script") == 1, \
        "the page's own script only (the one its policy allows by hash)"
    assert "http://" not in html.replace('http://www.w3.org/2000/svg', ""), "nothing fetched from elsewhere"


def test_a_new_streams_chart_fills_its_width_and_an_hour_old_one_shows_the_hour():
    """Issue 46: the time axis was a fixed hour, so a stream sampled for two minutes was a sliver at the right edge.
    Now the window runs from the oldest point (at least a minute, at most an hour) to now."""
    def span_of_line(points: list[LagPoint]) -> tuple[float, dict]:
        dom = Dom(ui.page([stream_lag("orders", Verdict.OK)], lambda name: (points, []), NOW))
        xs = [float(pair.split(",")[0]) for pair in dom.find("polyline")[0]["points"].split()]
        return (max(xs) - min(xs)) / (ui.WIDTH - ui.LEFT - ui.RIGHT), dom.find("svg", data_kind="lag")[0]
    young = [LagPoint(at=NOW - 120 + 5 * i, total_lag=i, max_lag_seconds=1.0, records_per_second=1.0,
                      status=Verdict.OK) for i in range(25)]
    fraction, svg = span_of_line(young)
    assert fraction > 0.95 and svg["data-span-s"] == "120", (fraction, svg)
    assert "lag (offsets) over the last 2 min" in svg["aria-label"]
    old = [LagPoint(at=NOW - 7200 + 60 * i, total_lag=i, max_lag_seconds=1.0, records_per_second=1.0,
                    status=Verdict.OK) for i in range(121)]
    fraction, svg = span_of_line(old)
    assert svg["data-span-s"] == "3600" and "over the last hour" in svg["aria-label"] and fraction > 0.95
    one = [LagPoint(at=NOW - 0.2, total_lag=1, max_lag_seconds=1.0, records_per_second=1.0, status=Verdict.OK)]
    assert span_of_line(one)[1]["data-span-s"] == str(int(ui.MIN_SPAN_S))


def test_an_outage_shows_the_lag_as_not_known_with_the_last_value():
    """Issue 46: with the cluster away, /ui showed lag 0 as if known."""
    import dataclasses

    known = stream_lag("orders", Verdict.ERR, "the stream's cluster cannot be reached", lag=7)
    away = dataclasses.replace(known, cluster_up=False, age_s=42.0, total_lag=None, max_lag=None,
                               last_known_total_lag=7, last_known_max_lag=7, last_known_age_s=42.0,
                               partitions=tuple(dataclasses.replace(p, lag=None, last_known_lag=p.lag,
                                                                    last_known_age_s=42.0) for p in known.partitions))
    html = ui.page([away], lambda name: ([], []), NOW)
    row = Dom(html)
    assert "".join(row.text).count("? (last 7, 42 s ago)") == 2, html   # the stream's row and its partition's
    assert "<td>7</td>" not in html


def test_page_without_streams():
    dom = Dom(ui.page([], lambda name: ([], []), NOW))
    assert "No streams yet" in "".join(dom.text)


# -- the page in a browser ------------------------------------------------------------------------------------
def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no headless browser: install the distribution's Chromium (`apt-get install chromium`; "
                "`make test` does when it runs as root)")


def browse(browser: str, profile: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    """Chromium headless (no sandbox: tests may run as root in a container) on a profile of its own."""
    return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}", *args, url],
                          capture_output=True, text=True, timeout=90)


def png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit non-interlaced PNG, as Chromium writes them."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and interlace == 0 and color in (2, 6), header
    channels = 3 if color == 2 else 4
    raw, stride, rows, previous = zlib.decompress(idat), width * channels, [], bytearray(width * channels)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        rows.append(bytes(line) if channels == 3 else bytes(b for j, b in enumerate(line) if j % 4 != 3))
        previous = line
    return width, height, rows


def count_color(rows: list[bytes], rgb: str) -> int:
    needle = bytes.fromhex(rgb.lstrip("#"))
    return sum(sum(1 for i in range(0, len(row), 3) if row[i:i + 3] == needle) for row in rows)


def color_x_span(rows: list[bytes], rgb: str) -> int:
    """How many pixels wide the drawing in that colour is (its rightmost x less its leftmost)."""
    needle = bytes.fromhex(rgb.lstrip("#"))
    xs = [i // 3 for row in rows for i in range(0, len(row), 3) if row[i:i + 3] == needle]
    return max(xs) - min(xs) if xs else 0


@pytest.fixture
def ui_host(kafka, tmp_path):
    if kafka.embedded is not None:
        kafka.embedded.set_initial_rebalance_delay(200)
    host = HostProcess(tmp_path / "state", extra_args=("--lag-sample-interval", str(INTERVAL))).start()
    yield host
    host.stop()
    if kafka.embedded is not None:
        kafka.embedded.set_initial_rebalance_delay(3000)


def test_ui_in_headless_chromium(ui_host, kafka, tmp_path, tmp_path_factory):
    browser = chromium()
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 40, partitions=2)
    with httpx.Client(base_url=ui_host.url, timeout=30) as api:
        for name in ("busy", "parked"):
            body = {"name": name, "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers,
                    "sink": "null://", "consumer_group": f"ui_{uuid.uuid4().hex[:8]}", "batch_interval_ms": 20,
                    "configs": FAST_REJOIN}
            assert api.post("/streams", json=body).status_code == 201
        api.put("/streams/busy/start")
        wait_until(lambda: api.get("/streams/busy/lag").json()["total_lag"] == 0, timeout=30, what="busy caught up")
        api.patch("/streams/busy/offsets", json={"offset": {f"{topic}:0": 5}})
        [change] = api.get("/streams/busy/history").json()
        wait_until(lambda: api.get("/streams/parked/lag").json()["status"] == "STOP", timeout=15, what="parked STOP")
        time.sleep(1)   # a few more samples on the chart

        dumped = browse(browser, tmp_path / "profile", f"{ui_host.url}/ui", "--dump-dom")
        assert dumped.returncode == 0, dumped.stderr[-2000:]
        dom = Dom(dumped.stdout)
        verdicts = {s["name"]: s["status"] for s in api.get("/lag").json()}
    rows = {r["data-stream"]: r["data-verdict"] for r in dom.find("tr") if "data-stream" in r}
    assert set(rows) == {"busy", "parked"}
    assert rows["parked"] == verdicts["parked"] == "STOP"
    assert rows["busy"] in ("OK", "REWIND")
    charts = {(a["aria-label"].split(":")[0], a["data-kind"]): int(a["data-points"]) for a in dom.find("svg")}
    assert set(charts) == {(s, k) for s in ("busy", "parked") for k in ("lag", "lag-seconds")}
    assert all(n >= 5 for n in charts.values()), charts   # a point per sample since each stream was created
    markers = [m["data-change-id"] for m in dom.find("line") if m.get("class") == "change"]
    assert markers == [str(change["change_id"])] * 2, "the change is marked on both of busy's charts"
    text = " ".join(dom.text)
    # busy's partitions read caught up; parked (created, never started) is STOP at once, saying why
    assert "caught up" in text and "the stream is created: nothing consumes" in text

    artifacts = Path(os.environ.get("MGSTREAMS_ARTIFACTS_DIR") or tmp_path_factory.getbasetemp()) / "ui.png"
    artifacts.parent.mkdir(parents=True, exist_ok=True)
    shot = browse(browser, tmp_path / "profile", f"{ui_host.url}/ui", f"--screenshot={artifacts}",
                  "--window-size=1280,1800")
    assert shot.returncode == 0 and artifacts.is_file(), shot.stderr[-2000:]
    print(f"screenshot of /ui: {artifacts}")
    width, height, rows_px = png_pixels(artifacts)
    assert (width, height) == (1280, 1800)
    assert count_color(rows_px, ui.LINE["lag"]) > 20, "the lag line is drawn"
    # issue 46: streams seconds old fill their charts' width (a fixed hour drew them as a sliver at the right edge)
    plot = ui.WIDTH - ui.LEFT - ui.RIGHT
    assert color_x_span(rows_px, ui.LINE["lag"]) > plot * 0.8, (color_x_span(rows_px, ui.LINE["lag"]), plot)
    assert count_color(rows_px, ui.VERDICT_COLORS["STOP"]) > 50, "parked's STOP badge is drawn"


def test_the_lag_history_survives_a_host_restart(kafka, tmp_path):
    """Issue 46: the charts started empty after a host restart. The totals are kept in the state directory: the
    host started again (sampling only once an hour, so what its chart shows is what it read back) draws the
    points the first host sampled."""
    state = tmp_path / "state"
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 5, partitions=1)

    def points(host) -> int:
        svg = Dom(httpx.get(f"{host.url}/ui", timeout=30).text).find("svg", data_kind="lag")
        return int(svg[0]["data-points"]) if svg else 0
    first = HostProcess(state, extra_args=("--lag-sample-interval", str(INTERVAL))).start()
    try:
        with httpx.Client(base_url=first.url, timeout=60) as api, kafka.quick_rebalance():
            created = api.post("/streams", json={
                "name": "kept", "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers, "sink": "null://",
                "consumer_group": f"kept_{uuid.uuid4().hex[:8]}", "configs": FAST_REJOIN})
            assert created.status_code == 201, created.text
            assert api.put("/streams/kept/start").status_code == 200
            wait_until(lambda: points(first) >= 10, 60, what="ten points on the first host's chart")
    finally:
        first.stop()
    second = HostProcess(state, extra_args=("--lag-sample-interval", "3600")).start()
    try:
        assert points(second) >= 10, "the first host's points, read back from the state directory"
        lines = [e for e in Dom(httpx.get(f"{second.url}/ui", timeout=30).text).find("polyline")
                 if e.get("class") == "partition"]
        assert [(e["data-partition"], int(e["data-points"]) >= 10) for e in lines] == [(f"{topic}:0", True)], \
            "the partition's line is read back too"
    finally:
        second.stop()


class DevTools:
    """Headless Chromium driven over its DevTools protocol (no framework): open a page, run an expression in it,
    take a screenshot. The page stays the one loaded, so what changes in it changed without a navigation."""

    def __init__(self, binary: str, profile: Path):
        profile.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen([binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                                         "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}",
                                         "--remote-debugging-port=0", "--window-size=1280,1800", "about:blank"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        active = profile / "DevToolsActivePort"   # Chromium writes the port it took here
        wait_until(lambda: active.is_file() and active.read_text().strip(), 60, what="Chromium's DevTools port")
        port = int(active.read_text().split()[0])
        page = wait_until(lambda: next((t for t in httpx.get(f"http://127.0.0.1:{port}/json/list").json()
                                        if t["type"] == "page"), None), 30, what="Chromium's page")
        self.socket = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60, suppress_origin=True)
        self.calls = 0

    def call(self, method: str, **params) -> dict:
        self.calls += 1
        self.socket.send(json.dumps({"id": self.calls, "method": method, "params": params}))
        while True:
            answer = json.loads(self.socket.recv())
            if answer.get("id") == self.calls:
                assert "error" not in answer, answer
                return answer["result"]

    def js(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        wait_until(lambda: self.js("document.readyState") == "complete" and self.js("location.href") == url, 60,
                   what=f"{url} loaded")

    def screenshot(self, path: Path) -> None:
        shot = self.call("Page.captureScreenshot", format="png")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        self.socket.close()
        self.process.terminate()
        self.process.wait(30)


def test_the_page_updates_in_place_draws_a_line_per_partition_and_previews_records(kafka, tmp_path,
                                                                                   tmp_path_factory):
    """Issue 46: the page reloaded itself every 5 s (a navigation), drew only the total, and showed no records.
    Now, in a real Chromium holding the page opened with the token: a produce changes the lag shown without a
    navigation; each partition has its line (DOM and pixels); the preview table shows what the host's own
    check call answers, offsets and statements."""
    browser = chromium()
    token = secrets.token_urlsafe(32)
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 6, partitions=2)
    host = HostProcess(tmp_path / "state", token=token, extra_args=("--lag-sample-interval", str(INTERVAL))).start()
    chrome = DevTools(browser, tmp_path / "profile")
    try:
        with http(host, token) as api:
            assert api.post("/streams", json={"name": "watched", "topics": [topic], "sink": "null://",
                                              "bootstrap_servers": kafka.bootstrap_servers}).status_code == 201
            wait_until(lambda: api.get("/streams/watched/lag").json()["total_lag"] == 6, 30, what="lag 6 sampled")
            page = httpx.get(f"{host.url}/ui", params={"token": token}, timeout=30)
            assert "script-src 'sha256-" in page.headers["content-security-policy"]
            assert page.headers["referrer-policy"] == "no-referrer"

            chrome.open(f"{host.url}/ui?token={token}")
            lag_cell = "document.querySelector('tr[data-stream=\"watched\"] td:nth-child(4)').textContent"
            assert chrome.js(lag_cell) == "6"
            chrome.js("window.loadedOnce = 'this very page'")   # a navigation (a reload) would lose it
            kafka.produce(topic, 4, partitions=1)
            wait_until(lambda: chrome.js(lag_cell) == "10", 60, what="the lag cell updated to 10")
            assert chrome.js("window.loadedOnce") == "this very page", "updated in place, not reloaded"
            assert int(chrome.js("document.body.dataset.updates")) >= 1

            lines = "[...document.querySelectorAll('#stream-watched svg[data-kind=lag] polyline.partition')]"
            wait_until(lambda: chrome.js(f"{lines}.filter(e => Number(e.dataset.points) >= 2).length") == 2, 60,
                       what="two points on each partition's line")
            assert chrome.js(f"{lines}.map(e => e.dataset.partition)") == [f"{topic}:0", f"{topic}:1"]

            chrome.js("document.querySelector('#stream-watched details').open = true;"
                      "const form = document.querySelector('form.preview-form[data-stream=\"watched\"]');"
                      "form.elements.offset.value = 'earliest'; form.elements.limit.value = '2';"
                      "form.requestSubmit()")
            rows = "[...document.querySelectorAll('#stream-watched table.preview tbody tr')]"
            wait_until(lambda: chrome.js(f"{rows}.length") > 0, 60, what="the preview table")
            shown = chrome.js(f"{rows}.map(r => [...r.cells].map(c => c.textContent))")
            expected = api.post("/streams/watched/check", json={"offset": "earliest", "limit": 2}).json()
            assert [(int(r[1]), int(r[2]), r[3]) for r in shown] == \
                [(e["partition"], e["offset"], e["query"]) for e in expected]
            assert {(int(r[1]), int(r[2])) for r in shown} >= {(0, 0), (0, 1), (1, 0), (1, 1)}
            assert all(r[3] for r in shown), "each record's statement is shown"

            for artifacts in {Path(os.environ.get("MGSTREAMS_ARTIFACTS_DIR") or tmp_path_factory.getbasetemp()),
                              *([ARTIFACTS_46B] if ARTIFACTS_46B.parent.is_dir() else [])}:
                chrome.screenshot(artifacts / "ui-live.png")
                print(f"screenshot of /ui updated in place with a preview: {artifacts / 'ui-live.png'}")
            _, _, pixels = png_pixels(artifacts / "ui-live.png")
            for color in ui.PARTITION_COLORS[:2]:
                assert count_color(pixels, color) > 20, f"the line of a partition ({color}) is drawn"
    finally:
        chrome.close()
        host.stop()


def test_each_partition_has_a_line_under_the_total():
    points = [LagPoint(at=NOW - 10 + i, total_lag=3 * i, max_lag_seconds=1.0, records_per_second=1.0,
                       status=Verdict.OK, partitions=(("orders", 0, i), ("orders", 1, 2 * i))) for i in range(5)]
    dom = Dom(ui.page([stream_lag("orders", Verdict.OK)], lambda name: (points, []), NOW))
    lines = {e["data-partition"]: e for e in dom.find("polyline") if e.get("class") == "partition"}
    assert sorted(lines) == ["orders:0", "orders:1"] and all(e["data-points"] == "5" for e in lines.values())
    assert {e["stroke"] for e in lines.values()} == set(ui.PARTITION_COLORS[:2])


def test_the_lag_history_keeps_each_partition_and_opens_a_file_without_them(tmp_path):
    """A lag-history file of a host before the per-partition lines gains their column; its rows read back
    with none."""
    import sqlite3

    from stream_registry.lag.history import FILE_NAME, LagHistory
    old = sqlite3.connect(tmp_path / FILE_NAME)
    old.execute("CREATE TABLE points (stream TEXT NOT NULL, at REAL NOT NULL, total_lag INTEGER NOT NULL, "
                "max_lag_seconds REAL, records_per_second REAL NOT NULL, status TEXT NOT NULL, "
                "committed INTEGER NOT NULL)")
    old.execute("INSERT INTO points VALUES ('s', 1.0, 4, NULL, 0.0, 'OK', 0)")
    old.commit()
    old.close()
    history = LagHistory(tmp_path)
    history.append("s", LagPoint(at=2.0, total_lag=5, max_lag_seconds=None, records_per_second=0.0,
                                 status=Verdict.OK, partitions=(("t", 0, 2), ("t", 1, 3))), 0.0)
    assert [p.partitions for p in history.load("s", 0.0)] == [(), (("t", 0, 2), ("t", 1, 3))]
    history.close()
