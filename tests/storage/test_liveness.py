"""Which searches the embedded store may filter for liveness itself (``split_live``), and the
rule it applies (``is_live``), against the filter plan the engine would otherwise run."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engram_server.adapters.storage.payload import (
    IsEmpty,
    Range,
    filter_plan,
    is_live,
    rank_fields,
    split_live,
)
from engram_server.domain.model import MemoryType, SourceType, StoreFilter

NOW = 1_800_000_000.0
LIVENESS = {IsEmpty("superseded_by"), IsEmpty("draft"), IsEmpty("trashed_at"), Range("valid_until", gt=NOW)}


def test_liveness_is_split_from_the_user_filter_of_a_search() -> None:
    live = StoreFilter(live_at=NOW)
    user, at = split_live(live) or (None, None)
    assert at == NOW and user is not None and filter_plan(user).must == ()
    # exactly these conditions, which the ranking fields carry
    assert set(filter_plan(live).must) == LIVENESS
    for users in (
        replace(live, types=(MemoryType.EVENT,)),
        replace(live, tags_any=("x",)),
        replace(live, created_after=1.0, created_before=NOW),
        replace(live, min_importance=3),
        replace(live, source_types=(SourceType.USER_INPUT,)),
    ):
        split = split_live(users)
        assert split is not None and split[1] == NOW
        # the engine's part and the store's part make up the whole filter
        assert set(filter_plan(split[0]).must) | LIVENESS == set(filter_plan(users).must)
        assert not set(filter_plan(split[0]).must) & LIVENESS
    assert split_live(StoreFilter()) is None  # no time: expired memories match
    for other in (
        replace(live, expired_at=NOW),
        replace(live, include_history=True),
        replace(live, only_history_of="a"),
        replace(live, request_id="r"),
        replace(live, request_ids=("r",)),
        replace(live, include_drafts=True),
        replace(live, unreflected=True),
    ):
        assert split_live(other) is None, other


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


def test_rewriting_tags_keeps_the_derived_trigger_flag_in_step() -> None:
    """has_trigger is derived from the tags (GetTriggers' indexed match): any write of the tags
    (an update, the format-3 migration) writes it too, and clears it when no trigger tag is left."""
    from engram_server.adapters.storage.payload import encode_fields  # noqa: PLC0415

    assert encode_fields({"tags": ["ops", "trigger:deploy"]})["has_trigger"] == "true"
    assert encode_fields({"tags": ["ops"]})["has_trigger"] is None
    assert "has_trigger" not in encode_fields({"importance": 3})
