"""Who did what to whom, read through the passive voice and the "of" genitive: "The invoice was
approved by Maria." restates "Maria approved the invoice." and "Tom was hired by Anna." is not
"Tom hired Anna."; "the lead of the team" is "the team's lead". The sentences are our own, none
from eval/pairs."""

from __future__ import annotations

import pytest

from engram_server.domain.crosslingual import meaning_conflicts, same_meaning
from engram_server.domain.specifics import active_voice, conflicts, possessor_first, same_words, swapped_roles


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The refund was approved by Lucia.", "Lucia approved the refund."),
        ("The lease was signed by Omar on Friday.", "Omar signed the lease on Friday."),
        ("The new hire was trained by the senior engineer.", "The senior engineer trained the new hire."),
        ("Priya was interviewed by Daniel in Lisbon.", "Daniel interviewed Priya in Lisbon."),
        (
            "The outage was quickly resolved by the on-call team.",
            "The on-call team quickly resolved the outage.",
        ),
        ("王芳被刘强邀请了。", "刘强邀请了王芳。"),
        ("客户被销售经理说服了。", "销售经理说服了客户。"),
        ("这次迁移由赵磊负责。", "赵磊负责这次迁移。"),
        # the "of" genitive and the 's genitive
        ("The owner of the bakery is Hugo.", "The bakery's owner is Hugo."),
        ("The brother of Lucia is Omar.", "Lucia's brother is Omar."),
        ("The coach of the swim team is the father of Nina.", "The swim team's coach is Nina's father."),
        # a Chinese passive without an agent names no role: compared as written
        ("周五的项目会议被取消了。", "项目会议周五取消了。"),
        ("仓库里的旧电脑被清理了。", "旧电脑在仓库里清理了。"),
    ],
)
def test_passive_and_active_or_either_genitive_restate(a: str, b: str) -> None:
    assert same_words(a, b) and same_words(b, a)
    assert not conflicts(a, b) and not conflicts(b, a)
    assert not swapped_roles(a, b) and not meaning_conflicts(a, b)
    assert same_meaning(a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Priya was interviewed by Daniel.", "Priya interviewed Daniel."),
        ("The new hire was trained by the senior engineer.", "The new hire trained the senior engineer."),
        ("The tenant was warned by the landlord.", "The tenant warned the landlord."),
        ("王芳被刘强邀请了。", "王芳邀请了刘强。"),
        ("客户被销售经理说服了。", "客户说服了销售经理。"),
        ("The mother of the bride is the teacher.", "The teacher's mother is the bride."),
        ("The brother of Lucia is Omar.", "Omar's brother is Lucia."),
        (
            "The owner of the bakery is the landlord of the flat.",
            "The flat's owner is the bakery's landlord.",
        ),
    ],
)
def test_the_same_words_in_swapped_roles_are_another_fact(a: str, b: str) -> None:
    assert not same_words(a, b) and not same_words(b, a)
    assert not same_meaning(a, b)
    kinds = {c.kind for c in conflicts(a, b)} | {c.kind for c in meaning_conflicts(a, b)}
    assert "order" in kinds


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The refund was approved by Lucia.", "Lucia rejected the refund."),  # another act
        ("The refund was approved by Lucia.", "Omar approved the refund."),  # another person
        ("The owner of the bakery is Hugo.", "The bakery's owner is Lena."),
    ],
)
def test_another_act_or_person_under_the_same_construction_is_kept_apart(a: str, b: str) -> None:
    assert not same_words(a, b) and not same_words(b, a)
    assert conflicts(a, b) or meaning_conflicts(a, b)


def test_what_the_active_voice_and_the_genitive_read() -> None:
    assert (
        active_voice("The refund was approved by Lucia on Monday.") == "Lucia approved The refund on Monday."
    )
    assert active_voice("王芳被刘强邀请了") == "刘强邀请了王芳"
    # no agent: a time or a means after "by", or no passive at all
    assert active_voice("The report was finished by Friday.") is None
    assert active_voice("The invoice was sent by email.") is None
    assert active_voice("Lucia stood by the window.") is None
    assert active_voice("周五的项目会议被取消了。") is None  # no agent after 被
    assert possessor_first("The lead of the team is Ana.") == "The team's lead is Ana."
    assert possessor_first("The user drinks a cup of tea.") == "The user drinks a cup of tea."
