"""A Schema Registry stand-in: a real HTTP server speaking the part of Confluent Schema Registry's REST API that
confluent-kafka's serializers and deserializers call.

Source: Confluent's "Schema Registry API Reference"
(docs.confluent.io/platform/current/schema-registry/develop/api.html): the resources below, their JSON bodies,
and its error bodies `{"error_code": 40403, "message": "Schema not found"}` (40401 subject not found, 40402 version
not found, 40403 schema not found; 40101 unauthorized).

- `POST /subjects/{subject}/versions`            register: `{"schema", "schemaType"?, "references"?}` -> `{"id"}`;
                                                 the same schema text gets the same id in every subject
- `POST /subjects/{subject}`                     look a schema up in a subject -> `{"subject", "id", "version",
                                                 "schema", "schemaType"}`
- `GET /schemas/ids/{id}` (`?subject=`, `?format=`) -> `{"schema", "schemaType", "references"}`
- `GET /subjects/{subject}/versions/{version|latest}`
- `GET /subjects`, `GET /subjects/{subject}/versions`
- `GET /associations/...`: 404, as a registry without associations answers (confluent-kafka 2.16's default
  subject name strategy asks, then falls back to the topic name strategy)

Schema text is kept as the client sent it (Protobuf: the serializer's base64 FileDescriptorProto, which is what
`?format=serialized` asks for). `auth` makes every request need that Authorization header value (401 without).
`down()` closes the listening socket (connections are refused) and `up()` opens it again on the same port.
`requests` counts what was asked, by method and path.
"""
from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit


class SchemaRegistry:
    def __init__(self, *, auth: str | None = None, port: int = 0):
        self.auth = auth
        self._lock = threading.Lock()
        self._schemas: dict[int, dict] = {}          # id -> {"schema", "schemaType", "references"}
        self._ids: dict[tuple, int] = {}             # (text, type) -> id
        self._subjects: dict[str, list[int]] = {}    # subject -> ids by version (1-based)
        self.requests: Counter = Counter()
        self._port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.up()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def up(self) -> None:
        handler = type("Handler", (_Handler,), {"registry": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", self._port), handler)
        self._server.daemon_threads = True
        self._port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="schema-registry", daemon=True)
        self._thread.start()

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    close = down

    def __enter__(self) -> SchemaRegistry:
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    # -- the registry's state -------------------------------------------------------------------------
    def register(self, subject: str, body: dict) -> int:
        text, kind = body["schema"], body.get("schemaType", "AVRO")
        with self._lock:
            schema_id = self._ids.get((text, kind))
            if schema_id is None:
                schema_id = len(self._schemas) + 1
                self._ids[(text, kind)] = schema_id
                self._schemas[schema_id] = {"schema": text, "schemaType": kind,
                                            "references": body.get("references") or []}
            versions = self._subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            return schema_id

    def schema(self, schema_id: int) -> dict | None:
        with self._lock:
            return self._schemas.get(schema_id)

    def version(self, subject: str, version: str) -> dict | None:
        with self._lock:
            versions = self._subjects.get(subject)
            if not versions:
                return None
            number = len(versions) if version in ("latest", "-1") else int(version)
            if not 1 <= number <= len(versions):
                return None
            schema_id = versions[number - 1]
            return {"subject": subject, "version": number, "id": schema_id, **self._schemas[schema_id]}

    def lookup(self, subject: str, body: dict) -> dict | None:
        with self._lock:
            schema_id = self._ids.get((body["schema"], body.get("schemaType", "AVRO")))
            versions = self._subjects.get(subject, [])
            if schema_id is None or schema_id not in versions:
                return None
            return {"subject": subject, "version": versions.index(schema_id) + 1, "id": schema_id,
                    **self._schemas[schema_id]}


class _Handler(BaseHTTPRequestHandler):
    registry: SchemaRegistry
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):   # noqa: A002 (the base class's name)
        pass

    def do_GET(self):
        self._serve("GET")

    def do_POST(self):
        self._serve("POST")

    def _serve(self, method: str) -> None:
        parts = urlsplit(self.path)
        path = [unquote(p) for p in parts.path.strip("/").split("/")]
        query = parse_qs(parts.query)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        registry = self.registry
        registry.requests[(method, "/" + "/".join(path[:2]))] += 1
        if registry.auth is not None and self.headers.get("Authorization") != registry.auth:
            return self._answer(401, {"error_code": 40101, "message": "Unauthorized"})
        if path[0] == "associations":
            return self._answer(404, {"error_code": 40401, "message": "No associations found"})
        if method == "POST" and len(path) == 3 and path[0] == "subjects" and path[2] == "versions":
            return self._answer(200, {"id": registry.register(path[1], body)})
        if method == "POST" and len(path) == 2 and path[0] == "subjects":
            found = registry.lookup(path[1], body)
            return self._answer(200, found) if found else self._answer(404, {"error_code": 40403,
                                                                               "message": "Schema not found"})
        if method == "GET" and len(path) == 3 and path[:2] == ["schemas", "ids"]:
            found = registry.schema(int(path[2])) if path[2].isdigit() else None
            if found is None:
                return self._answer(404, {"error_code": 40403, "message": "Schema not found"})
            return self._answer(200, dict(found))
        if method == "GET" and len(path) == 4 and path[0] == "subjects" and path[2] == "versions":
            found = registry.version(path[1], path[3])
            if found is None:
                return self._answer(404, {"error_code": 40402, "message": "Version not found"})
            return self._answer(200, found)
        if method == "GET" and path == ["subjects"]:
            return self._answer(200, sorted(registry._subjects))
        if method == "GET" and len(path) == 3 and path[0] == "subjects" and path[2] == "versions":
            versions = registry._subjects.get(path[1])
            if not versions:
                return self._answer(404, {"error_code": 40401, "message": "Subject not found"})
            return self._answer(200, list(range(1, len(versions) + 1)))
        del query
        return self._answer(404, {"error_code": 404, "message": f"not served by the stand-in: {method} {parts.path}"})

    def _answer(self, status: int, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
