"""Which searches the embedded store may filter for liveness itself (``live_only_at``), and the
rule it applies (``is_live``), against the filter plan the engine would otherwise run."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engram_server.adapters.storage.payload import (
    IsEmpty,
    Range,
    filter_plan,
    is_live,
    live_only_at,
    rank_fields,
)
from engram_server.domain.model import MemoryType, SourceType, StoreFilter

NOW = 1_800_000_000.0


def test_only_the_plain_live_filter_is_decided_beside_the_engine() -> None:
    live = StoreFilter(live_at=NOW)
    assert live_only_at(live) == NOW
    # exactly these three conditions, which the ranking fields carry
    assert set(filter_plan(live).must) == {
        IsEmpty("superseded_by"),
        IsEmpty("draft"),
        Range("valid_until", gt=NOW),
    }
    assert live_only_at(StoreFilter()) is None  # no time: expired memories match
    for other in (
        replace(live, types=(MemoryType.EVENT,)),
        replace(live, tags_any=("x",)),
        replace(live, created_after=1.0),
        replace(live, created_before=NOW),
        replace(live, min_importance=3),
        replace(live, source_types=(SourceType.USER_INPUT,)),
        replace(live, expired_at=NOW),
        replace(live, include_history=True),
        replace(live, only_history_of="a"),
        replace(live, request_id="r"),
        replace(live, request_ids=("r",)),
        replace(live, include_drafts=True),
        replace(live, unreflected=True),
    ):
        assert live_only_at(other) is None, other


@pytest.mark.parametrize(
    ("payload", "live"),
    [
        ({}, True),
        ({"valid_until": NOW}, False),  # valid_until > live_at, strictly
        ({"valid_until": NOW + 1}, True),
        ({"superseded_by": "b"}, False),
        ({"superseded_by": None}, True),  # null is empty
        ({"superseded_by": []}, True),  # so is an empty list
        ({"draft": "true"}, False),
        ({"draft": True}, False),
        ({"superseded_by": "b", "draft": "true", "valid_until": NOW - 5}, False),
    ],
)
def test_is_live_reads_the_ranking_fields_as_the_filter_does(payload: dict[str, object], live: bool) -> None:
    base = {
        "type": "insight",
        "importance": 5,
        "created_at": 1.0,
        "valid_until": NOW + 100,
        "script": "latin",
    }
    rank = rank_fields("p", {**base, **payload}, "default")
    assert is_live(rank, NOW) is live
