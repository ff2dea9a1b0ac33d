"""``EdgeStore.texts`` (what a search's cross-script matching reads of its candidates): each current
point's text and ``created_at``, exactly as its full record has them; history versions, unknown
ids and ids that are not UUIDs are left out, as reading the records leaves them out."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np

from engram_server.adapters.storage.edge import EdgeStore
from engram_server.domain.model import CollectionSpec, MemoryRecord, StoredPoint

DIM = 8


async def test_texts_are_the_current_records_text_and_created_at(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    store = EdgeStore(tmp_path, nearest_lists=0)
    await store.open()
    try:
        await store.create_collection(
            CollectionSpec(name="default", embedding_model="test/random", dimension=DIM, created_at=1.0)
        )
        current = [
            MemoryRecord(
                id=str(uuid.uuid4()),
                collection="default",
                content=f"memory {i}: 会议 meeting {i}",
                created_at=1_800_000_000.0 + i / 3,
            )
            for i in range(6)
        ]
        history = MemoryRecord(
            id=str(uuid.uuid4()),
            collection="default",
            content="an older version",
            created_at=1_700_000_000.5,
            superseded_by=current[0].id,
        )
        await store.upsert(
            "default",
            [StoredPoint(r, np.asarray(rng.normal(size=DIM), dtype=np.float32)) for r in [*current, history]],
        )
        asked = [r.id for r in current] + [history.id, str(uuid.uuid4()), "not-a-uuid", current[2].id.upper()]
        got = await store.texts("default", asked)
        records = {p.record.id: p.record for p in await store.retrieve("default", asked)}
        want = {i: (r.content, r.created_at) for i, r in records.items() if r.is_current}
        assert got == {r.id: (r.content, r.created_at) for r in current} == want
        assert await store.texts("default", []) == {}
    finally:
        await store.close()
