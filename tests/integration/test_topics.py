"""ListTopics / GetTopic end to end: a live server (embedded store, the real local model, a manual
clock) over a real gRPC channel. The topic index is built on the first read and kept current as
memories are added, updated, deleted and expire; ids survive a restart."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import grpc

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.domain.clock import ManualClock
from engram_server.testing import running_server
from tests.support.rpc import add, fails, ts

Stub = memory_service_pb2_grpc.MemoryServiceStub

SUBJECTS: dict[str, list[str]] = {
    "kubernetes": [
        "Production runs on a Kubernetes cluster with three node pools in eu-west-1.",
        "Deployments go through Argo CD; never kubectl apply directly to the prod namespace.",
        "Pods of the payments service were OOMKilled; the memory limit was raised to 1Gi.",
        "The HorizontalPodAutoscaler scales the API deployment between 3 and 12 replicas.",
        "部署失败时先看 kubectl describe pod 的事件，再看容器日志。",
        "集群的节点池使用 spot 实例，关键服务要设置 PodDisruptionBudget。",
    ],
    "cooking": [
        "The user bakes sourdough every Sunday and keeps the starter in the fridge.",
        "Favourite dinner is a Thai green curry with extra basil.",
        "The pizza dough uses 65% hydration and a 48-hour cold ferment.",
        "She is cooking more vegetarian meals: lentil dal and chickpea stew.",
        "用户周末喜欢做红烧肉，冰糖要多放一点。",
        "用户做饺子时喜欢韭菜猪肉馅，面皮自己擀。",
    ],
    "guitar": [
        "The user is learning classical guitar and practises scales for 30 minutes a day.",
        "Her guitar teacher assigned Romanza and Lágrima by Tárrega this month.",
        "Barre chords still buzz on the second fret; press closer to the fret wire.",
        "She changed to D'Addario normal tension nylon strings on her guitar.",
        "用户每天晚上练吉他半小时，主要练指弹。",
        "吉他课每周四下午在音乐学校上。",
    ],
}


async def seed(stub: Stub, collection: str = "") -> dict[str, str]:
    """Add every subject's memories; returns memory id -> subject."""
    items = [(subject, text) for subject, texts in SUBJECTS.items() for text in texts]
    resp = await stub.AddMemories(
        s.AddMemoriesRequest(collection=collection, memories=[s.NewMemory(content=t) for _, t in items])
    )
    assert all(r.outcome == s.ADD_OUTCOME_CREATED for r in resp.results)
    return {r.memory.id: subject for r, (subject, _) in zip(resp.results, items, strict=True)}


async def leaves(stub: Stub, collection: str = "") -> dict[str, s.Topic]:
    """Every leaf topic, by id (top-level leaves and the sub-topics of top-level parents)."""
    out: dict[str, s.Topic] = {}
    token = ""
    while True:
        page = await stub.ListTopics(
            s.ListTopicsRequest(collection=collection, page_token=token, page_size=5)
        )
        for t in page.topics:
            if t.level == 1:
                out[t.id] = t
            for c in t.children:
                assert c.level == 1 and c.parent_id == t.id
                out[c.id] = c
        token = page.next_page_token
        if not token:
            return out


async def members(stub: Stub, topic_id: str, collection: str = "") -> list[s.GetTopicResponse]:
    pages = []
    token = ""
    while True:
        page = await stub.GetTopic(
            s.GetTopicRequest(collection=collection, id=topic_id, page_size=3, page_token=token)
        )
        pages.append(page)
        token = page.next_page_token
        if not token:
            return pages


async def membership(stub: Stub, collection: str = "") -> dict[str, str]:
    """memory id -> leaf topic id, read through GetTopic."""
    out: dict[str, str] = {}
    for tid in await leaves(stub, collection):
        for page in await members(stub, tid, collection):
            for mem in page.memories:
                assert mem.id not in out, "a memory in two leaf topics"
                out[mem.id] = tid
    return out


def purity(assign: dict[str, str], labels: dict[str, str]) -> float:
    by: dict[str, Counter[str]] = {}
    for mid, tid in assign.items():
        by.setdefault(tid, Counter())[labels[mid]] += 1
    return sum(c.most_common(1)[0][1] for c in by.values()) / len(assign)


async def test_topics_cover_every_memory_once_and_group_subjects(stub: Stub) -> None:
    labels = await seed(stub)
    page = await stub.ListTopics(s.ListTopicsRequest())
    assert page.memory_count == len(labels)
    assert sum(t.size for t in page.topics) == len(labels)
    sizes = [t.size for t in page.topics]
    assert sizes == sorted(sizes, reverse=True)
    for t in page.topics:
        assert t.id.startswith("t") and len(t.id) == 11
        assert t.name and t.named_by == "terms" and t.terms
        if t.children:
            assert t.level == 2 and sum(c.size for c in t.children) == t.size
    assign = await membership(stub)
    assert set(assign) == set(labels)  # every memory in exactly one leaf
    # The subjects (each written in English and Chinese) are told apart.
    assert purity(assign, labels) >= 0.8
    # Top level: a top topic's memories are mostly of one subject.
    top_of = {}
    for t in page.topics:
        for leaf in [t, *t.children]:
            top_of[leaf.id] = t.id
    assert purity({m: top_of[tid] for m, tid in assign.items()}, labels) >= 0.8


async def test_get_topic_pages_its_memories_most_central_first(stub: Stub) -> None:
    await seed(stub)
    biggest = max((await leaves(stub)).values(), key=lambda t: t.size)
    pages = await members(stub, biggest.id)
    assert all(len(p.memories) <= 3 for p in pages)
    ids = [mem.id for p in pages for mem in p.memories]
    assert len(ids) == len(set(ids)) == biggest.size
    assert pages[0].topic.id == biggest.id and pages[0].topic.size == biggest.size
    # A parent's memories are those of its sub-topics.
    top = await stub.ListTopics(s.ListTopicsRequest())
    for parent in (t for t in top.topics if t.children):
        got = {mem.id for p in await members(stub, parent.id) for mem in p.memories}
        want = {mem.id for c in parent.children for p in await members(stub, c.id) for mem in p.memories}
        assert got == want and len(got) == parent.size
        sub = await stub.ListTopics(s.ListTopicsRequest(parent_id=parent.id))
        assert {t.id for t in sub.topics} == {c.id for c in parent.children}


async def subject_of_topic(stub: Stub, labels: dict[str, str], memory_id: str) -> str:
    """The majority subject among the other memories of the top-level topic holding ``memory_id``."""
    assign = await membership(stub)
    top_of: dict[str, str] = {}
    for t in (await stub.ListTopics(s.ListTopicsRequest())).topics:
        for leaf in [t, *t.children]:
            top_of[leaf.id] = t.id
    mine = top_of[assign[memory_id]]
    votes = Counter(labels[m] for m, tid in assign.items() if top_of[tid] == mine and m in labels)
    return votes.most_common(1)[0][0] if votes else ""


async def test_index_follows_adds_updates_deletes_and_expiry(stub: Stub, clock: ManualClock) -> None:
    labels = await seed(stub)
    before = await membership(stub)
    # add: the new memory joins its subject's topics; nobody else moves
    new = await add(stub, "She practises arpeggios on the guitar with a metronome at 60 bpm.")
    after = await membership(stub)
    assert await subject_of_topic(stub, labels, new.memory.id) == "guitar"
    assert {m: t for m, t in after.items() if m != new.memory.id} == before
    # update: the memory moves with its content
    await stub.UpdateMemory(
        s.UpdateMemoryRequest(
            id=new.memory.id, content="Slow-cook the beef stew with red wine for four hours."
        )
    )
    assert await subject_of_topic(stub, labels, new.memory.id) == "cooking"
    # delete: gone from the index
    await stub.DeleteMemory(s.DeleteMemoryRequest(id=new.memory.id))
    assert new.memory.id not in await membership(stub)
    assert (await stub.ListTopics(s.ListTopicsRequest())).memory_count == len(labels)
    # expiry: a memory whose valid_until passes leaves the index without any write
    short = await add(
        stub, "Guitar lesson moved to Friday this week only.", valid_until=ts(clock.now() + 3600)
    )
    assert short.memory.id in await membership(stub)
    clock.advance(7200)
    assert short.memory.id not in await membership(stub)
    assert (await stub.ListTopics(s.ListTopicsRequest())).memory_count == len(labels)


async def test_topic_ids_survive_a_restart(tmp_path: Path) -> None:
    """A clean stop persists the index with every write applied (even writes no read has seen):
    the next start restores the same topics and membership, not a re-clustering of them."""
    clock = ManualClock()
    runs = []
    late = [
        "He tunes the guitar down to drop D for this song.",
        "Add a pinch of smoked paprika to the chickpea stew.",
        "The ingress controller was upgraded to version 1.11 last night.",
    ]
    for step in range(3):
        async with (
            running_server(tmp_path / "data", clock=clock) as srv,
            grpc.aio.insecure_channel(srv.address) as ch,
        ):
            stub = Stub(ch)
            if step == 0:
                await seed(stub, "notes")
            if step > 0:  # what the previous run stopped with, before any write of this run
                top = await stub.ListTopics(s.ListTopicsRequest(collection="notes"))
                runs.append((await membership(stub, "notes"), [t.id for t in top.topics]))
            if step < 2:
                await stub.ListTopics(s.ListTopicsRequest(collection="notes"))
                # written after the last read: the index learns of it only at the stop
                await add(stub, late[step], collection="notes")
                if step == 1:
                    top = await stub.ListTopics(s.ListTopicsRequest(collection="notes"))
                    expected = (await membership(stub, "notes"), [t.id for t in top.topics])
    assert runs[1] == expected
    assert len(runs[0][0]) == len(labels_of_seed()) + 1
    assert {m: t for m, t in runs[1][0].items() if m in runs[0][0]} == runs[0][0]  # nobody moved


def labels_of_seed() -> list[str]:
    return [t for texts in SUBJECTS.values() for t in texts]


async def test_bad_requests(stub: Stub) -> None:
    await seed(stub)
    await fails(
        stub.GetTopic(s.GetTopicRequest(id="t0000000000")),
        grpc.StatusCode.NOT_FOUND,
        "ERROR_REASON_TOPIC_NOT_FOUND",
    )
    await fails(
        stub.ListTopics(s.ListTopicsRequest(parent_id="t0000000000")),
        grpc.StatusCode.NOT_FOUND,
        "ERROR_REASON_TOPIC_NOT_FOUND",
    )
    for bad in (
        s.GetTopicRequest(),
        s.GetTopicRequest(id="../etc"),
        s.GetTopicRequest(id="t1", page_size=-1),
    ):
        await fails(stub.GetTopic(bad), grpc.StatusCode.INVALID_ARGUMENT, "ERROR_REASON_INVALID_ARGUMENT")
    some = next(iter(await leaves(stub)))
    for bad_list in (
        s.ListTopicsRequest(page_size=201),
        s.ListTopicsRequest(page_token="not-a-token"),
        s.ListTopicsRequest(collection="Bad Name!"),
    ):
        await fails(
            stub.ListTopics(bad_list), grpc.StatusCode.INVALID_ARGUMENT, "ERROR_REASON_INVALID_ARGUMENT"
        )
    # a page token of one topic's listing is no token of another's
    first = await stub.GetTopic(s.GetTopicRequest(id=some, page_size=1))
    if first.next_page_token:
        other = next(t for t in await leaves(stub) if t != some)
        await fails(
            stub.GetTopic(s.GetTopicRequest(id=other, page_token=first.next_page_token)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "ERROR_REASON_INVALID_ARGUMENT",
        )
    await fails(
        stub.ListTopics(s.ListTopicsRequest(collection="nowhere")),
        grpc.StatusCode.NOT_FOUND,
        "ERROR_REASON_COLLECTION_NOT_FOUND",
    )


async def test_empty_default_collection_has_no_topics(stub: Stub) -> None:
    page = await stub.ListTopics(s.ListTopicsRequest())
    assert (list(page.topics), page.memory_count, page.next_page_token) == ([], 0, "")


async def test_a_trashed_collection_has_no_topics_to_read(stub: Stub) -> None:
    await seed(stub, "scratch")
    assert (await stub.ListTopics(s.ListTopicsRequest(collection="scratch"))).memory_count == 18
    await stub.DeleteCollection(s.DeleteCollectionRequest(name="scratch"))
    await fails(
        stub.ListTopics(s.ListTopicsRequest(collection="scratch")),
        grpc.StatusCode.FAILED_PRECONDITION,
        "ERROR_REASON_COLLECTION_IN_TRASH",
    )


async def test_context_pack_lists_the_top_level_topics(stub: Stub) -> None:
    labels = await seed(stub)
    pack = await stub.GetContext(s.GetContextRequest(token_budget=2000))
    (topics,) = [x for x in pack.sections if x.kind == s.CONTEXT_SECTION_KIND_TOPICS]
    top = (await stub.ListTopics(s.ListTopicsRequest())).topics
    # The pack's topics are the index's top level, in its order (largest first), as far as they fit.
    assert topics.items
    assert [(i.topic.id, i.topic.name, i.topic.size) for i in topics.items] == [
        (t.id, t.name, t.size) for t in top[: len(topics.items)]
    ]
    for item in topics.items:
        assert item.topic.id in pack.markdown and item.text in pack.markdown
    # Drilling into the pack's first topic returns its memories.
    first = topics.items[0].topic
    got = await stub.GetTopic(s.GetTopicRequest(id=first.id, page_size=100))
    assert len(got.memories) == first.size and all(m.id in labels for m in got.memories)
    # A small budget keeps fewer topics, never more than fit.
    small = await stub.GetContext(s.GetContextRequest(token_budget=60))
    assert small.tokens_used <= 60


async def test_a_pack_over_collections_names_each_topics_collection(stub: Stub) -> None:
    await seed(stub, "home")
    await seed(stub, "work")
    pack = await stub.GetContext(s.GetContextRequest(collections=["home", "work"], token_budget=4000))
    (topics,) = [x for x in pack.sections if x.kind == s.CONTEXT_SECTION_KIND_TOPICS]
    assert {i.topic.collection for i in topics.items} == {"home", "work"}
    assert [t.collection for t in pack.topics] == [i.topic.collection for i in topics.items]
    for item in topics.items:  # the Markdown says where each topic lives, and GetTopic finds it there
        assert f"collection `{item.topic.collection}`" in item.text and item.text in pack.markdown
        got = await stub.GetTopic(s.GetTopicRequest(collection=item.topic.collection, id=item.topic.id))
        assert got.topic.collection == item.topic.collection and got.topic.id == item.topic.id
    listed = await stub.ListTopics(s.ListTopicsRequest(collection="work"))
    assert all(
        t.collection == "work" and all(c.collection == "work" for c in t.children) for t in listed.topics
    )
    # One collection: the Markdown does not repeat it, the field still carries it.
    one = await stub.GetContext(s.GetContextRequest(collections=["home"], token_budget=4000))
    assert one.topics and all(t.collection == "home" for t in one.topics)
    assert "collection `" not in one.markdown
