"""The guard's parts: the malformed-body marker, the log throttle and the unread-answer budget."""

from __future__ import annotations

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_server.api.guard import LogThrottle, Malformed, ResponseBudget, safe_deserializer


def test_a_body_that_does_not_parse_becomes_a_marker() -> None:
    parse = safe_deserializer(s.AddMemoryRequest.FromString)
    assert parse is not None
    good = s.AddMemoryRequest(content="hi").SerializeToString()
    assert parse(good).content == "hi"
    bad = parse(b"\x0a\x02\xff\xfe")  # invalid UTF-8 in a string field
    assert isinstance(bad, Malformed) and bad.size == 4
    assert isinstance(parse(b"\x0a\x10abc"), Malformed)  # truncated
    assert safe_deserializer(None) is None


def test_log_throttle_lets_one_through_per_interval_and_counts_the_rest() -> None:
    now = [0.0]
    throttle = LogThrottle(10.0, max_keys=2, now=lambda: now[0])
    assert throttle.allow("a") == 0
    assert throttle.allow("a") is None and throttle.allow("a") is None
    assert throttle.allow("b") == 0  # another key has its own interval
    now[0] = 10.0
    assert throttle.allow("a") == 2  # the two held back are reported
    throttle.allow("c")
    assert len(throttle._last) == 2  # bounded


def test_response_budget() -> None:
    budget = ResponseBudget(100)
    assert budget.try_take(150)  # alone, an answer larger than the budget still goes
    assert not budget.try_take(1)
    budget.give_back(150)
    assert budget.try_take(60) and budget.try_take(40) and not budget.try_take(1)
    assert (budget.taken, budget.refused, budget.pending) == (3, 2, 100)
    unlimited = ResponseBudget(0)
    assert all(unlimited.try_take(10**9) for _ in range(3)) and unlimited.pending == 0
