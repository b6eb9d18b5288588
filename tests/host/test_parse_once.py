"""Issue 31 through real hosts: parse once and check what is used; limits no caller can pass.

- a Bolt sink whose text hides a leading space, tab or control character is refused at create and at alter,
  and no connection reaches the host it names (a listening socket on 127.0.0.2 sees none);
- a consumer group with a newline is refused, and a value a log line carries cannot forge a line;
- idle connections without the token cannot starve the owner's authenticated calls;
- no process of the host's tree has the token in /proc/<pid>/environ;
- operator caps: streams defined, stream processes running, memory of one stream process.

The scenario documented in docs/how-to/security.md: that page's commands are checked here.
"""
from __future__ import annotations

import re
import socket
import threading
import time
import uuid
from functools import partial
from pathlib import Path

import httpx
from configs import MERGE, stream_body
from host_helpers import HostProcess
from host_helpers import http as host_client
from stream_helpers import wait_until

from stream_registry.model import MAX_RUNNING_ENV, MAX_STREAMS_ENV, STREAM_MEMORY_MB_ENV

create_body = partial(stream_body, name=None, group="po", transform=MERGE, sink="null://")
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ")


def api(host: HostProcess, timeout: float = 60) -> httpx.Client:
    return host_client(host, host.token, timeout=timeout)


# -- 1. a Bolt sink reaches no host the allowlist did not judge -------------------------------
HIDDEN = [" ", "\t", "\x01", "\x00", "\u200b", "\x1b"]


def test_a_bolt_sink_with_hidden_leading_characters_reaches_no_other_host(tmp_path, kafka, listener):
    port, seen = listener
    host = HostProcess(tmp_path / "state", generated_token=True,
                       env={"MGSTREAMS_ALLOWED_HOSTS": "127.0.0.1,localhost"}).start()
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 5)
    answers = []
    try:
        with api(host) as http:
            plain = create_body(kafka, topic, name="plain")
            assert http.post("/streams", json=plain).status_code == 201, host.log()
            for index, prefix in enumerate(HIDDEN):
                sink = f"{prefix}bolt://127.0.0.2:{port}"
                created = http.post("/streams", json=create_body(kafka, topic, name=f"hid{index}", sink=sink))
                altered = http.patch("/streams/plain", json={"sink": sink})
                answers += [(repr(sink), "create", created.status_code, created.text),
                            (repr(sink), "alter", altered.status_code, altered.text)]
                for name, response in ((f"hid{index}", created), ("plain", altered)):
                    if response.status_code < 300:   # accepted: run it, as the attack did
                        http.put(f"/streams/{name}/start")
            if any(status < 300 for _, _, status, _ in answers):
                time.sleep(8)                         # the accepted streams connect (on the code before #31)
        accepted = [a[:3] for a in answers if not (a[2] == 400 and a[3].startswith('{"error":"sink: '))]
        assert not accepted and not seen, f"accepted: {accepted}; {len(seen)} connection(s) reached 127.0.0.2"
        for (_, _, _, text) in answers:               # the value is named, escaped
            assert "\\\\" in text or "\\u" in text or "surrounding whitespace" in text, text
    finally:
        host.stop()


# -- 2. a name cannot forge a log line ---------------------------------------------------------
FORGED = "2026-01-01 00:00:00,000 WARNING mgstreams.host: token rotated; use the new one"


def test_names_with_control_characters_are_refused_and_log_lines_stay_whole(tmp_path, kafka):
    host = HostProcess(tmp_path / "state", generated_token=True).start()
    topic = kafka.new_topic(partitions=1)
    try:
        with api(host) as http:
            for field, value in (("consumer_group", f"mgstreams_x\n{FORGED}"), ("consumer_group", "g\r\x1b[2K"),
                                 ("transform", f"{MERGE}\n{FORGED}"), ("name", f"inj\n{FORGED}"),
                                 ("topics", [f"t\n{FORGED}"]), ("consumer_group", " g")):
                response = http.post("/streams", json=create_body(kafka, topic, **{field: value}))
                assert response.status_code == 400, (field, response.text)
                assert response.json()["error"].startswith(f"{field}: "), response.text
            assert http.get("/streams").json() == []
            # a value that is allowed through (a transformation's error text) is escaped in the log
            kafka.produce(topic, 1)
            body = create_body(kafka, topic, name="fails", transform="stream_helpers.forging_transform",
                               restart="never")
            assert http.post("/streams", json=body).status_code == 201, host.log()
            assert http.put("/streams/fails/start").status_code == 200
            wait_until(lambda: "token rotated" in host.log(), 60, what="the transformation's error in the log")
    finally:
        host.stop()
    lines = host.log().splitlines()
    assert not any(line.startswith(FORGED[:23]) for line in lines), "a forged line reached the host's log"
    starts = [line for line in lines if line.strip() and not line.startswith(" ")]
    assert all(LOG_LINE.match(line) for line in starts), [line for line in starts if not LOG_LINE.match(line)]


# -- 3. connections without the token cannot starve the owner's ----------------------------------
def test_idle_unauthenticated_connections_cannot_starve_authenticated_calls(tmp_path):
    """64 idle connections without the token, each reopened at once when closed (the attack of issue 31 held 64,
    the default cap, and got 29 of the owner's 30 calls refused); with a cap of 8 they also overrun the pending
    pool (32), so the host keeps closing the oldest. The owner's 20 calls, each on a new connection, all answer."""
    host = HostProcess(tmp_path / "state", generated_token=True, env={"MGSTREAMS_MAX_CONNECTIONS": "8"}).start()
    port = int(host.url.rsplit(":", 1)[1])
    stop = threading.Event()
    opened = [0]

    def hold(slot: list) -> None:                     # one idle connection, reopened whenever it is closed
        while not stop.is_set():
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            except OSError:
                time.sleep(0.01)
                continue
            opened[0] += 1
            slot[:] = [sock]
            try:
                sock.settimeout(0.5)
                while not stop.is_set():
                    try:
                        if sock.recv(4096) == b"":
                            break
                    except TimeoutError:
                        continue
            except OSError:
                pass
            finally:
                sock.close()
    slots: list[list] = [[] for _ in range(64)]
    attackers = [threading.Thread(target=hold, args=(slot,), daemon=True) for slot in slots]
    try:
        for thread in attackers:
            thread.start()
        time.sleep(2.0)                               # every slot of the host is held
        results = []
        for _ in range(20):
            started = time.monotonic()
            try:
                with api(host, timeout=10) as http:   # a fresh connection each call, as a CLI's
                    status = http.get("/streams").status_code
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            results.append((status, round(time.monotonic() - started, 2)))
            time.sleep(0.1)
        ok = [r for r in results if r[0] == 200]
        assert len(ok) == 20, results
        assert max(seconds for _, seconds in ok) < 5, results
        assert opened[0] >= 64
        print(f"\nattacker connections opened: {opened[0]}; owner's calls: {results}")
    finally:
        stop.set()
        for thread in attackers:
            thread.join(5)
        host.stop()


# -- 4. the token is in no /proc/<pid>/environ of the host's tree ---------------------------------
def test_the_token_is_in_no_environment_block_of_the_host_or_its_streams(tmp_path, kafka):
    token = f"tok-{uuid.uuid4().hex}-{uuid.uuid4().hex}"
    host = HostProcess(tmp_path / "state", token=token, env={"MGSTREAMS_SINK_PASSWORD": "pw-" + token}).start()
    try:
        topic = kafka.new_topic(partitions=1)
        with api(host) as http:
            assert http.get("/streams").status_code == 200        # the host serves with that token
            assert httpx.get(f"{host.url}/streams", timeout=10).status_code == 401
            assert http.post("/streams", json=create_body(kafka, topic, name="env")).status_code == 201
            assert http.put("/streams/env/start").status_code == 200
            pid = wait_until(lambda: http.get("/streams/env").json().get("pid"), timeout=30)
            blocks = {"host": Path(f"/proc/{host.proc.pid}/environ").read_bytes(),
                      "stream": Path(f"/proc/{pid}/environ").read_bytes()}
            blocks.update((f"child {child}", Path(f"/proc/{child}/environ").read_bytes())
                          for child in _children(host.proc.pid) if child != pid)
    finally:
        host.stop()
    for who, environ in blocks.items():
        assert environ, who
        assert token.encode() not in environ and b"MGSTREAMS_TOKEN=" not in environ, who
        assert b"MGSTREAMS_SINK_PASSWORD=" not in environ, who
    assert token not in host.log()


def _children(pid: int) -> list[int]:
    import psutil
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


# -- 5. operator caps -------------------------------------------------------------------------------
def test_caps_on_streams_defined_and_processes_running_name_their_setting(tmp_path, kafka):
    host = HostProcess(tmp_path / "state", generated_token=True,
                       env={MAX_STREAMS_ENV: "3", MAX_RUNNING_ENV: "2"}).start()
    topic = kafka.new_topic(partitions=1)
    try:
        with api(host) as http:
            for name in ("c1", "c2", "c3"):
                assert http.post("/streams", json=create_body(kafka, topic, name=name)).status_code == 201
            past = http.post("/streams", json=create_body(kafka, topic, name="c4"))
            assert past.status_code == 409 and MAX_STREAMS_ENV in past.json()["error"], past.text
            assert past.json()["error"].startswith("streams: ")
            assert [s["name"] for s in http.get("/streams").json()] == ["c1", "c2", "c3"]
            assert http.put("/streams/c1/start").status_code == 200
            assert http.put("/streams/c2/start").status_code == 200
            third = http.put("/streams/c3/start")
            assert third.status_code == 409 and MAX_RUNNING_ENV in third.json()["error"], third.text
            assert third.json()["error"].startswith("running: ")
            assert http.put("/streams/c1/stop").status_code == 200   # a slot frees: the start goes through
            assert http.put("/streams/c3/start").status_code == 200
            running = {s["name"] for s in http.get("/streams").json() if s.get("pid")}
            assert running == {"c2", "c3"}, running
    finally:
        host.stop()


def test_a_stream_process_over_its_memory_cap_ends_its_own_stream_in_error(tmp_path, kafka):
    host = HostProcess(tmp_path / "state", generated_token=True, env={STREAM_MEMORY_MB_ENV: "200"}).start()
    hog, calm = kafka.new_topic(partitions=1), kafka.new_topic(partitions=1)
    kafka.produce(hog, 3)
    kafka.produce(calm, 3)
    try:
        with api(host) as http:
            assert http.post("/streams", json=create_body(kafka, hog, name="hog", transform="stream_helpers.hoard_memory",
                                                          restart="on-failure")).status_code == 201, host.log()
            assert http.post("/streams", json=create_body(kafka, calm, name="calm")).status_code == 201
            assert http.put("/streams/calm/start").status_code == 200
            calm_pid = wait_until(lambda: http.get("/streams/calm").json().get("pid"), 30, what="calm's process")
            assert http.put("/streams/hog/start").status_code == 200
            hog_state = wait_until(lambda: (s := http.get("/streams/hog").json())["status"] == "error" and s, 60,
                                   what="the hog stream in error")
            assert hog_state["error"].startswith("memory: ") and STREAM_MEMORY_MB_ENV in hog_state["error"], hog_state
            time.sleep(2)                               # not restarted: it would grow again
            again = http.get("/streams/hog").json()
            assert again["status"] == "error" and again["error"] == hog_state["error"] and not again.get("pid")
            assert http.get("/health").status_code == 200                       # the host carries on
            after = http.get("/streams/calm").json()                             # and so does the other stream
            assert after["pid"] == calm_pid and after["status"] in ("starting", "running"), after
    finally:
        host.stop()
    assert "memory" in host.log()
