"""The HTTP/JSON gateway: an ASGI app (served by uvicorn in the Engram process) that transcodes
each annotated route into a call to the same process's gRPC server over a private Unix socket.

Why a loopback channel rather than calling the servicer: every HTTP call then goes through exactly
the path a gRPC call takes — the same interceptors (auth, rate limits, telemetry), the same
deserialization, validation and error mapping, the same message size limits — so the two can never
drift. The cost is one local hop (measured by ``bench/http_vs_grpc.py``).

Security: no cookies are read or set; the key travels as ``Authorization: Bearer`` or ``x-api-key``
exactly as over gRPC. Requests with a body must be ``Content-Type: application/json`` (a browser
cannot send that cross-origin without a CORS preflight, which this server never grants), requests
whose ``Origin`` is not this server are refused, and without auth only loopback ``Host`` names are
accepted (DNS rebinding). Bodies are bounded (``ENGRAM_MAX_MESSAGE_BYTES``) and must arrive within
``ENGRAM_HTTP_TIMEOUT_SECONDS``, as must each request's headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import grpc
import uvicorn
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from uvicorn.protocols.http.h11_impl import H11Protocol

from engram_client.proto.engram.v1 import memory_service_pb2
from engram_server.api.auth import is_loopback
from engram_server.api.errors import to_status
from engram_server.api.http.openapi import openapi_document
from engram_server.api.http.routes import Binding, TranscodeError, bindings_of, build_request, message_class
from engram_server.domain.errors import EngramError, InvalidArgument, PermissionDenied

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

SERVICE = memory_service_pb2.DESCRIPTOR.services_by_name["MemoryService"]
OPENAPI_PATH = "/openapi.json"
CONSOLE_PATH = "/console/"
#: Request headers passed on to the gRPC call as metadata.
FORWARDED_HEADERS = ("authorization", "x-api-key", "traceparent", "tracestate")

#: google.rpc.Code → HTTP status (the mapping of google/rpc/code.proto and grpc-gateway).
HTTP_STATUS: dict[int, int] = {
    code_pb2.OK: 200,
    code_pb2.CANCELLED: 499,
    code_pb2.UNKNOWN: 500,
    code_pb2.INVALID_ARGUMENT: 400,
    code_pb2.DEADLINE_EXCEEDED: 504,
    code_pb2.NOT_FOUND: 404,
    code_pb2.ALREADY_EXISTS: 409,
    code_pb2.PERMISSION_DENIED: 403,
    code_pb2.UNAUTHENTICATED: 401,
    code_pb2.RESOURCE_EXHAUSTED: 429,
    code_pb2.FAILED_PRECONDITION: 400,
    code_pb2.ABORTED: 409,
    code_pb2.OUT_OF_RANGE: 400,
    code_pb2.UNIMPLEMENTED: 501,
    code_pb2.INTERNAL: 500,
    code_pb2.UNAVAILABLE: 503,
    code_pb2.DATA_LOSS: 500,
}

SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    ),
]
CONSOLE_FILES = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}


@dataclass(frozen=True)
class HttpOptions:
    max_body_bytes: int
    timeout_seconds: float
    console: bool
    auth_on: bool
    version: str = "0"


class HttpError(Exception):
    """An answer decided at the HTTP layer (before any RPC), as google.rpc.Status JSON."""

    def __init__(
        self,
        http_status: int,
        status: status_pb2.Status,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        super().__init__(status.message)
        self.http_status = http_status
        self.status = status
        self.headers = headers or []

    @classmethod
    def of(cls, http_status: int, error: EngramError) -> HttpError:
        return cls(http_status, _status_of(error))

    @classmethod
    def plain(cls, http_status: int, code: int, message: str) -> HttpError:
        return cls(http_status, status_pb2.Status(code=code, message=message))


def _status_of(error: EngramError) -> status_pb2.Status:
    """The same google.rpc.Status a gRPC caller would get for this domain error."""
    for key, value in to_status(error).trailing_metadata:
        if key == "grpc-status-details-bin":
            return status_pb2.Status.FromString(value)
    raise AssertionError("to_status always carries details")


def status_json(status: status_pb2.Status) -> bytes:
    return json_format.MessageToJson(status, indent=None).encode()


def _rpc_error_status(exc: grpc.aio.AioRpcError) -> status_pb2.Status:
    for key, value in exc.trailing_metadata() or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            with contextlib.suppress(Exception):
                return status_pb2.Status.FromString(value)
    return status_pb2.Status(code=exc.code().value[0], message=exc.details() or "")


def _retry_after(status: status_pb2.Status) -> list[tuple[bytes, bytes]]:
    for detail in status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            seconds = max(1, -(-info.retry_delay.ToNanoseconds() // 1_000_000_000))
            return [(b"retry-after", str(seconds).encode())]
    return []


class Gateway:
    """The ASGI application."""

    def __init__(self, channel: grpc.aio.Channel, options: HttpOptions) -> None:
        self.options = options
        self.bindings = bindings_of(SERVICE)
        self._calls = {
            b.full_method: channel.unary_unary(
                b.full_method,
                request_serializer=message_class(b.method.input_type).SerializeToString,
                response_deserializer=message_class(b.method.output_type).FromString,
            )
            for b in self.bindings
        }
        self._openapi = json.dumps(openapi_document(SERVICE, version=options.version)).encode()

    # --- ASGI ------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan is off; websockets are not served
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            await self._handle(scope, headers, receive, send)
        except HttpError as exc:
            extra = exc.headers + _retry_after(exc.status)
            if exc.http_status == 401:
                extra.append((b"www-authenticate", b'Bearer realm="engram"'))
            await _respond(send, exc.http_status, status_json(exc.status), extra_headers=extra)
        except Exception:
            log.exception("unexpected error in the HTTP gateway (%s %s)", scope["method"], scope["path"])
            status = status_pb2.Status(code=code_pb2.INTERNAL, message="internal error in the HTTP gateway")
            await _respond(send, 500, status_json(status))

    async def _handle(self, scope: Scope, headers: dict[str, str], receive: Receive, send: Send) -> None:
        self._check_origin(headers)
        verb: str = scope["method"].upper()
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
        path = raw_path.decode("latin-1").split("?", 1)[0]
        if path == OPENAPI_PATH and verb in {"GET", "HEAD"}:
            await _respond(send, 200, self._openapi)
            return
        if self.options.console and verb in {"GET", "HEAD"}:
            if path in {"/", "/console"}:
                await _respond(send, 308, b"", extra_headers=[(b"location", CONSOLE_PATH.encode())])
                return
            if path.startswith(CONSOLE_PATH):
                await self._static(send, path.removeprefix(CONSOLE_PATH) or "index.html")
                return
        matched: Binding | None = None
        variables: dict[str, str] = {}
        allowed: list[str] = []
        for binding in self.bindings:
            found = binding.match(path)
            if found is None:
                continue
            if binding.verb == verb:
                matched, variables = binding, found
                break
            allowed.append(binding.verb)
        if matched is None:
            if allowed:
                raise HttpError(
                    405,
                    status_pb2.Status(
                        code=code_pb2.UNIMPLEMENTED, message=f"{verb} is not allowed on {path}"
                    ),
                    [(b"allow", ", ".join(sorted(set(allowed))).encode())],
                )
            raise HttpError.plain(404, code_pb2.NOT_FOUND, f"no route for {verb} {path}")
        body = await self._body(headers, receive) if verb not in {"GET", "HEAD", "DELETE"} else b""
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        try:
            request = build_request(matched, variables, query, body)
        except UnicodeDecodeError:
            raise HttpError.of(400, InvalidArgument.of("body", "is not UTF-8")) from None
        except json.JSONDecodeError as exc:
            raise HttpError.of(400, InvalidArgument.of("body", f"malformed JSON: {exc}")) from None
        except RecursionError:
            raise HttpError.of(400, InvalidArgument.of("body", "JSON nested too deeply")) from None
        except TranscodeError as exc:
            raise HttpError.of(400, InvalidArgument.of(exc.field, exc.description)) from None
        metadata = [(name, headers[name]) for name in FORWARDED_HEADERS if name in headers]
        for name, value in metadata:
            if not value.isascii() or not value.isprintable():
                raise HttpError.of(400, InvalidArgument.of(name, "header must be printable ASCII"))
        try:
            response: Message = await self._calls[matched.full_method](request, metadata=metadata)
        except grpc.aio.AioRpcError as exc:
            status = _rpc_error_status(exc)
            raise HttpError(HTTP_STATUS.get(status.code, 500), status) from None
        await _respond(send, 200, json_format.MessageToJson(response, indent=None).encode())

    def _check_origin(self, headers: dict[str, str]) -> None:
        """CSRF and DNS-rebinding guards (see the module docstring)."""
        host = headers.get("host", "")
        origin = headers.get("origin")
        if origin is not None and origin != "null" and urlsplit(origin).netloc.lower() != host.lower():
            raise HttpError.of(403, PermissionDenied(f"cross-origin requests are refused (Origin {origin})"))
        if origin == "null":
            raise HttpError.of(403, PermissionDenied("requests from an opaque origin are refused"))
        if not self.options.auth_on:
            hostname = urlsplit(f"//{host}").hostname or ""
            if not is_loopback(hostname):
                raise HttpError.of(
                    403,
                    PermissionDenied(
                        f"Host {host!r} refused: without auth only loopback names are served "
                        "(DNS rebinding guard)"
                    ),
                )

    async def _body(self, headers: dict[str, str], receive: Receive) -> bytes:
        ctype = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        limit = self.options.max_body_bytes
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise HttpError(413, _status_of(InvalidArgument.of("body", f"larger than {limit} bytes")))
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.options.timeout_seconds):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise HttpError.plain(499, code_pb2.CANCELLED, "client disconnected")
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        raise HttpError(
                            413, _status_of(InvalidArgument.of("body", f"larger than {limit} bytes"))
                        )
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            raise HttpError(
                408,
                status_pb2.Status(
                    code=code_pb2.DEADLINE_EXCEEDED,
                    message=f"request body not received within {self.options.timeout_seconds:g}s",
                ),
                [(b"connection", b"close")],
            ) from None
        body = b"".join(chunks)
        if body.strip() and ctype != "application/json":
            raise HttpError(
                415,
                _status_of(
                    InvalidArgument.of("content-type", "must be application/json for a request with a body")
                ),
            )
        return body

    async def _static(self, send: Send, name: str) -> None:
        ctype = CONSOLE_FILES.get(name)
        if ctype is None:
            raise HttpError.plain(404, code_pb2.NOT_FOUND, f"no console file {name!r}")
        data = resources.files("engram_server.api.http").joinpath("console", name).read_bytes()
        await _respond(send, 200, data, content_type=ctype)


async def _respond(
    send: Send,
    status: int,
    body: bytes,
    *,
    content_type: str = "application/json",
    extra_headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
        *SECURITY_HEADERS,
        *(extra_headers or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# --- the server ----------------------------------------------------------------------------------


def _protocol_with_head_timeout(seconds: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, plus a deadline for each request's headers (slow-loris clients)."""

    class Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            # uvicorn writes a response's headers and body separately: without TCP_NODELAY, Nagle
            # holds the body until the client's delayed ACK (~40 ms on every keep-alive request).
            sock = transport.get_extra_info("socket")
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(seconds, self._head_too_slow)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_too_slow(self) -> None:
            self._head_timer = None
            if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
                self.transport.close()

        def handle_events(self) -> None:
            super().handle_events()
            if self.cycle is not None and not self.cycle.response_complete:
                self._disarm()  # the headers are in; the body has its own deadline

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return Protocol


def _fixed_context(
    context: ssl.SSLContext | None,
) -> Callable[[uvicorn.Config, Callable[[], ssl.SSLContext]], ssl.SSLContext] | None:
    if context is None:
        return None
    return lambda _config, _default: context


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the Engram process handles SIGTERM/SIGINT itself


class HttpServer:
    """The gateway on its own socket, beside the gRPC server of the same process."""

    def __init__(
        self,
        grpc_target: str,
        *,
        host: str,
        port: int,
        options: HttpOptions,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.grpc_target = grpc_target
        self.host = host
        self.options = options
        self._requested_port = port
        self._ssl = ssl_context
        self.port = 0
        self._channel: grpc.aio.Channel | None = None
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._channel = grpc.aio.insecure_channel(
            self.grpc_target,
            options=[
                ("grpc.max_receive_message_length", -1),
                ("grpc.max_send_message_length", -1),
            ],
        )
        app = Gateway(self._channel, self.options)
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host.strip("[]"), self._requested_port))
        except OSError as exc:
            sock.close()
            raise OSError(
                f"cannot listen on {self.host}:{self._requested_port} for HTTP: {exc.strerror or exc}; "
                "set ENGRAM_HTTP_PORT to a free port or ENGRAM_HTTP_HOST to another address"
            ) from exc
        sock.listen(1024)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            app,
            ssl_context_factory=_fixed_context(self._ssl),
            lifespan="off",
            http=_protocol_with_head_timeout(self.options.timeout_seconds),
            ws="none",
            log_config=None,
            access_log=False,
            server_header=False,
            timeout_keep_alive=5,
            limit_concurrency=1024,
            h11_max_incomplete_event_size=64 * 1024,
            timeout_graceful_shutdown=5,
        )
        self._server = _Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise OSError("the HTTP server stopped while starting")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._channel is not None:
            await self._channel.close()
