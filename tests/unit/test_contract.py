"""The domain's error reasons and the proto's ErrorReason enum stay in step."""

import grpc

from engram_client.proto.engram.v1 import error_reason_pb2
from engram_server.api.errors import CODES
from engram_server.domain.errors import Reason


def test_reasons_match_proto() -> None:
    names = error_reason_pb2.ErrorReason.keys()
    proto = {name for name in names if name != "ERROR_REASON_UNSPECIFIED"}
    assert {r.value for r in Reason} == proto


def test_every_reason_has_a_status_code_and_none_is_internal() -> None:
    assert set(CODES) == set(Reason)
    assert grpc.StatusCode.INTERNAL not in CODES.values()
    assert grpc.StatusCode.UNKNOWN not in CODES.values()
