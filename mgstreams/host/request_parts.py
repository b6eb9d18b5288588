"""The parts of an API request, read and checked: the path's stream name and change id, the JSON body
(capped at MAX_BODY_BYTES, fields allowlisted), and its fields and query parameters. Bad input is a
`BadRequest` naming the field and the value."""
from __future__ import annotations

import json
import re
from typing import Any

from starlette.requests import Request

from stream_registry.errors import BodyTooLarge, ConfigError
from stream_registry.model import DEFAULT_TIMEOUT_MS, MAX_BODY_BYTES, MAX_LIMIT, MAX_TIMEOUT_MS


class BadRequest(ConfigError):
    """The request itself (body, query string) is malformed."""


def name(request: Request) -> str:
    return request.path_params["name"]


async def body(request: Request, allowed: tuple[str, ...], required: tuple[str, ...],
                empty_ok: bool = False) -> dict[str, Any]:
    """The JSON object of the request; with `empty_ok`, no body at all is {} (every field has a default)."""
    raw = await _capped_body(request)
    if empty_ok and not raw.strip():
        return {}
    try:
        body = json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"body: not valid JSON: {exc}") from None
    except ValueError:   # a number of more than 4300 digits, which Python refuses to convert
        raise BadRequest("body: not valid JSON: a number has more than 4300 digits") from None
    except RecursionError:
        raise BadRequest("body: not valid JSON: nested too deeply") from None
    if not isinstance(body, dict):
        raise BadRequest(f"body: expected a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise BadRequest(f"body: unknown field {unknown[0]!r} (allowed: {', '.join(allowed)})")
    for field in required:
        if field not in body:
            raise BadRequest(f"{field}: required")
    return body


async def _capped_body(request: Request) -> bytes:
    """The body, read no further than MAX_BODY_BYTES (a declared length is refused before reading)."""
    too_large = BodyTooLarge(f"body: larger than {MAX_BODY_BYTES} bytes, the most the host reads")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def timeout(body: dict[str, Any], default_ms: int = DEFAULT_TIMEOUT_MS) -> float:
    """`timeout_ms` of a body, in seconds."""
    timeout_ms = body.get("timeout_ms", default_ms)
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or not 0 < timeout_ms <= MAX_TIMEOUT_MS:
        raise BadRequest(f"timeout_ms: must be a number of milliseconds from 1 to {MAX_TIMEOUT_MS}, "
                         f"got {timeout_ms!r}")
    return timeout_ms / 1000


def dry_run(body: dict[str, Any]) -> bool:
    dry_run = body.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise BadRequest(f"dry_run: must be true or false, got {dry_run!r}")
    return dry_run


def change_id(text: str) -> int:
    """A history row's id from the path: ASCII digits, positive, an int64 (SQLite's rowid)."""
    shown = repr(text) if len(text) <= 40 else f"{text[:20]!r}... ({len(text)} characters)"
    if not re.fullmatch(r"[0-9]{1,19}", text) or not 0 < int(text) <= MAX_LIMIT:
        raise BadRequest(f"change_id: must be a positive integer (a history row's change_id), got {shown}")
    return int(text)


def limit(text: str | None) -> int | None:
    if text is None:
        return None
    # ASCII digits only ("²".isdigit() is true, int("²") fails), and no more than SQLite's int64 holds
    shown = repr(text) if len(text) <= 40 else f"{text[:20]!r}... ({len(text)} characters)"
    if not re.fullmatch(r"[0-9]+", text) or not text.strip("0"):
        raise BadRequest(f"limit: must be a positive integer, got {shown}")
    if len(text.lstrip("0")) > 19 or int(text) > MAX_LIMIT:
        raise BadRequest(f"limit: must be at most {MAX_LIMIT}, got {shown}")
    return int(text)
