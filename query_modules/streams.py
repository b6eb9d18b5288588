"""`CALL streams.*`: Kafka streams managed from Cypher, run by the stream host.

The streams run in `mgstreams serve`, outside Memgraph: this file is only its
client. Each procedure validates what it can locally, sends one HTTP request to
the host at $MGSTREAMS_URL (default http://127.0.0.1:8765; the token is
$MGSTREAMS_TOKEN, else the content of the file $MGSTREAMS_TOKEN_FILE names, sent
as a bearer token; all read at call time) and shapes the answer
into records. It imports only the standard library and mgp and starts no
thread, and the single file can be copied into any Memgraph with nothing
installed into its Python.

Requests go over kept-alive connections (a new TCP connection per call cost
about half a millisecond of an offset change): a call takes an idle one to the
host's address, or opens one, and gives it back once the answer is read whole.
They live in this module's globals, so Memgraph's module reload (which purges
every package this file imports from sys.modules) drops them with the module
(their sockets close when collected): a connection never outlives the http.client
it was made with. A kept connection the host has closed meanwhile (its idle
timeout) is found when the request cannot be sent or no status line comes: the
request is sent again once, on a new connection.

A failure of any kind reaches the client as one error whose last line says what
was wrong (the host's `field: reason`, or where the host could not be reached).
Offsets use Memgraph's dialect: -1 is the beginning, -2 the end, as in
`mg.kafka_set_stream_offset`; prefer "earliest" / "latest".

Why one module of over 400 lines: Memgraph loads one file per namespace (a query module is one file), and
this one must be copied alone into any Memgraph, its HTTP client included.

No `from __future__ import annotations` here: mgp reads the annotations as
types to build each procedure's Cypher signature.
"""
import datetime
import http.client
import json
import os
import threading
import urllib.parse

import mgp

DEFAULT_URL = "http://127.0.0.1:8765"
# Read at load: a Memgraph container sets it so Cypher-created streams write to that Memgraph.
DEFAULT_SINK = os.environ.get("MGSTREAMS_DEFAULT_SINK", "bolt://localhost:7687")
TIMEOUT_S = 30.0   # every call but set_stream_offset: a Bolt worker is held while we wait
ALTER_TIMEOUT_S = 150.0   # alter may import a transformation (60 s at most) and restart the stream (stop: 30 s)
MARGIN_S = 5.0     # set_stream_offset waits its own timeout_ms, plus this for the host's queries
DEFAULT_TIMEOUT_MS = 10_000  # an offset change waits this long for the rebalance unless told otherwise
MAX_TIMEOUT_MS = 3_600_000   # the longest offset change the host waits for (one hour)
MAX_CHECK_LIMIT = 1000       # records per partition a preview reads at most
CHECK_TIMEOUT_MS = 20_000    # a preview reads and transforms within this (a Bolt worker waits meanwhile)

StatusRecord = mgp.Record(name=str, status=str)
OPTION_KEYS = ("delivery", "errors.tolerance", "errors.deadletterqueue.topic.name",
               "errors.deadletterqueue.context.headers.enable", "bolt_unwind", "tasks", "on_data_loss",
               "check_sink", "key.format", "value.format", "schema.registry.url", "transform.options",
               "engine", "spark.remote", "spark.master")


def _token() -> str:
    """$MGSTREAMS_TOKEN, else the file $MGSTREAMS_TOKEN_FILE names (a compose secret, the host's token file)."""
    token = os.environ.get("MGSTREAMS_TOKEN")
    path = os.environ.get("MGSTREAMS_TOKEN_FILE")
    if token or not path:
        return token or ""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read(4096).strip()
    except OSError as exc:
        raise Exception(f"MGSTREAMS_TOKEN_FILE: cannot read {path!r}: {exc.strerror}") from None


def _host(method: str, path: str, body: dict = None, timeout: float = TIMEOUT_S):
    """One request to the host: its JSON answer, or an Exception whose message is one line."""
    url = (os.environ.get("MGSTREAMS_URL") or DEFAULT_URL).rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise Exception(f"MGSTREAMS_URL: {url!r} is not an http:// URL")
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    token = _token()
    if token:
        headers["Authorization"] = "Bearer " + token
    data = _json_body(body) if body is not None else None
    try:
        status, raw = _exchange(url, method, path, data, headers, timeout)
    except _NotSent as exc:
        if isinstance(exc.__cause__, TimeoutError):
            raise Exception(f"host: no answer from {url} within {timeout:g} s") from None
        raise Exception(f"no mgstreams host at {url}: start one with `mgstreams serve`") from None
    except TimeoutError:
        raise Exception(f"host: no answer from {url} within {timeout:g} s") from None
    except Exception as exc:  # reset mid-answer, a broken status line...
        raise Exception(f"host: request to {url} failed: {type(exc).__name__}: {exc}") from None
    try:
        answer = json.loads(raw)
    except ValueError:
        raise Exception(f"host: {url} answered HTTP {status} without JSON; is it an mgstreams host?") from None
    if status >= 400:
        error = answer.get("error") if isinstance(answer, dict) else None
        if status == 401:
            error = (f"{error or 'authorization: a token is required'}: set MGSTREAMS_TOKEN or MGSTREAMS_TOKEN_FILE "
                     f"(the host's token file, <its state dir>/api-token when it generated one) in Memgraph's "
                     f"environment")
        raise Exception(error or f"host: {url} answered HTTP {status}")
    return answer


class _NotSent(Exception):
    """The request could not be sent (no connection, or it broke while sending): the host has not answered."""


_IDLE = {}                 # (scheme, host:port) -> idle kept-alive connections to the host
_IDLE_LOCK = threading.Lock()
MAX_IDLE = 4               # per address: Memgraph may run several procedures at once
_GONE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


def _exchange(url: str, method: str, path: str, data, headers: dict, timeout: float):
    """(status, body) of one request over a kept-alive connection (a new one when none is idle, and once more
    on a new one when a kept one turns out closed by the host before it answered)."""
    parts = urllib.parse.urlsplit(url)
    address = (parts.scheme, parts.netloc)
    target = parts.path + path
    connection = _idle(address)
    if connection is not None:
        try:
            return _request(address, connection, method, target, data, headers, timeout)
        except (_NotSent, *_GONE) as exc:   # closed by the host while idle: not answered; send it anew
            if isinstance(exc, _NotSent) and isinstance(exc.__cause__, TimeoutError):
                raise
    connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return _request(address, connection_class(parts.hostname, parts.port, timeout=timeout), method, target, data,
                    headers, timeout)


def _request(address, connection, method: str, target: str, data, headers: dict, timeout: float):
    connection.timeout = timeout
    if connection.sock is not None:
        connection.sock.settimeout(timeout)
    try:
        try:
            connection.request(method, target, body=data, headers=headers)
        except OSError as exc:
            raise _NotSent(str(exc)) from exc
        response = connection.getresponse()
        raw = response.read()
    except BaseException:
        connection.close()
        raise
    if response.will_close:
        connection.close()
    else:
        _give_back(address, connection)
    return response.status, raw


def _idle(address):
    with _IDLE_LOCK:
        kept = _IDLE.get(address)
        return kept.pop() if kept else None


def _give_back(address, connection) -> None:
    with _IDLE_LOCK:
        kept = _IDLE.setdefault(address, [])
        if len(kept) < MAX_IDLE:
            kept.append(connection)
            return
    connection.close()


def _json_body(fields: dict) -> bytes:
    """The request body; a value JSON cannot carry (a node, a date) is an error naming its field."""
    def unsendable(value):
        raise TypeError(f"a {type(value).__name__} cannot be sent to the host; use numbers, strings, lists, maps")
    for field, value in fields.items():
        try:
            json.dumps(value, default=unsendable)
        except (TypeError, ValueError) as exc:
            raise Exception(f"{field}: {exc}") from None
    return json.dumps(fields).encode()


def _stream(name: str, suffix: str = "") -> str:
    return "/streams/" + urllib.parse.quote(name, safe="") + suffix


def _map(value: object, field: str) -> dict:
    """mgp.Map also admits nodes and relationships; only a real map is meant here."""
    if not isinstance(value, dict):
        raise Exception(f"{field}: expected a map, got {type(value).__name__}")
    return dict(value)


def _status(info: dict) -> mgp.Record:
    return mgp.Record(name=info["name"], status=info["status"])


# Memgraph turns each Python default into the Cypher default (a map must be a dict); _map copies it, never
# changing the shared default.
@mgp.read_proc
def create(name: str, topics: mgp.List[str], bootstrap_servers: str, transform: str = "",
           sink: str = DEFAULT_SINK, consumer_group: str = "", batch_size: int = 1000,
           batch_interval_ms: int = 100, configs: mgp.Map = {}, credentials: mgp.Map = {},  # noqa: B006 (above)
           restart: str = "on-failure", options: mgp.Map = {}) -> StatusRecord:  # noqa: B006 (above)
    """Create a stream (stopped): topics, brokers, transformation `module.function`, graph sink URI.

    An empty transform stores each message as a (:KafkaMessage) node; an empty
    consumer_group means `mgstreams_<name>`. The stream runs in a process of its
    own; restart "on-failure" starts it again (with backoff) when that process
    dies, "never" leaves it in error. options takes Kafka Connect's keys: "delivery"
    ("at_least_once" | "exactly_once"), "errors.tolerance" ("none" | "all"),
    "errors.deadletterqueue.topic.name", "errors.deadletterqueue.context.headers.enable",
    "bolt_unwind" (true | false: a Bolt sink folds runs of one query into UNWIND statements),
    "tasks" (1 to 32 member processes of the stream's consumer group; default 1).
    "on_data_loss" ("continue" | "stop": when records left the log before the stream read them),
    "check_sink" (true | false: connect and log in to a Bolt sink first; false for a Memgraph not up yet).
    Nothing is stored when a check fails.
    """
    configs, credentials = _map(configs, "configs"), _map(credentials, "credentials")
    options = _map(options, "options")
    for key in options:
        if key not in OPTION_KEYS:
            raise Exception(f"options: unknown key {key!r} (known: {', '.join(OPTION_KEYS)})")
    return _status(_host("POST", "/streams", {
        "name": name, "topics": [*topics], "bootstrap_servers": bootstrap_servers, "transform": transform,
        "sink": sink, "consumer_group": consumer_group, "batch_size": batch_size,
        "batch_interval_ms": batch_interval_ms, "configs": configs, "credentials": credentials,
        "restart": restart, **options}))


@mgp.read_proc
def alter(name: str, changes: mgp.Map) -> StatusRecord:
    """Change a stream: `changes` holds any of batch_size, batch_interval_ms, transform, sink, tasks, configs (merged
    into the stream's configs; a null value removes a key) and the options create takes (errors.tolerance,
    key.format, value.format, schema.registry.url, transform.options, ...), e.g. {batch_size: 50, configs: {`fetch.wait.max.ms`:
    "10"}}. Checked as create is; a refusal changes nothing. A running stream restarts to apply it, from its
    committed offsets; pending offset changes and the history stay. With a sink change, `from` (any offset spec)
    names where the new sink starts; without it an exactly-once stream's new sink continues where it stood."""
    return _status(_host("PATCH", _stream(name), _map(changes, "changes"), timeout=ALTER_TIMEOUT_S))


@mgp.read_proc
def start(name: str) -> StatusRecord:
    """Start consuming; the status is "starting" until the group assigns partitions."""
    return _status(_host("PUT", _stream(name, "/start")))


@mgp.read_proc
def stop(name: str) -> StatusRecord:
    """Stop consuming and leave the consumer group (offsets stay committed)."""
    return _status(_host("PUT", _stream(name, "/stop")))


@mgp.read_proc
def drop(name: str) -> StatusRecord:
    """Stop the stream if it runs and forget it; returns its last status."""
    return _status(_host("DELETE", _stream(name)))


def _procedure_name(name: str):
    """Register a procedure under a name that would shadow a builtin as a Python function."""
    def rename(fn):
        fn.__name__ = name
        return fn
    return rename


@mgp.read_proc
@_procedure_name("list")
def list_streams() -> mgp.Record(name=str, topics=mgp.List[str], consumer_group=str, bootstrap_servers=str,
                         transform=str, sink=str, status=str, error=mgp.Nullable[str], configs=mgp.Map,
                         credentials=mgp.Map, restart=str, pid=mgp.Nullable[int],
                         rss_bytes=mgp.Nullable[int], restarts=int, delivery=str, errors_tolerance=str,
                         dead_letter_topic=mgp.Nullable[str], dead_lettered=int, skipped=int,
                         batch_size=int, batch_interval_ms=int, detail=mgp.Nullable[str], tasks=int,
                         pids=mgp.List[int]):
    """Every stream with its configuration (secrets in configs and all credentials masked) and, while it
    runs, its process: pid, resident memory, restarts after that process died; `detail` says what a
    `starting` stream waits for."""
    fields = ("name", "topics", "consumer_group", "bootstrap_servers", "transform", "sink", "status", "error",
              "configs", "credentials", "restart", "pid", "rss_bytes", "restarts", "delivery", "errors_tolerance",
              "dead_letter_topic", "dead_lettered", "skipped", "batch_size", "batch_interval_ms", "detail")
    return [mgp.Record(**{field: info.get(field) for field in fields}, tasks=info.get("tasks", 1),
                       pids=list(info.get("pids") or ())) for info in _host("GET", "/streams")]


@mgp.read_proc
def set_stream_offset(name: str, offset: mgp.Any, timeout_ms: int = DEFAULT_TIMEOUT_MS, dry_run: bool = False
                      ) -> mgp.Record(topic=str, partition=int, previous_offset=mgp.Nullable[int],
                                      offset=mgp.Nullable[int], status=str, message=str):
    """Move the stream's consumer on every partition the offset spec targets.

    offset: an integer (-1 beginning, -2 end, N >= 0), a string ("earliest",
    "latest", "committed", "+N"/"-N" relative, an ISO-8601 datetime, a duration
    back from now such as "-PT15M" or "-P1D"), {"group": "other_group"} (that
    group's committed offsets) or a map {topic: spec, "topic:partition": spec}.
    One record per partition: status "applied"/"clamped" once the consumer holds
    the partition, "pending" while a rebalance is due (applied at assignment),
    "planned" with dry_run, "unchanged" where the other group has no commit.
    """
    _timeout_ms(timeout_ms)
    return _change_records(_host("PATCH", _stream(name, "/offsets"),
                                 {"offset": offset, "timeout_ms": timeout_ms, "dry_run": dry_run},
                                 timeout=timeout_ms / 1000.0 + MARGIN_S))


@mgp.read_proc
def offsets(name: str) -> mgp.Record(topic=str, partition=int, committed_offset=mgp.Nullable[int],
                                     position=mgp.Nullable[int], log_start_offset=int, log_end_offset=int,
                                     lag=mgp.Nullable[int], assigned=bool, stored_offset=mgp.Nullable[int],
                                     resume_offset=mgp.Nullable[int], task=mgp.Nullable[int]):
    """Per partition: committed offset, consumer position, log start/end, lag, held by this stream, the
    offset stored in the graph (exactly-once streams) and where the stream resumes if started now."""
    return [mgp.Record(topic=p["topic"], partition=p["partition"], committed_offset=p["committed_offset"],
                       position=p["position"], log_start_offset=p["log_start_offset"],
                       log_end_offset=p["log_end_offset"], lag=p["lag"], assigned=bool(p["assigned"]),
                       stored_offset=p.get("stored_offset"), resume_offset=p.get("resume_offset"),
                       task=p.get("task"))
            for p in _host("GET", _stream(name, "/offsets"))]


@mgp.read_proc
def history(name: str) -> mgp.Record(change_id=int, changed_at=mgp.LocalDateTime, topic=str, partition=int,
                                     previous_offset=mgp.Nullable[int], offset=int, status=str,
                                     message=mgp.Nullable[str]):
    """The audit of offset changes applied to the stream (and poison messages set aside), newest first;
    changed_at is UTC; change_id is what streams.revert takes."""
    return [mgp.Record(change_id=h["change_id"], changed_at=_utc(h["changed_at"]), topic=h["topic"],
                       partition=h["partition"], previous_offset=h["previous_offset"], offset=h["offset"],
                       status=h["status"], message=h.get("message"))
            for h in _host("GET", _stream(name, "/history"))]


@mgp.read_proc
def lag(name: str) -> mgp.Record(topic=str, partition=int, lag=mgp.Nullable[int], lag_seconds=mgp.Nullable[float],
                                 status=str, message=str):
    """Per partition, from the host's last sample: lag in offsets (null while not known: its cluster cannot be
    reached), lag_seconds (age of the oldest unprocessed message: from its timestamp, else extrapolated), and
    Burrow's verdict as status (OK, WARN, STALL, STOP, REWIND) with the reason; a rewind made through
    set_stream_offset names its change id."""
    return [mgp.Record(topic=p["topic"], partition=p["partition"], lag=p["lag"], lag_seconds=p["lag_seconds"],
                       status=p["status"], message=p.get("message") or "")
            for p in _host("GET", _stream(name, "/lag"))["partitions"]]


@mgp.read_proc
def health() -> mgp.Record(name=str, status=str, total_lag=mgp.Nullable[int], max_lag_seconds=mgp.Nullable[float],
                           records_per_second=float):
    """Every stream's lag verdict (its worst partition's: OK, WARN, STALL, STOP, REWIND), total lag (null while not
    known), the largest lag in seconds and the offsets it committed per second over the last samples."""
    return [mgp.Record(name=s["name"], status=s["status"], total_lag=s["total_lag"],
                       max_lag_seconds=s["max_lag_seconds"], records_per_second=float(s["records_per_second"]))
            for s in _host("GET", "/lag")]


def _timeout_ms(timeout_ms: int) -> None:
    if isinstance(timeout_ms, bool) or timeout_ms <= 0:
        raise Exception(f"timeout_ms: must be a positive number of milliseconds, got {timeout_ms!r}")
    if timeout_ms > MAX_TIMEOUT_MS:   # the host's bound; also, no socket takes a timeout of 10^15 s
        raise Exception(f"timeout_ms: must be a number of milliseconds from 1 to {MAX_TIMEOUT_MS}, "
                        f"got {timeout_ms!r}")


def _change_records(changes: list) -> list:
    return [mgp.Record(topic=c["topic"], partition=c["partition"], previous_offset=c["previous_offset"],
                       offset=c["offset"], status=c["status"], message=c.get("message") or "")
            for c in changes]


@mgp.read_proc
def revert(name: str, change_id: int, timeout_ms: int = DEFAULT_TIMEOUT_MS, dry_run: bool = False,
           partitions: mgp.Nullable[mgp.List[mgp.Any]] = None) -> mgp.Record(topic=str, partition=int, previous_offset=mgp.Nullable[int], offset=mgp.Nullable[int],
                           status=str, message=str):
    """Move every partition of change `change_id` (one set_stream_offset call, see streams.history; or only
    `partitions`: numbers or "topic:partition") back to its previous offset, through the same path as
    set_stream_offset; the history then records "revert of change <change_id>".
    A previous offset the log no longer holds is clamped into [log start, log end], and the message says so."""
    _timeout_ms(timeout_ms)
    if isinstance(change_id, bool) or change_id <= 0:
        raise Exception(f"change_id: must be a positive integer (a history row's change_id), got {change_id!r}")
    body = {"timeout_ms": timeout_ms, "dry_run": dry_run}
    if partitions is not None:
        body["partitions"] = list(partitions)
    return _change_records(_host("POST", _stream(name, f"/history/{change_id}/revert"), body,
                                 timeout=timeout_ms / 1000.0 + MARGIN_S))


@mgp.read_proc
def pending(name: str, cancel: bool = False) -> mgp.Record(topic=str, partition=int, offset=int,
                                                           requested_at=mgp.LocalDateTime,
                                                           previous_offset=mgp.Nullable[int],
                                                           message=mgp.Nullable[str]):
    """Offsets waiting for an assignment (the stream is stopped, or another member of its group holds the
    partition); requested_at is UTC. With cancel = true they are cancelled, and the records are those cancelled."""
    rows = _host("DELETE" if cancel else "GET", _stream(name, "/pending"))
    return [mgp.Record(topic=r["topic"], partition=r["partition"], offset=r["offset"],
                       requested_at=_utc(r["requested_at"]), previous_offset=r.get("previous_offset"),
                       message=r.get("message")) for r in rows]


@mgp.read_proc
def check(name: str, offset: mgp.Any = "committed", limit: int = 10
          ) -> mgp.Record(topic=str, partition=int, offset=int, query=str, parameters=mgp.Map,
                          error=mgp.Nullable[str]):
    """Preview: the statements the stream's transformation makes of up to `limit` records per partition
    (at most 1000), read from where `offset` resolves (any set_stream_offset spec), without joining the
    stream's group and without committing. Nothing is written anywhere. A record the transformation fails
    on is a row with an empty query and the failure in `error`."""
    if isinstance(limit, bool) or not 1 <= limit <= MAX_CHECK_LIMIT:
        raise Exception(f"limit: must be an integer from 1 to {MAX_CHECK_LIMIT} (records per partition), "
                        f"got {limit!r}")
    rows = _host("POST", _stream(name, "/check"), {"offset": offset, "limit": limit, "timeout_ms": CHECK_TIMEOUT_MS},
                 timeout=CHECK_TIMEOUT_MS / 1000.0 + MARGIN_S)
    return [mgp.Record(topic=r["topic"], partition=r["partition"], offset=r["offset"], query=r["query"],
                       parameters=r["parameters"], error=r.get("error")) for r in rows]


def _utc(text: str) -> datetime.datetime:
    """Memgraph's LocalDateTime has no zone: hand it the UTC wall clock of the host's ISO-8601 time."""
    moment = datetime.datetime.fromisoformat(text)
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.UTC).replace(tzinfo=None)
    return moment
