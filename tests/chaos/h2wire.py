"""A raw HTTP/2 gRPC client for the chaos tests: it does what no well-behaved client library lets
you do — open streams and never read the answers (a zero flow-control window), or open more
streams than the server allows — over a plain socket on loopback."""

from __future__ import annotations

import socket
import struct

import h2.config
import h2.connection
import h2.events
import h2.settings


def grpc_frame(message: bytes) -> bytes:
    """A gRPC length-prefixed message (uncompressed)."""
    return b"\x00" + struct.pack(">I", len(message)) + message


class RawH2:
    """One HTTP/2 connection. ``window=0`` advertises a zero initial stream window: the server may
    send headers but no answer bytes until we grant some, which we never do (a slow reader)."""

    def __init__(self, address: str, *, window: int | None = None, timeout: float = 10.0) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        if window is not None:
            self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.authority = address
        self.events: list[h2.events.Event] = []
        self.closed = False
        self.flush()

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def call(self, method: str, message: bytes, metadata: tuple[tuple[str, str], ...] = ()) -> int:
        """Start a unary call on a new stream; returns the stream id (the answer is not read)."""
        stream = self.conn.get_next_available_stream_id()
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", method),
            (":authority", self.authority),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            *metadata,
        ]
        self.conn.send_headers(stream, headers)
        self.conn.send_data(stream, grpc_frame(message), end_stream=True)
        self.flush()
        return stream

    def pump(self, timeout: float = 0.2) -> list[h2.events.Event]:
        """Read what the server sent within ``timeout`` (acknowledging settings, nothing else)."""
        self.sock.settimeout(timeout)
        got: list[h2.events.Event] = []
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    self.closed = True
                    break
                got.extend(self.conn.receive_data(data))
                self.flush()
        except (TimeoutError, BlockingIOError):
            pass
        except (ConnectionResetError, BrokenPipeError):
            self.closed = True
        self.events.extend(got)
        return got

    @property
    def server_max_streams(self) -> int:
        return int(self.conn.remote_settings.max_concurrent_streams)

    def close(self) -> None:
        self.sock.close()
