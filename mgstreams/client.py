"""A Python client of the stream host's API (the CLI, the demo and benchmarks use it).

Values come back as the core library's dataclasses; the host's errors come back
as the same `StreamError` classes the registry raises in-process, with the
host's one-line message.
"""
from __future__ import annotations

import builtins
import dataclasses
import os
from typing import Any
from urllib.parse import quote

import httpx

from stream_registry import HistoryEntry, OffsetChange, PartitionOffsets, StreamInfo
from stream_registry.errors import ConfigError, StreamError, class_for_status
from stream_registry.model import (
    ALTER_TIMEOUT_S,
    MARGIN_S,
    REQUEST_TIMEOUT_S,
    PartitionLag,
    PendingOffset,
    PreviewStatement,
    StreamLag,
)

from .settings import DEFAULT_URL, STATE_DIR_ENV, TOKEN_ENV, TOKEN_FILE_ENV, TOKEN_FILE_NAME, URL_ENV
from .tokens import client_token, default_token_file, read_token_file
from .wire import from_json

TOKEN_HINT = (f"pass the host's token with ${TOKEN_ENV}, the CLI's --token, or ${TOKEN_FILE_ENV}=FILE; a host "
              f"started without one keeps the token it generated in <its state dir>/{TOKEN_FILE_NAME}, which the "
              f"CLI finds by itself when ${STATE_DIR_ENV} names that directory (as in the shell that started the "
              f"host)")


class HostUnavailable(StreamError):
    """No host answers at the URL."""


class Unauthorized(StreamError):
    """The host wants a token this client did not send, or not this one (401)."""


def _token_for(url: str) -> str | None:
    """$MGSTREAMS_TOKEN, else $MGSTREAMS_TOKEN_FILE's content, else, for a host on this machine, the token a
    host on the default state directory generated (never sent to another machine)."""
    token = client_token()
    if token:
        return token
    host = httpx.URL(url).host
    if host in ("127.0.0.1", "localhost", "::1") or host.startswith("127."):
        path = default_token_file()
        if path is not None:
            return read_token_file(path, "token_file")
    return None


class HostClient:
    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = REQUEST_TIMEOUT_S):
        self.url = _checked_url((url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/"))
        token = token if token is not None else _token_for(self.url)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> HostClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the API --------------------------------------------------------------------
    def health(self) -> bool:
        return self._request("GET", "/health").get("status") in ("healthy", "degraded")   # it serves

    def list(self) -> list[StreamInfo]:
        return [from_json(StreamInfo, s) for s in self._request("GET", "/streams")]

    def get(self, name: str) -> StreamInfo:
        return from_json(StreamInfo, self._request("GET", f"/streams/{_path(name)}"))

    def create(self, **fields: Any) -> StreamInfo:
        return from_json(StreamInfo, self._request("POST", "/streams", json=fields))

    def alter(self, name: str, **changes: Any) -> StreamInfo:
        """Change batch_size, batch_interval_ms, transform, sink or configs (merged; None removes a key)."""
        return from_json(StreamInfo, self._request("PATCH", f"/streams/{_path(name)}", json=changes,
                                                   timeout=ALTER_TIMEOUT_S))

    def start(self, name: str) -> StreamInfo:
        return from_json(StreamInfo, self._request("PUT", f"/streams/{_path(name)}/start"))

    def stop(self, name: str) -> StreamInfo:
        return from_json(StreamInfo, self._request("PUT", f"/streams/{_path(name)}/stop"))

    def acknowledge_loss(self, name: str) -> StreamInfo:
        return from_json(StreamInfo, self._request("PUT", f"/streams/{_path(name)}/acknowledge-loss"))

    def drop(self, name: str) -> StreamInfo:
        return from_json(StreamInfo, self._request("DELETE", f"/streams/{_path(name)}"))

    def describe(self, name: str) -> builtins.list[PartitionOffsets]:
        return [from_json(PartitionOffsets, r) for r in self._request("GET", f"/streams/{_path(name)}/offsets")]

    def set_offset(self, name: str, offset: object, *, timeout: float = 10.0,
                   dry_run: bool = False) -> builtins.list[OffsetChange]:
        body = {"offset": offset, "timeout_ms": max(1, round(timeout * 1000)), "dry_run": dry_run}
        rows = self._request("PATCH", f"/streams/{_path(name)}/offsets", json=body, timeout=timeout + MARGIN_S,
                             may_remain=_may_remain(name))
        return [from_json(OffsetChange, r) for r in rows]

    def history(self, name: str, limit: int | None = None) -> builtins.list[HistoryEntry]:
        params = {"limit": limit} if limit else None
        return [from_json(HistoryEntry, r)
                for r in self._request("GET", f"/streams/{_path(name)}/history", params=params)]

    def lag(self, name: str) -> StreamLag:
        """The stream's lag verdict, per partition lag and lag seconds, from the host's last sample."""
        return _stream_lag(self._request("GET", f"/streams/{_path(name)}/lag"))

    def lag_all(self) -> builtins.list[StreamLag]:
        """Every stream's lag summary and partitions (`GET /lag`)."""
        return [_stream_lag(s) for s in self._request("GET", "/lag")]

    def revert(self, name: str, change_id: int, *, timeout: float = 10.0, dry_run: bool = False,
               partitions: builtins.list | None = None) -> builtins.list[OffsetChange]:
        """Every partition of change `change_id` back to its previous offset (or only `partitions`)."""
        body: dict[str, Any] = {"timeout_ms": max(1, round(timeout * 1000)), "dry_run": dry_run}
        if partitions is not None:
            body["partitions"] = list(partitions)
        rows = self._request("POST", f"/streams/{_path(name)}/history/{_path(change_id)}/revert", json=body,
                             timeout=timeout + MARGIN_S, may_remain=_may_remain(name))
        return [from_json(OffsetChange, r) for r in rows]

    def pending(self, name: str) -> builtins.list[PendingOffset]:
        return [from_json(PendingOffset, r) for r in self._request("GET", f"/streams/{_path(name)}/pending")]

    def cancel_pending(self, name: str) -> builtins.list[PendingOffset]:
        return [from_json(PendingOffset, r) for r in self._request("DELETE", f"/streams/{_path(name)}/pending")]

    def check(self, name: str, offset: object = "committed", *, limit: int = 10,
              timeout: float = 20.0) -> builtins.list[PreviewStatement]:
        body = {"offset": offset, "limit": limit, "timeout_ms": max(1, round(timeout * 1000))}
        rows = self._request("POST", f"/streams/{_path(name)}/check", json=body, timeout=timeout + MARGIN_S)
        return [from_json(PreviewStatement, r) for r in rows]

    # -- plumbing -------------------------------------------------------------------
    def _request(self, method: str, path: str, *, may_remain: str = "", **kwargs: Any) -> Any:
        """`may_remain`: what a call that got no answer may have left behind, said when it times out (the host
        answers an offset change within its own timeout, counted from the request's arrival)."""
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TimeoutException:
            raise HostUnavailable(f"host: no answer from {self.url} within the timeout{may_remain}") from None
        except httpx.TransportError:
            raise HostUnavailable(f"no mgstreams host at {self.url}: start one with `mgstreams serve`") from None
        except httpx.RequestError as exc:
            raise StreamError(f"host: request to {self.url} failed: {exc}") from None
        try:
            data = response.json()
        except ValueError:
            raise StreamError(f"host: {self.url} answered {response.status_code} without JSON; "
                              f"is it an mgstreams host?") from None
        if response.is_success:
            return data
        message = data.get("error") if isinstance(data, dict) else None
        if response.status_code == 401:
            sent = "the token sent was refused" if "authorization" in self._http.headers else "no token was sent"
            raise Unauthorized(f"{message or 'authorization: a token is required'} ({sent}): {TOKEN_HINT}")
        raise class_for_status(response.status_code)(message or f"host: HTTP {response.status_code}")


def _may_remain(name: str) -> str:
    return (f"; the change may have been recorded and be pending: `mgstreams pending {name}` shows it, "
            f"`mgstreams pending {name} --cancel` cancels it")


def _stream_lag(data: Any) -> StreamLag:
    lag = from_json(StreamLag, data)
    return dataclasses.replace(lag, partitions=tuple(from_json(PartitionLag, p) for p in lag.partitions))


def _checked_url(url: str) -> str:
    """The host's base URL, refused early (a ConfigError, not a traceback) unless it is http(s)://HOST[:PORT]."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ConfigError(f"url: {url!r} is not a valid URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(f"url: expected http://HOST:PORT (e.g. {DEFAULT_URL}), got {url!r}")
    return url


def _path(name: str | int) -> str:
    """A stream name as one path segment (names are [A-Za-z0-9_], but never trust input)."""
    return quote(str(name), safe="").replace(".", "%2E")  # "." and ".." are segments, not names
