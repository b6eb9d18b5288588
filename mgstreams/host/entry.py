"""How a browser gets to the host's page: `/` leads to `/ui`, and a browser without the token is told how to get in.

A browser opening `/ui` (or `/`) of a host that has a token, without `?token=`, gets an HTML page (401) saying
where the token is and with a field to give it, instead of the API's JSON 401. The page names no secret and no
path of this machine: only where a host keeps the token it generated, and the variables that point at it.
"""
from __future__ import annotations

from html import escape

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ..settings import STATE_DIR_ENV, TOKEN_ENV, TOKEN_FILE_NAME

PAGE = "/ui"
PAGE_PATHS = ("/", PAGE)   # where a browser may pass the token as ?token=


def home(request: Request) -> Response:
    """`/` leads to the page, its query (a `?token=`) kept."""
    query = request.url.query
    return RedirectResponse(f"{PAGE}?{query}" if query else PAGE, status_code=303)


def sign_in(request: Request) -> Response:
    """The 401 a browser gets at `/ui` or `/` without a valid token: how to get in, as HTML."""
    refused = "The token given is not the token of this host. " if request.query_params.get("token") else ""
    body = (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>mgstreams: sign in</title>'
        "<style>body { font-family: system-ui, sans-serif; margin: 1.5rem; max-width: 46rem; color: #222; }"
        "code { background: #f4f4f4; padding: 0 0.2rem; } input { width: 28rem; }</style></head><body>"
        "<h1>mgstreams</h1>"
        f'<p id="why">{escape(refused)}This host needs its API token to show its streams.</p>'
        "<p>A host started without one made it at its first start: the file "
        f"<code>{TOKEN_FILE_NAME}</code> in its state directory (<code>--state-dir</code>, else "
        f"<code>${STATE_DIR_ENV}</code>, else <code>~/.local/state/mgstreams</code>); its ready line names the "
        f"file. Otherwise it is the token the host was given (<code>--token-file</code> or <code>${TOKEN_ENV}"
        "</code>).</p>"
        f'<p>Open <code>{PAGE}?token=TOKEN</code>, for example <code>http://127.0.0.1:8765{PAGE}?token=$(cat '
        f"mgstreams-state/{TOKEN_FILE_NAME})</code> in a shell, or paste it here:</p>"
        f'<form action="{PAGE}" method="get"><input name="token" type="password" autocomplete="off" '
        'aria-label="token"> <button type="submit">Open</button></form>'
        '<p style="color:#777">The address then holds the token, in this browser\'s history too.</p>'
        "</body></html>")
    return HTMLResponse(body, status_code=401, headers={"WWW-Authenticate": 'Bearer realm="mgstreams"'})
