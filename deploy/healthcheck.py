"""Container health check: the gRPC health service of the Engram server in this container.

Exit 0 when ``engram.v1.MemoryService`` answers SERVING, 1 otherwise (NOT_SERVING while draining,
or no answer within 2 s). Health needs no API key. Plaintext only: in deploy/compose.yaml TLS, if
any, ends at the balancer. Usage: ``python healthcheck.py [host:port]`` (default
``127.0.0.1:$ENGRAM_PORT``).
"""

from __future__ import annotations

import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

SERVICE = "engram.v1.MemoryService"


def main(argv: list[str]) -> int:
    target = argv[1] if len(argv) > 1 else f"127.0.0.1:{os.environ.get('ENGRAM_PORT') or '50051'}"
    try:
        with grpc.insecure_channel(target) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=SERVICE), timeout=2.0
            )
    except grpc.RpcError as exc:
        print(f"{target}: {exc.code().name}", file=sys.stderr)
        return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(f"{target}: {status}")
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
