"""Issue 44: last round's parse-once fuzz, extended to lists.

A value a client library reads as a list (confluent-kafka's SchemaRegistryClient splits `url` on commas and
fails over; librdkafka splits `bootstrap.servers` on commas and spaces) must be parsed as that list by us, every
member checked; text the client would read differently is refused. Members (allowed hosts, another loopback
address, a foreign name) are joined by commas, semicolons, spaces, tabs and newlines in every field that takes a
URL or a host. Each accepted value is read back the way its client reads it, by that client's own rules (the
registry client's `_BaseRestClient`, pyspark's `ChannelBuilder`, librdkafka's broker list), and every host that
reading reaches must be an allowed one.
"""
from __future__ import annotations

from collections import Counter
from urllib.parse import urlparse, urlsplit

import pytest
from hypothesis import strategies as st
from test_fuzz import REACHABLE, _used, fuzz

from stream_registry.config import StreamConfig
from stream_registry.errors import ConfigError

MEMBERS = (*REACHABLE, "127.0.0.2", "evil.example", "127.0.0.1:1", "[::1]")
SEPARATORS = (",", ", ", ",,", ";", " ", "\t", "\n", ",\n", "\r\n", " ,")
FIELDS = ("schema.registry.url", "bootstrap_servers", "oauth_url", "sink", "spark_remote")


def list_values() -> st.SearchStrategy:
    """(field, members joined by a separator), members shaped for the field (and sometimes for another's)."""
    def urls(schemes: tuple[str, ...], tails: tuple[str, ...]) -> st.SearchStrategy:
        return st.builds(lambda scheme, host, tail: f"{scheme}://{host}{tail}", st.sampled_from(schemes),
                         st.sampled_from(MEMBERS), st.sampled_from(tails))
    http = urls(("http", "https"), ("", ":8081", ":8081/", "/x", "/a?x=", "#f", "/a;b"))
    shaped = {"schema.registry.url": http, "oauth_url": http,
              "bootstrap_servers": st.builds(lambda pre, host, port: f"{pre}{host}:{port}",
                                             st.sampled_from(("", "PLAINTEXT://", "SSL://")),
                                             st.sampled_from(MEMBERS), st.sampled_from(("9092", "1"))),
              "sink": urls(("bolt", "bolt+s"), ("", ":7687", "/")),
              "spark_remote": urls(("sc",), ("", ":15002", ":15002/;token=t", "/;user_id=a"))}
    return st.sampled_from(FIELDS).flatmap(lambda field: st.builds(
        lambda items, sep: (field, sep.join(items)),
        st.lists(st.one_of(shaped[field], shaped[field], *shaped.values()), min_size=2, max_size=3),
        st.sampled_from(SEPARATORS)))


def _reached(field: str, value: str) -> list[str]:
    """The hosts the client would reach with what we hand it for `field` = `value`, read by the client's rules;
    ConfigError when we refuse the value."""
    from spark_bridge.spark_session import check_remote

    if field == "spark_remote":   # pyspark's ChannelBuilder: "http" + url[2:], urllib's urlparse
        return [urlparse("http" + check_remote(value)[2:]).hostname or ""]
    if field != "schema.registry.url":   # librdkafka's broker list, the token endpoint, the Bolt sink's host
        return _used(field, value) + ([urlsplit(value).hostname or ""] if field == "sink" else [])
    config = StreamConfig(name="s", topics=["t"], bootstrap_servers="127.0.0.1:9092", transform="m.f",
                          sink="null://", value_format="avro", schema_registry_url=value)
    config.validate()
    # confluent-kafka's _BaseRestClient: url.split(','), each stripped and its trailing '/' removed
    return [urlparse(member.strip().rstrip("/")).hostname or "" for member in config.schema_registry_url.split(",")]


def test_values_a_client_reads_as_a_list_are_checked_member_by_member(record_property, monkeypatch):
    monkeypatch.setenv("MGSTREAMS_ALLOWED_HOSTS", ",".join(REACHABLE))
    monkeypatch.setenv("MGSTREAMS_ALLOWED_CONFIGS", "")
    kinds: Counter = Counter()

    def check(drawn) -> str:
        field, value = drawn
        kinds[field] += 1
        shown = {"oauth_url": "configs['sasl.oauthbearer.token.endpoint.url']", "spark_remote": "--remote"}
        try:
            reached = _reached(field, value)
        except ConfigError as exc:
            assert str(exc).startswith((f"{shown.get(field, field)}: ", f"{shown.get(field, field)}[")), (
                field, value, str(exc))
            assert "\n" not in str(exc), str(exc)
            return "refused"
        allowed = {*REACHABLE, "::1"} if field != "spark_remote" else None
        for host in reached:
            assert host and (allowed is None or host in allowed), (field, value, reached)
        kinds[f"{field} accepted"] += 1
        return "accepted"

    outcomes = fuzz(record_property, "parse_once_lists", list_values(), check, max_examples=500, examples=(
        ("schema.registry.url", "http://127.0.0.1:1/,http://127.0.0.2:28081"),
        ("schema.registry.url", "http://127.0.0.1:1/,http://127.0.0.3:28090/admin/config?x="),
        ("schema.registry.url", "http://localhost:8081,http://127.0.0.1:8081/"),
        ("bootstrap_servers", "127.0.0.1:9092 127.0.0.2:9092"),
        ("oauth_url", "http://127.0.0.1:1/,http://127.0.0.2:1/"),
        ("sink", "bolt://127.0.0.1:7687,127.0.0.2:7687"),
        ("spark_remote", "sc://127.0.0.1:15002,evil.example:15002")))
    print(f"fuzz parse_once_lists by field: {dict(sorted(kinds.items()))}")
    assert outcomes["accepted"] and outcomes["refused"]


@pytest.mark.parametrize("value", ["http://127.0.0.1:1/,http://127.0.0.2:28081",
                                   "http://127.0.0.1:1/,http://127.0.0.3:28090/admin/config?x=",
                                   "http://127.0.0.1:8081;http://127.0.0.2:8081", "http://127.0.0.1:8081/?x=",
                                   "http://127.0.0.1:1/, http://127.0.0.2:1"])
def test_registry_url_lists_are_refused_unless_every_member_is_allowed(value, monkeypatch):
    monkeypatch.setenv("MGSTREAMS_ALLOWED_HOSTS", "localhost,127.0.0.1")
    base = {"name": "s", "topics": ["t"], "bootstrap_servers": "127.0.0.1:9092", "transform": "m.f", "sink": "null://"}
    with pytest.raises(ConfigError, match=r"^schema\.registry\.url: "):
        StreamConfig(**base, value_format="avro", schema_registry_url=value)
    two = StreamConfig(**base, value_format="avro", schema_registry_url="http://localhost:1/,http://127.0.0.1:2")
    assert two.schema_registry_url == "http://localhost:1/,http://127.0.0.1:2"
