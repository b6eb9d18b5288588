"""Parse once: hosts, broker lists and URLs as typed values, from text that means one thing only.

Two parsers that disagree are a bypass: `urlsplit` strips leading whitespace
and C0 controls that a `startswith` check sees; librdkafka splits a broker list
on spaces as well as commas. So text the host acts on is refused, naming its
field and the value (escaped), when it has surrounding whitespace or any control
or format character; what is left is parsed here into a frozen value, the
allowlists judge that value, and that value (its `text`) is what reaches the
code that connects.

A host is ASCII: a DNS name of letters, digits, `-` and `_` (IDNA names in
their `xn--` form), or an IP literal. Unicode look-alikes, percent-escapes,
user-info (`user@`) and IPv4 in the forms only `inet_aton` reads (`127.1`,
`0x7f.1`, `2130706433`) are refused: a resolver would map them to an address
the allowlist never saw.
"""
from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from .errors import ConfigError

_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\Z")
_PORT = re.compile(r"[0-9]{1,5}\Z")
_PROTOCOL = re.compile(r"[A-Za-z_]+\Z")
_SHOWN_LIMIT = 120


def escaped(value: object, limit: int = _SHOWN_LIMIT) -> str:
    """`value` for a message or a log line: quoted, every control, format and non-ASCII character escaped
    (a newline cannot start a forged line, a look-alike shows as its code point), cut at `limit`."""
    text = ascii(value) if isinstance(value, str) else ascii(repr(value))[1:-1]
    return text if len(text) <= limit else text[:limit] + "..."


def is_unsafe_char(char: str) -> bool:
    """A character that does not print as itself: a control (C0, DEL, C1), format (zero-width, bidi), line or
    paragraph separator, a space other than ' ' (no-break, em, ideographic), a surrogate or an unassigned one."""
    return not char.isprintable()


def clean_text(field: str, value: object, what: str = "value") -> str:
    """`value` unchanged if it is a non-empty string with no surrounding whitespace and no control or format
    character anywhere; else ConfigError naming `field` and the escaped value."""
    if not isinstance(value, str):
        raise ConfigError(f"{field}: expected a {what} (text), got {type(value).__name__}")
    if not value:
        raise ConfigError(f"{field}: expected a {what}, got ''")
    if value != value.strip():
        raise ConfigError(f"{field}: {escaped(value)} has surrounding whitespace; give the {what} alone")
    bad = next((c for c in value if is_unsafe_char(c)), None)
    if bad is not None:
        raise ConfigError(f"{field}: {escaped(value)} contains the control or invisible character {escaped(bad)}; "
                          f"a {what} holds printable characters only")
    return value


@dataclass(frozen=True)
class Host:
    """A host as the allowlist judges it and the client connects to it: lower-case ASCII, no trailing dot;
    `ip` when it is an IP literal (then `name` is its canonical form, IPv6 without brackets)."""
    name: str
    ip: bool = False

    @classmethod
    def parse(cls, field: str, text: object) -> Host:
        raw = clean_text(field, text, "host")
        bracketed = raw.startswith("[") and raw.endswith("]")
        value = raw[1:-1] if bracketed else raw
        try:
            return cls(str(ipaddress.ip_address(value)), ip=True)
        except ValueError:
            if bracketed:
                raise ConfigError(f"{field}: {escaped(raw)} is not an IPv6 address") from None
        if not value.isascii():
            raise ConfigError(f"{field}: host {escaped(raw)} is not ASCII; give an IDNA name in its xn-- form "
                              f"or an IP address")
        name = value.lower()
        name = name[:-1] if name.endswith(".") else name
        labels = name.split(".")
        if not name or len(name) > 253 or not all(_LABEL.match(label) for label in labels):
            raise ConfigError(f"{field}: {escaped(raw)} is not a host name or IP address")
        if all(label.isdigit() or label.startswith("0x") for label in labels) and _inet_aton(name):
            raise ConfigError(f"{field}: {escaped(raw)} is an IPv4 address in a shorthand form; write it as "
                              f"four decimal numbers (a.b.c.d)")
        return cls(name)

    @property
    def address(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        return ipaddress.ip_address(self.name) if self.ip else None

    @property
    def text(self) -> str:
        """The host as a URL or a broker list writes it (IPv6 in brackets)."""
        return f"[{self.name}]" if self.ip and ":" in self.name else self.name


def _inet_aton(name: str) -> bool:
    try:
        socket.inet_aton(name)
        return True
    except OSError:
        return False


def _port(field: str, text: str, shown: str) -> int:
    if not _PORT.match(text) or not 0 < int(text) < 65536:
        raise ConfigError(f"{field}: {escaped(shown)} has an invalid port (1 to 65535)")
    return int(text)


@dataclass(frozen=True)
class BrokerAddress:
    """One entry of a broker list: `[protocol://]host:port`, as librdkafka reads it."""
    host: Host
    port: int
    protocol: str | None = None

    @property
    def text(self) -> str:
        return f"{self.protocol + '://' if self.protocol else ''}{self.host.text}:{self.port}"


@dataclass(frozen=True)
class BootstrapServers:
    """`host:port[,host:port...]`, parsed. librdkafka separates entries by commas and by spaces, so no
    whitespace is taken anywhere: the text has one reading."""
    addresses: tuple[BrokerAddress, ...]

    @classmethod
    def parse(cls, field: str, text: object) -> BootstrapServers:
        value = clean_text(field, text, "broker list ('host:port[,host:port...]')")
        if any(c.isspace() for c in value):
            raise ConfigError(f"{field}: {escaped(value)} contains whitespace; separate brokers with commas only "
                              f"('host:port,host:port')")
        addresses = []
        for entry in value.split(","):
            protocol, sep, rest = entry.rpartition("://")
            if sep and not _PROTOCOL.match(protocol):
                raise ConfigError(f"{field}: {escaped(entry)} has an invalid protocol prefix")
            host, colon, port = rest.rpartition(":")
            if not colon or not host:
                raise ConfigError(f"{field}: {escaped(entry)} is not host:port")
            if ":" in host and not (host.startswith("[") and host.endswith("]")):
                raise ConfigError(f"{field}: {escaped(entry)} is not host:port (write an IPv6 address in brackets)")
            addresses.append(BrokerAddress(Host.parse(field, host), _port(field, port, entry), protocol or None))
        return cls(tuple(addresses))

    @property
    def text(self) -> str:
        return ",".join(address.text for address in self.addresses)


_USERINFO = re.compile(r"(?<=://)([^/?#@]*)@")   # a URL's user-info (user:password@), masked in errors


@dataclass(frozen=True)
class Url:
    """An absolute URL without user-info or fragment; `text` is the form every client is given."""
    scheme: str
    host: Host
    port: int | None
    path: str = ""
    query: str = ""

    @classmethod
    def parse(cls, field: str, text: object, schemes: tuple[str, ...]) -> Url:
        userinfo = _USERINFO.search(text) if isinstance(text, str) else None
        try:
            value = clean_text(field, text, "URL")
        except ConfigError as exc:   # user-info may hold a password: never in an error
            raise ConfigError(str(exc).replace(userinfo.group(1), "***")) if userinfo else exc from None
        shown = escaped(_USERINFO.sub("***@", value))
        if any(c.isspace() for c in value) or "\\" in value:
            raise ConfigError(f"{field}: {shown} contains whitespace or a backslash; percent-encode "
                              f"them in the path")
        parts = split(field, value)
        scheme = parts.scheme.lower()
        if scheme not in schemes:
            raise ConfigError(f"{field}: {shown} is not a {' or '.join(schemes)} URL")
        if "@" in parts.netloc:
            raise ConfigError(f"{field}: user information in the URL is refused ({shown}: it would be shown); "
                              f"give credentials in their own settings")
        if parts.fragment or "#" in value:
            raise ConfigError(f"{field}: {shown} has a fragment")
        if any(c in value for c in LIST_SEPARATORS):
            raise ConfigError(f"{field}: {shown} contains {' or '.join(map(repr, LIST_SEPARATORS))}: a client "
                              f"may read it as a list of URLs; give one URL, percent-encoding them in its path")
        host, port = authority(field, parts.netloc, value)
        return cls(scheme, host, port, parts.path, parts.query)

    @property
    def text(self) -> str:
        port = f":{self.port}" if self.port is not None else ""
        query = f"?{self.query}" if self.query else ""
        return f"{self.scheme}://{self.host.text}{port}{self.path}{query}"


LIST_SEPARATORS = ",;"   # what some client splits a value on (the registry client: commas; others: semicolons)
MAX_LIST_MEMBERS = 8


@dataclass(frozen=True)
class UrlList:
    """A value a client reads as a list of base URLs: confluent-kafka's SchemaRegistryClient splits its `url` on
    commas (then strips each member and its trailing `/`) and fails over from one to the next. Parsed here as
    that list, every member a `Url`: what the allowlist judges is what the client tries. The client appends its
    request path to a member, so a member holds no query (it would swallow the path) and no semicolon (a reader
    of the text could take it for a separator)."""
    urls: tuple[Url, ...]

    @classmethod
    def parse(cls, field: str, text: object, schemes: tuple[str, ...]) -> UrlList:
        if isinstance(text, str) and ";" in text:
            raise ConfigError(f"{field}: {escaped(_USERINFO.sub('***@', text))} contains a semicolon; separate "
                              f"URLs with commas only")
        members = text.split(",") if isinstance(text, str) else [text]
        if len(members) > MAX_LIST_MEMBERS:
            raise ConfigError(f"{field}: {len(members)} URLs; at most {MAX_LIST_MEMBERS}")
        urls = []
        for member in members:
            url = Url.parse(field, member, schemes)
            if url.query:
                raise ConfigError(f"{field}: {escaped(url.text)} has a query; the client appends its request path "
                                  f"to the URL, so give the base URL only")
            urls.append(url)
        return cls(tuple(urls))

    @property
    def text(self) -> str:
        return ",".join(url.text for url in self.urls)


def split(field: str, value: str) -> SplitResult:
    try:
        return urlsplit(value)
    except ValueError:
        raise ConfigError(f"{field}: {escaped(value)} is not a valid URL") from None


def authority(field: str, netloc: str, shown: str) -> tuple[Host, int | None]:
    """(host, port or None) of a URL's authority without user-info; ConfigError naming `field` otherwise."""
    if not netloc:
        raise ConfigError(f"{field}: {escaped(shown)} names no host")
    if netloc.startswith("["):
        host, bracket, rest = netloc.partition("]")
        host += bracket
        if not bracket or (rest and not rest.startswith(":")):
            raise ConfigError(f"{field}: {escaped(shown)} has a malformed host")
        port = rest[1:] if rest else None
    else:
        host, colon, port_text = netloc.partition(":")
        port = port_text if colon else None
    parsed = Host.parse(field, host)
    if port is None:
        return parsed, None
    return parsed, _port(field, port, shown)
