"""Getting a SparkSession for the backfill CLI and the benchmark: classic PySpark or Spark Connect.

Under `spark-submit` the master and configuration come from spark-submit;
from a plain `python`/`mgstreams` process the master defaults to `local[*]`.

Spark Connect (`remote`, needs the `[spark]` extra, which brings
`pyspark[connect]`'s client packages):
- `sc://host:port` connects to a running Spark Connect server. The session is
  a new one of its own (`create()`), made through the Connect client directly,
  so it works in a process that also holds a classic session (the tests, a
  notebook) and leaves that process in classic mode.
- `local[N]` starts a Connect server inside this process on a free loopback
  port and connects to it, as `pyspark --remote local[N]` does.
The server's Python workers must be able to import this package (and the
transformation's module): install it where the server runs.
"""
from __future__ import annotations

import os
import re
import sys
import urllib.parse
from collections.abc import Mapping

_LOCAL = re.compile(r"^local(\[(\d+|\*)(,\s*\d+)?\])?$")
# A local session's JVM only schedules tasks and moves one stats row per task: the records stay in the
# Python workers. C2's compilations cost it more CPU than they save (measured: the JVM's CPU per job
# halves with C1 alone, about 5% more records/s on 2 cores, and the session starts sooner).
LOCAL_JVM_OPTIONS = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}
# Spark's default log4j profile prints WARN lines (a loopback hostname, no native Hadoop) on the terminal of a
# backfill before setLogLevel can run: a JVM of ours starts with this profile instead, errors only, on stderr.
QUIET_LOG4J = """status = error
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
"""


def quiet_log4j_option() -> str:
    """The JVM option that makes log4j read QUIET_LOG4J (written once per user to the temporary directory)."""
    import tempfile

    path = os.path.join(tempfile.gettempdir(), f"mgstreams-log4j2-{os.getuid()}.properties")
    try:
        with open(path, encoding="utf-8") as existing:
            current = existing.read()
    except OSError:
        current = None
    if current != QUIET_LOG4J:
        temporary = f"{path}.{os.getpid()}"
        with open(temporary, "w", encoding="utf-8") as out:
            out.write(QUIET_LOG4J)
        os.replace(temporary, path)
    return f"-Dlog4j2.configurationFile=file:{path}"


def _local_jvm_options() -> dict[str, str]:
    return {key: f"{value} {quiet_log4j_option()}" for key, value in LOCAL_JVM_OPTIONS.items()}


def ensure_worker_python() -> None:
    """Make Spark's Python workers run this interpreter (and so see this venv's packages).

    PySpark starts workers with $PYSPARK_PYTHON, else `python3` from PATH, which
    need not be the interpreter that has pyspark, pyarrow and this package.
    Must run before the SparkContext is created; an explicit setting wins.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def check_remote(remote: str) -> str:
    """`sc://host[:port][/;params]` or `local`, `local[N]`, `local[*]`; ConfigError naming --remote otherwise."""
    from stream_registry.errors import ConfigError

    if not isinstance(remote, str) or not (remote.startswith("sc://") and len(remote) > 5 or _LOCAL.match(remote)):
        from .engine import shown_remote

        shown = shown_remote(remote) if isinstance(remote, str) else remote
        raise ConfigError(f"--remote: expected sc://host:port (a Spark Connect server) or local[N] (one started "
                          f"in this process), got {shown!r}")
    return parsed_remote(remote)


def parsed_remote(remote: str) -> str:
    """A Spark Connect URL parsed once (stream_registry.addresses): printable text with nothing around it, an
    ASCII host or IP and a port; the form the client is given. `local[N]` is returned as it is."""
    from stream_registry.addresses import authority, clean_text, escaped
    from stream_registry.errors import ConfigError

    from .engine import shown_remote

    clean_text("--remote", shown_remote(remote), "Spark Connect URL")
    if not remote.startswith("sc://"):
        return remote
    rest = remote[len("sc://"):]
    netloc, rest = re.match(r"([^/;]*)(.*)\Z", rest, re.S).groups()   # type: ignore[union-attr]
    if "@" in netloc or any(c.isspace() for c in remote):
        raise ConfigError(f"--remote: {escaped(shown_remote(remote))} carries user-info or whitespace; pass a "
                          f"token as ;token=... after the host")
    if any(c in remote for c in ",?#"):   # pyspark's urlparse ends the host at ? and #; a list reads as a second host
        raise ConfigError(f"--remote: {escaped(shown_remote(remote))} contains ',', '?' or '#'; give one "
                          f"sc://host:port, its options as ;key=value")
    host, port = authority("--remote", netloc, shown_remote(remote))
    parsed = f"sc://{host.text}{f':{port}' if port is not None else ''}{rest}"
    if _pyspark_host(parsed) != _pyspark_host(remote):   # read the way pyspark's ChannelBuilder reads it
        raise ConfigError(f"--remote: {escaped(shown_remote(remote))} names its host ambiguously")
    return parsed


def _pyspark_host(remote: str) -> str | None:
    """The host pyspark's ChannelBuilder connects to (it parses `http` + remote[2:] with urlparse)."""
    try:
        return urllib.parse.urlparse("http" + remote[2:]).hostname
    except ValueError:
        return None


# The web UI listens on every interface and its kill links stop jobs: off unless asked for (--spark-ui).
UI_OFF = {"spark.ui.enabled": "false"}


def build_session(master: str | None = None, app_name: str = "mgstreams-backfill",
                  conf: Mapping[str, str] | None = None, remote: str | None = None):
    """A session for `master` (classic) or `remote` (Spark Connect); `--master sc://…` means `remote`."""
    if master and master.startswith("sc://") and not remote:
        master, remote = None, master
    if remote:
        return build_connect_session(check_remote(remote), app_name, conf)
    from pyspark.sql import SparkSession

    ensure_worker_python()
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif not under_spark_submit():
        builder = builder.master("local[*]")
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    if not under_spark_submit():   # spark-submit's own --conf decides there
        conf = {**UI_OFF, **(conf or {})}
    if not under_spark_submit() and _LOCAL.match(master or "local[*]"):
        conf = {**_local_jvm_options(), **(conf or {})}
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def build_connect_session(remote: str, app_name: str = "mgstreams-backfill", conf: Mapping[str, str] | None = None):
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    if not remote.startswith("sc://"):
        remote = start_local_connect_server(remote, app_name, conf)
    builder = ConnectSession.builder.remote(remote)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.create()


_LOCAL_SERVERS: list = []   # the classic sessions that run this process's local Connect servers


def start_local_connect_server(master: str, app_name: str = "mgstreams-backfill",
                               conf: Mapping[str, str] | None = None) -> str:
    """Start a Spark Connect server in this process (master `local[N]`) on a free loopback port; its URL.

    What `pyspark --remote local[N]` does, except that pyspark's client then
    assumes port 15002, which another program may hold: here the port is
    chosen free and named in the URL. The server takes a fresh token
    ($SPARK_CONNECT_AUTHENTICATE_TOKEN, as pyspark's own local server does), so
    only this process's client can use it.
    """
    import socket
    import uuid

    from pyspark.sql import SparkSession

    ensure_worker_python()
    os.environ.setdefault("SPARK_CONNECT_AUTHENTICATE_TOKEN", str(uuid.uuid4()))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
               .config("spark.connect.grpc.binding.address", "127.0.0.1")
               .config("spark.connect.grpc.binding.port", str(port))
               .config("spark.ui.showConsoleProgress", "false"))
    for key, value in {**_local_jvm_options(), **UI_OFF, **(conf or {})}.items():
        builder = builder.config(key, value)
    server = builder.getOrCreate()
    server.sparkContext.setLogLevel("ERROR")
    _LOCAL_SERVERS.append(server)
    return f"sc://localhost:{port}"


def stop_session(spark) -> None:
    """Stop a session this process made; for `--remote local[N]`, its server too."""
    spark.stop()
    if is_connect(spark):
        while _LOCAL_SERVERS:
            _LOCAL_SERVERS.pop().stop()


def is_connect(spark) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def under_spark_submit() -> bool:
    """True in a driver launched by spark-submit (its JVM is already running, with the master set)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ
