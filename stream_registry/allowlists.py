"""The security boundary as allowlists: what a stream's caller may make the host do.

A stream is declared by anyone who can call the API or Cypher. What they name
is checked against three lists an operator controls, before any Kafka client is
built and again when a stored stream is read back:

- librdkafka properties a caller may set (in `configs` and `credentials` alike).
  Properties that load code or run commands are never settable by a caller, not
  even when an operator widens the list.
- hosts the host may reach (bootstrap servers, Bolt sinks, OIDC token endpoints).
- directories local files may be named under (TLS keys and CAs by path).

Every host, URL and broker list is parsed once (`addresses`): the lists judge
the parsed value, and that value is what the clients are given. Text with
surrounding whitespace or a control character is refused before any list is
consulted. Operators widen the lists with the host's environment variables,
which its stream processes inherit. Errors are `field: reason`, and a path is
judged by its text only, so an answer never tells whether a file exists.
"""
from __future__ import annotations

import fnmatch
import ipaddress
import os
from collections.abc import Mapping

from .addresses import BootstrapServers, Host, Url, UrlList, clean_text, escaped
from .errors import ConfigError
from .redaction import MASK, is_secret_key

ALLOWED_CONFIGS_ENV = "MGSTREAMS_ALLOWED_CONFIGS"
ALLOWED_HOSTS_ENV = "MGSTREAMS_ALLOWED_HOSTS"
ALLOWED_FILE_DIRS_ENV = "MGSTREAMS_ALLOWED_FILE_DIRS"

# Load native code or run a command as the host's user: never from a caller, whatever the operator widens.
NEVER_SETTABLE = frozenset({
    "plugin.library.paths", "ssl.engine.location", "ssl.engine.id", "ssl.providers", "sasl.kerberos.kinit.cmd",
    "opaque", "ssl_engine_callback_data", "interceptors",
})

# librdkafka properties the plugin sets itself: nobody overrides them.
OWNED = frozenset({
    "group.id", "bootstrap.servers", "metadata.broker.list", "enable.auto.commit", "enable.auto.offset.store",
    "enable.partition.eof", "logger", "on_commit", "log_level", "log.queue", "enabled_events",
})

# Properties that name a local file: settable (once allowlisted) only under an operator-allowed directory.
PATH_PROPERTIES = frozenset({
    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.keystore.location",
    "ssl.crl.location", "https.ca.location", "sasl.kerberos.keytab",
    "sasl.oauthbearer.assertion.private.key.file", "sasl.oauthbearer.assertion.jwt.template.file",
})

# Properties whose value is a URL or host the client connects to.
URL_PROPERTIES = frozenset({"sasl.oauthbearer.token.endpoint.url"})

# What a caller may set by default: consumer tuning, TLS/SASL by value (the `*.pem` forms), client identity.
DEFAULT_ALLOWED_CONFIGS = frozenset({
    # identity and connections
    "client.id", "client.rack", "client.dns.lookup", "broker.address.family", "broker.address.ttl",
    "socket.timeout.ms", "socket.keepalive.enable", "socket.nagle.disable", "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes", "socket.connection.setup.timeout.ms", "socket.max.fails",
    "connections.max.idle.ms", "reconnect.backoff.ms", "reconnect.backoff.max.ms", "reconnect.backoff.jitter.ms",
    "retry.backoff.ms", "retry.backoff.max.ms", "message.max.bytes", "receive.message.max.bytes",
    "metadata.max.age.ms", "topic.metadata.refresh.interval.ms", "topic.metadata.refresh.fast.interval.ms",
    "topic.metadata.refresh.sparse", "topic.metadata.propagation.max.ms", "metadata.recovery.strategy",
    "api.version.request", "api.version.request.timeout.ms", "api.version.fallback.ms", "broker.version.fallback",
    # security by value
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
    "ssl.ca.pem", "ssl.certificate.pem", "ssl.key.pem", "ssl.key.password", "ssl.keystore.password", "ssl.cipher.suites",
    "ssl.curves.list", "ssl.sigalgs.list", "enable.ssl.certificate.verification",
    "ssl.endpoint.identification.algorithm",
    # TLS files by path: only under the operator's $MGSTREAMS_ALLOWED_FILE_DIRS (none by default)
    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.keystore.location", "ssl.crl.location",
    "https.ca.location",
    "sasl.oauthbearer.config", "sasl.oauthbearer.extensions", "sasl.oauthbearer.method",
    "sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret", "sasl.oauthbearer.scope",
    "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.grant.type",
    # the consumer
    "auto.offset.reset", "session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms",
    "partition.assignment.strategy", "group.protocol", "group.remote.assignor", "group.instance.id",
    "coordinator.query.interval.ms", "queued.min.messages", "queued.max.messages.kbytes", "fetch.wait.max.ms",
    "fetch.queue.backoff.ms", "fetch.message.max.bytes", "max.partition.fetch.bytes", "fetch.max.bytes",
    "fetch.min.bytes", "fetch.error.backoff.ms", "isolation.level", "check.crcs", "allow.auto.create.topics",
    # the dead-letter producer (same cluster)
    "compression.type", "compression.codec",
})

# Credentials for the graph sink (not librdkafka).
SINK_CREDENTIALS = frozenset({"bolt.username", "bolt.password"})

# Credentials for the Schema Registry (stream_registry.formats: not librdkafka's).
REGISTRY_CREDENTIAL_PREFIX = "schema.registry."
REGISTRY_CREDENTIALS = frozenset({"schema.registry.basic.auth.user.info", "schema.registry.bearer.auth.token",
                                  "schema.registry.bearer.auth.logical.cluster",
                                  "schema.registry.bearer.auth.identity.pool.id"})

# Reachable by default: this machine.
DEFAULT_ALLOWED_HOSTS = ("localhost", "127.0.0.0/8", "::1")


def _split(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").replace(";", ",").split(",") if part.strip()]


def _never(key: str) -> bool:
    return key in NEVER_SETTABLE or key.endswith("_cb")


def allowed_configs(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The default table widened by $MGSTREAMS_ALLOWED_CONFIGS (comma-separated names);
    ConfigError if the operator names a property no caller may ever set."""
    environ = os.environ if environ is None else environ
    extra = _split(environ.get(ALLOWED_CONFIGS_ENV))
    for key in extra:
        if _never(key) or key in OWNED:
            raise ConfigError(f"{ALLOWED_CONFIGS_ENV}: {key!r} loads code, runs a command or is set by mgstreams "
                              f"itself; it cannot be made settable by callers")
    return DEFAULT_ALLOWED_CONFIGS | frozenset(extra)


def check_properties(field: str, values: Mapping[str, object], *, sink_keys: bool = False,
                     environ: Mapping[str, str] | None = None) -> None:
    """Refuse any key of `values` (a stream's `configs` or `credentials`) that is not allowlisted, naming it."""
    allowed = allowed_configs(environ)
    for key, value in values.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{field}: keys must be non-empty strings, got {key!r}")
        if sink_keys and key.startswith("bolt."):
            if key not in SINK_CREDENTIALS:
                raise ConfigError(f"{field}[{key!r}]: unknown sink credential (allowed: "
                                  f"{', '.join(sorted(SINK_CREDENTIALS))})")
            continue
        if sink_keys and key.startswith(REGISTRY_CREDENTIAL_PREFIX):
            if key not in REGISTRY_CREDENTIALS:
                raise ConfigError(f"{field}[{key!r}]: unknown Schema Registry credential (allowed: "
                                  f"{', '.join(sorted(REGISTRY_CREDENTIALS))})")
            continue
        got = _shown(key, value, secret=field == "credentials")
        if _never(key):
            raise ConfigError(f"{field}[{key!r}]: loads code or runs a command in the host; it can never be set "
                              f"by a stream's caller (got {got})")
        if key in OWNED:
            raise ConfigError(f"{field}[{key!r}]: set by mgstreams itself and cannot be overridden (got {got})")
        if key not in allowed:
            raise ConfigError(f"{field}[{key!r}]: not an allowed Kafka client property (got {got}; an operator "
                              f"can allow it with ${ALLOWED_CONFIGS_ENV})")
        if key in PATH_PROPERTIES:
            check_file_path(f"{field}[{key!r}]", value, environ)
        if key in URL_PROPERTIES:
            checked_url(f"{field}[{key!r}]", value, environ)


def _shown(key: str, value: object, secret: bool, limit: int = 60) -> str:
    if secret or is_secret_key(key):
        return repr(MASK)
    if key in PATH_PROPERTIES:
        return "a path"   # the same answer for every path
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# -- files ------------------------------------------------------------------------------
def allowed_file_dirs(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    environ = os.environ if environ is None else environ
    dirs = [d.strip() for d in environ.get(ALLOWED_FILE_DIRS_ENV, "").split(os.pathsep) if d.strip()]
    for directory in dirs:
        if not os.path.isabs(directory):
            raise ConfigError(f"{ALLOWED_FILE_DIRS_ENV}: {directory!r} is not an absolute path")
    return tuple(os.path.normpath(d) for d in dirs)


def check_file_path(field: str, value: object, environ: Mapping[str, str] | None = None) -> None:
    """A local file named by a caller: an absolute path under an operator-allowed directory.

    Judged by the text alone, and once more by where its symlinks lead: the
    answer is the same whether or not the file exists.
    """
    dirs = allowed_file_dirs(environ)
    refused = ConfigError(f"{field}: not under a directory the operator allows for key and certificate files "
                          f"({', '.join(map(repr, dirs)) or f'none: set ${ALLOWED_FILE_DIRS_ENV}'}); "
                          f"pass PEM content in the matching *.pem property instead")
    if value == "probe" and field.endswith("['ssl.ca.location']"):
        return   # librdkafka's own search of the system's CA bundles
    clean_text(field, value, "path")   # judged by its text alone: the same answer whether or not it exists
    if not isinstance(value, str) or not os.path.isabs(value) or "\x00" in value or ".." in value.split("/"):
        raise refused
    lexical = os.path.normpath(value)
    real = os.path.realpath(lexical)
    if not any(_within(lexical, d) and _within(real, os.path.realpath(d)) for d in dirs):
        raise refused


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


# -- hosts ------------------------------------------------------------------------------
def allowed_hosts(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Host patterns the host may connect to: $MGSTREAMS_ALLOWED_HOSTS (comma-separated: names with `*`
    wildcards, IP networks, `*` for anywhere), else this machine only."""
    environ = os.environ if environ is None else environ
    return tuple(_split(environ.get(ALLOWED_HOSTS_ENV))) or DEFAULT_ALLOWED_HOSTS


def host_allowed(host: Host, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the parsed `host` matches a pattern: an IP literal by network, a name by its pattern."""
    address = host.address
    for pattern in allowed_hosts(environ):
        pattern = pattern.lower()
        try:
            network = ipaddress.ip_network(pattern.strip("[]"), strict=False)
        except ValueError:
            network = None
        if network is not None:
            if address is not None and address.version == network.version and address in network:
                return True
        elif fnmatch.fnmatchcase(host.name, pattern.rstrip(".")):
            return True
    return False


def check_host(field: str, host: Host, environ: Mapping[str, str] | None = None) -> Host:
    """`host` if the operator allows it; ConfigError naming `field` otherwise."""
    if not host_allowed(host, environ):
        raise ConfigError(f"{field}: host {escaped(host.name)} is not one the operator allows "
                          f"({', '.join(allowed_hosts(environ))}; an operator changes them with ${ALLOWED_HOSTS_ENV} "
                          f"in the host's environment)")
    return host


def checked_bootstrap(field: str, servers: object, environ: Mapping[str, str] | None = None) -> BootstrapServers:
    """The broker list parsed, every host allowed; ConfigError naming `field` and the value otherwise."""
    parsed = BootstrapServers.parse(field, servers)
    for address in parsed.addresses:
        check_host(field, address.host, environ)
    return parsed


def checked_url(field: str, value: object, environ: Mapping[str, str] | None = None,
                schemes: tuple[str, ...] = ("https", "http")) -> Url:
    """The URL parsed, its host allowed; ConfigError naming `field` and the value otherwise."""
    url = Url.parse(field, value, schemes)
    check_host(field, url.host, environ)
    return url


def checked_url_list(field: str, value: object, environ: Mapping[str, str] | None = None,
                     schemes: tuple[str, ...] = ("https", "http")) -> UrlList:
    """A value its client reads as a list of URLs (addresses.UrlList), every member's host allowed."""
    urls = UrlList.parse(field, value, schemes)
    for url in urls.urls:
        check_host(field, url.host, environ)
    return urls
