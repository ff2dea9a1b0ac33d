"""Timestamps leave the server exact to the nanosecond that float seconds can carry, and never
lose a second when the fraction rounds up."""

from __future__ import annotations

import pytest

from engram_server.api.convert import ts_out


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0.0, (0, 0)),
        (1.5, (1, 500_000_000)),
        (1_700_000_000.25, (1_700_000_000, 250_000_000)),
        (1.9999999999, (2, 0)),  # rounds up to the next second: carried, not dropped
        (-0.5, (-1, 500_000_000)),  # before the epoch: whole seconds down, nanos up (protobuf's form)
    ],
)
def test_ts_out(seconds: float, expected: tuple[int, int]) -> None:
    ts = ts_out(seconds)
    assert (ts.seconds, ts.nanos) == expected
    assert 0 <= ts.nanos < 1_000_000_000
