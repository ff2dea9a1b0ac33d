"""A topic index survives a restart: ``TopicIndex.restore`` from its snapshot and the store's
memories gives the same index (ids, membership, parents, names), whatever order the memories were
written in; after a crash (a stale snapshot) every live memory is still indexed."""

from __future__ import annotations

import json
import random
import uuid

import numpy as np

from engram_server.domain.topics import TopicIndex, TopicParams

DIM = 32
WORDS = [
    ["guitar", "chord", "scale", "strings", "practice"],
    ["stew", "oven", "recipe", "garlic", "simmer"],
    ["deploy", "cluster", "rollback", "canary", "release"],
    ["marathon", "pace", "interval", "stretch", "tempo"],
    ["invoice", "budget", "tax", "receipt", "ledger"],
]


Item = tuple[str, np.ndarray, str, float, float, float]


def _workload(seed: int, n: int) -> tuple[random.Random, list[Item]]:
    rng = random.Random(seed)
    gen = np.random.default_rng(seed)
    centres = gen.normal(size=(len(WORDS), DIM))
    items = []
    for i in range(n):
        k = rng.randrange(len(WORDS))
        vec = centres[k] + gen.normal(scale=0.6, size=DIM)
        text = " ".join(rng.sample(WORDS[k], 3)) + "."
        t = 1000.0 + i
        items.append((str(uuid.UUID(int=rng.getrandbits(128))), vec, text, 1e12, t, t))
    return rng, items


def _grow(seed: int, n: int) -> tuple[TopicIndex, dict[str, Item]]:
    """An index kept incrementally through adds, updates and deletes (re-clustering included)."""
    rng, items = _workload(seed, n)
    index = TopicIndex(DIM, TopicParams(leaf_threshold=0.3))
    live: dict[str, Item] = {}
    clock = 5000.0
    for it in items:
        clock += 1
        index.upsert(it[0], it[1], it[2], valid_until=it[3], updated_at=it[4], now=clock, created_at=it[5])
        live[it[0]] = it
        roll = rng.random()
        if roll < 0.1 and len(live) > 3:  # delete one
            gone = rng.choice(sorted(live))
            index.remove(gone)
            del live[gone]
        elif roll < 0.2:  # update one: new content and vector, later updated_at
            mid = rng.choice(sorted(live))
            other = items[rng.randrange(len(items))]
            moved = (mid, other[1], other[2], 1e12, clock, live[mid][5])
            index.upsert(
                mid, moved[1], moved[2], valid_until=1e12, updated_at=clock, now=clock, created_at=moved[5]
            )
            live[mid] = moved
    return index, live


def _state(index: TopicIndex) -> tuple[dict[str, str | None], dict[str, tuple[int, int, str | None, str]]]:
    members = {mid: index.topic_of(mid) for mid in index.member_state()}
    topics = {}
    for root in index.roots():
        for tid in (root.id, *root.children):
            v = index.view(tid)
            assert v is not None
            topics[tid] = (v.level, v.size, v.parent_id or None, v.name)
    return members, topics


def test_restore_gives_the_same_index() -> None:
    for seed in range(12):
        index, live = _grow(seed, 160)
        index.rename(index.leaf_ids()[0], "Guitar practice")
        snap = json.loads(json.dumps(index.snapshot()))  # as the store keeps it
        again = TopicIndex(DIM, TopicParams(leaf_threshold=0.3))
        shuffled = list(live.values())
        random.Random(seed).shuffle(shuffled)
        again.restore(shuffled, snap, now=9e9)
        assert _state(again) == _state(index), seed
        assert again.changes_since_build == index.changes_since_build
        for tid in index.leaf_ids():
            np.testing.assert_allclose(again.centroid(tid), index.centroid(tid), atol=1e-9)
        assert len(index) > 100  # not vacuous


def test_a_stale_snapshot_keeps_every_live_memory() -> None:
    index, live = _grow(7, 120)
    snap = json.loads(json.dumps(index.snapshot()))
    snap["changes_since_build"] = 0  # no re-clustering falls due with the writes below
    placed = {mid: index.topic_of(mid) for mid in index.member_state()}
    # after the snapshot (then a crash): one memory deleted, one updated, ten added
    _, extra = _workload(99, 10)
    gone, changed = sorted(live)[:2]
    del live[gone]
    live[changed] = (changed, extra[0][1], extra[0][2], 1e12, 9e6, live[changed][5])
    for it in extra[1:]:
        live[it[0]] = (it[0], it[1], it[2], 1e12, 9e6, 9e6)
    again = TopicIndex(DIM, TopicParams(leaf_threshold=0.3))
    again.restore(list(live.values()), snap, now=9e9)
    assert set(again.member_state()) == set(live)
    unchanged = [m for m in live if m in placed and m != changed]
    assert len(unchanged) > 100
    assert [m for m in unchanged if again.topic_of(m) != placed[m]] == []  # nobody else moved
    assert again.changes_since_build == 10  # the writes re-applied count towards the next build


def test_an_older_snapshot_without_membership_still_restores() -> None:
    index, live = _grow(3, 100)
    snap = json.loads(json.dumps(index.snapshot()))
    snap["version"] = 1
    for t in snap["topics"]:
        t.pop("members", None)
    again = TopicIndex(DIM, TopicParams(leaf_threshold=0.3))
    again.restore(list(live.values()), snap, now=9e9)
    assert set(again.member_state()) == set(live)
    # seeded with the old centroids: most leaves keep their ids
    assert len(set(again.leaf_ids()) & set(index.leaf_ids())) * 2 > len(index.leaf_ids())


def test_a_snapshot_of_another_dimension_is_ignored() -> None:
    index, live = _grow(4, 60)
    snap = index.snapshot()
    snap["dimension"] = DIM * 2
    again = TopicIndex(DIM, TopicParams(leaf_threshold=0.3))
    again.restore(list(live.values()), snap, now=9e9)
    assert set(again.member_state()) == set(live)
