"""HTTP/JSON beside gRPC: routes from the proto's ``google.api.http`` annotations, an OpenAPI
document generated from the same descriptors, and the web console (static files, HTTP API only).

Off by default (``ENGRAM_HTTP_PORT`` unset). :func:`prepare` binds the private Unix socket the
gateway reaches the gRPC server through; :meth:`HttpServer.start` opens the HTTP port.
"""

from __future__ import annotations

import shutil
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

import grpc

from engram_server.api.auth import is_loopback
from engram_server.api.http.gateway import HttpOptions, HttpServer
from engram_server.config import ConfigError, Settings

__all__ = ["HttpAttachment", "HttpServer", "check_bind", "prepare"]


@dataclass
class HttpAttachment:
    server: HttpServer
    socket_dir: Path

    async def start(self) -> None:
        await self.server.start()

    async def stop(self) -> None:
        try:
            await self.server.stop()
        finally:
            shutil.rmtree(self.socket_dir, ignore_errors=True)


def _ssl_context(settings: Settings) -> ssl.SSLContext | None:
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
        if settings.tls_client_ca_file is not None:
            context.load_verify_locations(settings.tls_client_ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"ENGRAM_TLS_* for the HTTP port: {exc}") from exc
    return context


def check_bind(settings: Settings, *, auth_on: bool) -> None:
    """Refuse (ConfigError) an HTTP port on a non-loopback address without auth: unlike gRPC there
    is no ``ENGRAM_AUTH=off`` escape, since any web page a browser on that network opens could
    reach it."""
    if settings.http_port is not None and not auth_on and not is_loopback(settings.http_host):
        raise ConfigError(
            f"refusing to serve HTTP on {settings.http_host} (not loopback) without authentication: "
            "set ENGRAM_API_KEY or ENGRAM_AUTH_FILE, or ENGRAM_HTTP_HOST=127.0.0.1"
        )


def prepare(settings: Settings, grpc_server: grpc.aio.Server, *, auth_on: bool) -> HttpAttachment | None:
    """When ENGRAM_HTTP_PORT is set: check the bind is allowed, add the private Unix-socket port to
    the (not yet started) gRPC server, and return the HTTP server to start after it."""
    if settings.http_port is None:
        return None
    check_bind(settings, auth_on=auth_on)
    context = _ssl_context(settings)
    socket_dir = Path(tempfile.mkdtemp(prefix="engram-http-"))  # mode 0700: this user only
    target = f"unix:{socket_dir / 'grpc.sock'}"
    if grpc_server.add_insecure_port(target) == 0:
        shutil.rmtree(socket_dir, ignore_errors=True)
        raise OSError(f"could not bind the gateway's socket {target}")
    options = HttpOptions(
        max_body_bytes=settings.max_message_bytes,
        timeout_seconds=settings.http_timeout_seconds,
        console=settings.console,
        auth_on=auth_on,
        version=_version(),
    )
    server = HttpServer(
        target, host=settings.http_host, port=settings.http_port, options=options, ssl_context=context
    )
    return HttpAttachment(server, socket_dir)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version("engram")
    except PackageNotFoundError:
        return "0"
