"""Item 4 of the hardening issue, connection floods: the number of connections is capped (past it
a new connection is closed at once), connections that never speak are closed after the handshake
timeout, idle HTTP/2 connections after ``ENGRAM_MAX_CONNECTION_IDLE_SECONDS``, and hundreds of idle
TCP connections do not stop health checks.

Bare TCP sockets and real gRPC channels against the real server (own event loop thread) on
loopback. Waits are for events, with generous timeouts only to stop a hung test."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1.memory_service_pb2_grpc import MemoryServiceStub
from engram_server.app import server_options
from engram_server.config import Settings
from tests.security.support import threaded_server


def _connect(address: str, count: int) -> list[socket.socket]:
    host, _, port = address.rpartition(":")
    return [socket.create_connection((host, int(port)), timeout=30) for _ in range(count)]


def _first_read(sock: socket.socket) -> bytes:
    """What the server sends first: its HTTP/2 SETTINGS, or b"" when it closes the connection."""
    try:
        return sock.recv(65536)
    except ConnectionResetError:
        return b""


def _read_until_closed(sock: socket.socket) -> None:
    while True:
        try:
            if not sock.recv(65536):
                return
        except ConnectionResetError:
            return


def _healthy(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=30)
        return reply.status == health_pb2.HealthCheckResponse.SERVING


def test_connections_past_the_cap_are_closed_and_silent_ones_time_out(tmp_path: Path) -> None:
    cap = 8
    with threaded_server(tmp_path / "data", max_connections=cap, handshake_timeout_seconds=1.0) as server:
        flood = _connect(server.address, 20)
        try:
            first = [_first_read(sock) for sock in flood]
            spoken_to = [bool(data) for data in first]
            assert sum(spoken_to) == cap, spoken_to  # the first `cap` got the server's SETTINGS…
            assert not any(spoken_to[cap:])  # …the rest were closed at once
            for sock in flood[:cap]:  # never sending a preface: closed after the handshake timeout
                _read_until_closed(sock)
        finally:
            for sock in flood:
                sock.close()
        assert _healthy(server.address)


def test_hundreds_of_idle_tcp_connections_do_not_stop_health_checks(tmp_path: Path) -> None:
    with threaded_server(tmp_path / "data") as server:  # the defaults: 1,000 connections
        idle = _connect(server.address, 300)
        try:
            for _ in range(5):
                assert _healthy(server.address)
            with grpc.insecure_channel(server.address) as channel:
                MemoryServiceStub(channel).ListCollections(s.ListCollectionsRequest(), timeout=30)
        finally:
            for sock in idle:
                sock.close()


def test_an_idle_connection_is_closed_after_the_idle_setting(tmp_path: Path) -> None:
    with (
        threaded_server(tmp_path / "data", max_connection_idle_seconds=1.0) as server,
        grpc.insecure_channel(server.address) as channel,
    ):
        MemoryServiceStub(channel).ListCollections(s.ListCollectionsRequest(), timeout=30)
        states: list[grpc.ChannelConnectivity] = []
        channel.subscribe(states.append, try_to_connect=False)
        end = time.monotonic() + 60
        while grpc.ChannelConnectivity.IDLE not in states[1:]:  # the server's GOAWAY
            assert time.monotonic() < end, states
            time.sleep(0.05)
        # and the next call simply reconnects
        MemoryServiceStub(channel).ListCollections(s.ListCollectionsRequest(), timeout=30)
        # (unsubscribed before the channel closes: grpc's polling thread otherwise may watch a
        # closed channel and raise "Cannot monitor channel state: Channel closed!")
        channel.unsubscribe(states.append)


def test_every_bound_reaches_grpc() -> None:
    options = dict(server_options(Settings()))
    assert options["grpc.max_allowed_incoming_connections"] == 1000
    assert options["grpc.max_concurrent_streams"] == 100
    assert options["grpc.max_connection_idle_ms"] == 300_000
    assert options["grpc.max_connection_age_ms"] == 3_600_000
    assert options["grpc.max_connection_age_grace_ms"] == 30_000
    assert options["grpc.server_handshake_timeout_ms"] == 10_000
    assert options["grpc.keepalive_time_ms"] == 60_000
    off = dict(
        server_options(
            Settings(
                max_connections=0,
                max_streams_per_connection=0,
                max_connection_idle_seconds=0,
                max_connection_age_seconds=0,
            )
        )
    )
    assert not {
        "grpc.max_allowed_incoming_connections",
        "grpc.max_concurrent_streams",
        "grpc.max_connection_idle_ms",
        "grpc.max_connection_age_ms",
    } & set(off)
