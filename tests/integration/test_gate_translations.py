"""The write gate refuses a Chinese↔English translation of a stored memory (reason ``translation``)
and never a translation with one thing changed, through a real gRPC channel to a real server
(embedded Qdrant, the local model, CC-CEDICT)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.testing import running_server
from tests.support.rpc import add, count

Stub = memory_service_pb2_grpc.MemoryServiceStub

EN = "The user likes concise code comments."
ZH = "用户喜欢简洁的代码注释。"  # its translation
ZH_CHANGED = "用户喜欢详细的代码注释。"  # detailed, not concise


async def test_a_chinese_translation_of_an_english_memory_is_a_duplicate(stub: Stub) -> None:
    first = await add(stub, EN)
    again = await add(stub, ZH)
    assert again.outcome == s.ADD_OUTCOME_DUPLICATE
    assert again.memory.id == first.memory.id
    assert again.gate_reason == "translation"
    assert 0.35 <= again.duplicate_similarity < 0.92  # the similarity alone would have written it
    assert await count(stub) == 1


async def test_an_english_translation_of_a_chinese_memory_is_a_duplicate(stub: Stub) -> None:
    first = await add(stub, "用户会说法语。")
    again = await add(stub, "The user can speak French.")
    assert again.outcome == s.ADD_OUTCOME_DUPLICATE
    assert again.memory.id == first.memory.id
    assert again.gate_reason == "translation"


async def test_a_changed_translation_is_written(stub: Stub) -> None:
    await add(stub, EN)
    changed = await add(stub, ZH_CHANGED)
    assert changed.outcome == s.ADD_OUTCOME_CREATED
    assert changed.gate_reason == ""
    await add(stub, "用户会说法语。")
    other = await add(stub, "The user can speak German.")
    assert other.outcome == s.ADD_OUTCOME_CREATED
    # roles swapped: 李娜 hired 张伟, not the other way round
    await add(stub, "Zhang Wei hired Li Na.")
    swapped = await add(stub, "李娜雇用了张伟。")
    assert swapped.outcome == s.ADD_OUTCOME_CREATED
    assert await count(stub, include_history=True) == 6


async def test_allow_duplicate_writes_the_translation_and_lists_it(stub: Stub) -> None:
    first = await add(stub, EN)
    forced = await add(stub, ZH, allow_duplicate=True, request_id="zh-1")
    assert forced.outcome == s.ADD_OUTCOME_CREATED
    assert forced.memory.id != first.memory.id
    assert forced.gate_reason == "allow_duplicate"
    near = {n.id: n for n in forced.near_duplicates}
    assert near[first.memory.id].reason == "allow_duplicate"  # listed although below 0.70
    assert await count(stub) == 2
    # A replay gives the same answer (the reasons derived again from the stored near duplicates).
    again = await add(stub, ZH, allow_duplicate=True, request_id="zh-1")
    assert again.replayed
    assert again.memory.id == forced.memory.id
    assert again.gate_reason == "allow_duplicate"
    assert [n.reason for n in again.near_duplicates if n.id == first.memory.id] == ["allow_duplicate"]
    assert await count(stub) == 2


@pytest.fixture
async def stub_translations_off(tmp_path: Path) -> AsyncIterator[Stub]:
    async with (
        running_server(tmp_path / "data", gate_translations=False) as srv,
        grpc.aio.insecure_channel(srv.address) as channel,
    ):
        yield memory_service_pb2_grpc.MemoryServiceStub(channel)


async def test_the_setting_off_writes_translations(stub_translations_off: Stub) -> None:
    await add(stub_translations_off, EN)
    again = await add(stub_translations_off, ZH)
    assert again.outcome == s.ADD_OUTCOME_CREATED
    assert again.gate_reason == ""
    assert await count(stub_translations_off) == 2


_THINGS = ["代码注释", "提交信息", "接口文档", "错误提示", "测试用例", "变更日志"]


async def test_a_translation_is_found_among_many_memories_in_the_other_language(stub: Stub) -> None:
    """In a collection where hundreds of Chinese memories are nearer to the Chinese translation than
    its English original, the gate's own query in the other script still finds the original."""
    first = await add(stub, EN)
    # each about its own project (a number: different facts, all kept)
    distractors = [f"{n}号项目的团队喜欢简洁的{t}。" for n in range(1, 41) for t in _THINGS]
    for i in range(0, len(distractors), 64):
        batch = [s.NewMemory(content=c) for c in distractors[i : i + 64]]
        await stub.AddMemories(s.AddMemoriesRequest(memories=batch))
    assert await count(stub) >= 200
    again = await add(stub, ZH)
    assert again.outcome == s.ADD_OUTCOME_DUPLICATE
    assert again.memory.id == first.memory.id
    assert again.gate_reason == "translation"
    # and the other way round: an English translation of a Chinese memory among English ones
    zh_first = await add(stub, "用户会说法语。")
    english = [
        f"{n} can speak {lang}." for n in ("Anna", "Ben", "Chloe", "Dev") for lang in ("Spanish", "German")
    ]
    await stub.AddMemories(s.AddMemoriesRequest(memories=[s.NewMemory(content=c) for c in english]))
    en_again = await add(stub, "The user can speak French.")
    assert en_again.outcome == s.ADD_OUTCOME_DUPLICATE
    assert en_again.memory.id == zh_first.memory.id


async def test_a_translation_with_a_word_the_dictionary_lacks_is_a_duplicate(stub: Stub) -> None:
    """负责管理 and 长时间 are jieba words CC-CEDICT lacks: each is glossed by its pieces (before, each
    piece had to align on its own and the translation was written as a new memory)."""
    first = await add(stub, "Li Na manages the test team.")
    again = await add(stub, "李娜负责管理测试团队。")
    assert again.outcome == s.ADD_OUTCOME_DUPLICATE
    assert again.memory.id == first.memory.id
    assert again.gate_reason == "translation"
    other = await add(stub, "李娜负责管理设计团队。")  # the design team, not the test team
    assert other.outcome == s.ADD_OUTCOME_CREATED
    await add(stub, "用户喜欢长时间的散步。")
    walks = await add(stub, "The user likes long walks.")
    assert walks.outcome == s.ADD_OUTCOME_DUPLICATE
    assert walks.gate_reason == "translation"


async def test_a_translation_through_wordnet_or_an_article_is_a_duplicate(stub: Stub) -> None:
    """The word "bakery" is no CC-CEDICT gloss of 面包店 (bread + shop): WordNet's hypernym of "bakery" is
    "shop". 一本 is the English "a". Before, both translations were written as new memories; the
    changed ones still are."""
    first = await add(stub, "面包店七点开门。")
    again = await add(stub, "The bakery opens at seven.")
    assert again.outcome == s.ADD_OUTCOME_DUPLICATE
    assert again.memory.id == first.memory.id
    assert again.gate_reason == "translation"
    closes = await add(stub, "The bakery closes at seven.")  # open vs close
    assert closes.outcome == s.ADD_OUTCOME_CREATED
    book = await add(stub, "Wang Fang bought a book.")
    zh_book = await add(stub, "王芳买了一本书。")
    assert zh_book.outcome == s.ADD_OUTCOME_DUPLICATE
    assert zh_book.memory.id == book.memory.id
    assert zh_book.gate_reason == "translation"
    two = await add(stub, "王芳买了两本书。")  # two books, not a book
    assert two.outcome == s.ADD_OUTCOME_CREATED
    assert await count(stub) == 4
