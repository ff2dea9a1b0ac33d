"""The session methods of both clients through the real server: session and agent ids, the
per-session cap, get_context, get_triggers, list_slots / update_slot."""

from __future__ import annotations

import asyncio

import pytest

from engram_client import (
    AsyncEngramClient,
    EngramClient,
    InvalidArgumentError,
    MemoryFilter,
    NewMemory,
)


async def test_sync_session_methods(engram_server: str) -> None:
    await asyncio.to_thread(_sync_scenario, engram_server)


def _sync_scenario(engram_server: str) -> None:
    with EngramClient(engram_server, timeout=60) as engram:
        me = engram.add("I am Ada, the Orbit project's coding agent", type="identity", importance=9)
        assert me.memory.session_id is None
        added = engram.add("Staging runs Kubernetes 1.29", session_id="mon", agent_id="ada")
        assert (added.memory.session_id, added.memory.agent_id) == ("mon", "ada")
        engram.add_many([NewMemory("Prod runs Kubernetes 1.28", session_id="tue", agent_id="ada")])
        engram.add("Never deploy on Fridays", type="directive", importance=9, tags=["trigger:deploy"])
        page = engram.list_memories(filter=MemoryFilter(session_ids=["tue"]))
        assert [m.content for m in page.memories] == ["Prod runs Kubernetes 1.28"]
        hits = engram.search(
            "Kubernetes version", limit=5, max_per_session=1, filter=MemoryFilter(agent_ids=["ada"])
        )
        assert sorted(h.memory.session_id or "" for h in hits) == ["mon", "tue"]

        engram.update_slot("persona", "Terse and precise.")
        update = engram.update_slot("persona", "Cites sources.")
        assert update.slot.content == "Terse and precise.\nCites sources." and update.compaction == ""
        assert engram.update_slot("persona", "Friendly.", replace=True).slot.content == "Friendly."
        slots = engram.list_slots()
        assert [s.name for s in slots][:2] == ["persona", "user_preferences"] and slots[0].tokens > 0

        pack = engram.get_context(
            "which Kubernetes version runs in staging", session_id="wed", agent_id="ada"
        )
        assert pack.since_source == "last_session" and pack.last_session_id == "tue"
        assert pack.tokens_used <= pack.token_budget == 2000
        assert pack.tokenizer.startswith("xlm-roberta-sentencepiece")
        core = pack.section("core")
        assert core.items[0].slot == "persona"
        assert core.items[1].memory is not None and core.items[1].memory.content == me.memory.content
        assert [i.trigger for i in pack.section("triggers").items] == ["deploy"]
        assert pack.section("relevant").items[0].memory.content == "Staging runs Kubernetes 1.29"  # type: ignore[union-attr]
        assert pack.markdown.startswith("## Core\n- **persona**: Friendly.")

        triggers = engram.get_triggers("Deploy")
        assert triggers.action == "deploy" and [m.content for m in triggers.memories] == [
            "Never deploy on Fridays"
        ]
        with pytest.raises(InvalidArgumentError) as err:
            engram.get_context(token_budget=0)
        assert "token_budget" in {v.field for v in err.value.field_violations}
        with pytest.raises(InvalidArgumentError):
            engram.get_triggers("deploy; rm -rf")


async def test_async_session_methods(engram_server: str) -> None:
    async with AsyncEngramClient(engram_server, timeout=60) as engram:
        await engram.add("Rebase before git push", tags=["trigger:git push"], importance=7)
        got = await engram.get_triggers("git push")
        assert got.action == "git-push" and got.memories[0].tags == ("trigger:git-push",)
        pack = await engram.get_context(token_budget=500)
        assert pack.section("triggers").items[0].trigger == "git-push"
        assert (await engram.update_slot("guidance", "Ask before deleting")).slot.name == "guidance"
        assert [s.content for s in await engram.list_slots()][4] == "Ask before deleting"
