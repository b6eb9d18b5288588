"""Issue 31's pure parts: typed addresses, one-line log records, operator caps and their counting."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading

import pytest

from stream_registry.addresses import BootstrapServers, Host, Url, clean_text
from stream_registry.allowlists import checked_bootstrap, checked_url, host_allowed
from stream_registry.errors import ConfigError, StreamStateError
from stream_registry.log_lines import OneLineFormatter
from stream_registry.model import MAX_RUNNING_ENV, StreamCaps
from stream_registry.registry.runners.caps import MemoryWatch, caps_from_env, check_running, running_processes

LOOPBACK = {"MGSTREAMS_ALLOWED_HOSTS": "127.0.0.1,localhost"}


@pytest.mark.parametrize("text", [" localhost", "localhost\t", "\x01localhost", "local\x00host", "local\u200bhost",
                                  "local\u00a0host", "１２７.0.0.1", "lоcalhost", "127.1", "0x7f.0.0.1", "2130706433",
                                  "127.0.0.1%2f", "[localhost]", "a..b", "-a.b", ""])
def test_a_host_with_anything_but_one_reading_is_refused_naming_the_field(text):
    with pytest.raises(ConfigError, match="^bootstrap_servers: "):
        Host.parse("bootstrap_servers", text)


def test_a_host_is_parsed_to_the_form_the_client_gets():
    assert Host.parse("f", "LocalHost.") == Host("localhost")
    assert Host.parse("f", "[::1]") == Host("::1", ip=True) and Host("::1", ip=True).text == "[::1]"
    assert Host.parse("f", "xn--bcher-kva.example").name == "xn--bcher-kva.example"


def test_a_broker_list_splits_as_librdkafka_does_or_is_refused():
    assert BootstrapServers.parse("b", "Kafka-1:9092,PLAINTEXT://[::1]:9093").text == "kafka-1:9092,PLAINTEXT://[::1]:9093"
    for text in ("evil.example:1 127.0.0.1:9092", "127.0.0.1:9092, 127.0.0.1:9093", "127.0.0.1", "h:0", "h:99999",
                 "::1:9092", "127.0.0.1:9092\n"):
        with pytest.raises(ConfigError, match="^b: "):
            BootstrapServers.parse("b", text)
    with pytest.raises(ConfigError, match="host 'evil.example'"):
        checked_bootstrap("b", "127.0.0.1:9092,evil.example:9092", LOOPBACK)


def test_a_url_carries_no_user_info_and_its_text_is_rebuilt_from_the_parse():
    assert checked_url("u", "HTTPS://LOCALHOST:8443/token?a=1", LOOPBACK).text == "https://localhost:8443/token?a=1"
    for text in ("https://evil.example\\@127.0.0.1/t", "https://127.0.0.1@evil.example/t", "https://u@127.0.0.1/",
                 " https://127.0.0.1/", "https://127.0.0.1/a b", "ftp://127.0.0.1/", "https://127.0.0.1/#f"):
        with pytest.raises(ConfigError, match="^u: "):
            checked_url("u", text, LOOPBACK)
    assert Url.parse("u", "http://[::1]:80/x", ("http",)).host == Host("::1", ip=True)


def test_hosts_match_the_allowlist_by_network_and_by_name():
    environ = {"MGSTREAMS_ALLOWED_HOSTS": "10.0.0.0/8,*.corp,db"}
    assert host_allowed(Host.parse("h", "10.1.2.3"), environ) and host_allowed(Host.parse("h", "a.corp"), environ)
    assert host_allowed(Host.parse("h", "DB."), environ)
    assert not host_allowed(Host.parse("h", "11.0.0.1"), environ) and not host_allowed(Host.parse("h", "corp"), environ)


def test_clean_text_names_the_field_and_shows_the_value_escaped():
    with pytest.raises(ConfigError) as exc:
        clean_text("consumer_group", "g\n2026-01-01 WARNING x", "group id")
    assert str(exc.value).startswith("consumer_group: 'g\\n2026") and "\n" not in str(exc.value)


def test_a_log_record_is_one_line_whatever_its_values_hold():
    formatter = OneLineFormatter("%(levelname)s %(message)s")
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "group %s", ("g\r\n2026 WARNING forged\u2028\x1b",),
                               None)
    assert formatter.format(record) == "INFO group g\\r\\n2026 WARNING forged\\u2028\\x1b"
    try:
        raise ValueError("bad\n2026 WARNING forged")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    lines = formatter.format(record).splitlines()
    assert lines[0] == "ERROR failed" and all(line.startswith("    | ") for line in lines[1:])


def test_caps_come_from_their_variables_and_a_bad_one_is_named():
    assert caps_from_env({}) == StreamCaps()
    assert caps_from_env({MAX_RUNNING_ENV: "3"}).max_running == 3
    with pytest.raises(ConfigError, match=f"^{MAX_RUNNING_ENV}: "):
        caps_from_env({MAX_RUNNING_ENV: "0"})


class _Runner:
    def __init__(self, pid=None, pids=None):
        self.pid = pid
        if pids is not None:
            self.pids = pids


def test_running_processes_are_counted_per_live_process():
    sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) for _ in range(3)]
    try:
        runners = [_Runner(sleepers[0].pid), _Runner(pids=[sleepers[1].pid, sleepers[2].pid]),
                   _Runner(None),                 # about to spawn: it holds a slot
                   _Runner(os.getpid())]          # a thread runner: no process of its own
        assert running_processes(runners) == 4
        sleepers[2].kill()
        sleepers[2].wait()
        assert running_processes(runners) == 3
        with pytest.raises(StreamStateError, match=f"^running: .*\\${MAX_RUNNING_ENV} 3"):
            check_running(3, 1, StreamCaps(max_running=3), "s")
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()


def test_the_memory_watch_reports_once_over_the_limit_naming_the_setting():
    told = []
    done = threading.Event()
    sizes = iter([10, 20, 300])
    watch = MemoryWatch(100, lambda message: (told.append(message), done.set()),
                        rss=lambda: next(sizes, 300) * 2**20).start()
    assert done.wait(5)
    watch.stop()
    assert len(told) == 1 and told[0].startswith("memory: ") and "MGSTREAMS_STREAM_MEMORY_MB" in told[0]
