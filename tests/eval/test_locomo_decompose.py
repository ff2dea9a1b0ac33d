"""The sub-queries eval.locomo_decompose tries: parts of a question about several things, and the
statement form of a question."""

from __future__ import annotations

from eval.locomo_decompose import parts, statement_form, wordnet_terms


def test_two_names_joined_by_and_are_asked_apart() -> None:
    assert parts("What subject have Caroline and Melanie both painted?") == [
        "What subject have Caroline painted",
        "What subject have Melanie painted",
    ]


def test_a_name_and_a_possessive_phrase_are_asked_apart() -> None:
    assert parts("What types of pottery have Melanie and her kids made?") == [
        "What types of pottery have Melanie made",
        "What types of pottery have her kids made",
    ]


def test_a_list_is_asked_once_per_item() -> None:
    assert parts("When did Caroline meet up with her friends, family, and mentors?") == [
        "When did Caroline meet up with her friends",
        "When did Caroline meet up with family",
        "When did Caroline meet up with mentors",
    ]


def test_clauses_keep_the_opening_of_the_question() -> None:
    assert parts("When did Caroline encounter people on a hike and have a negative experience?") == [
        "When did Caroline encounter people on a hike",
        "When did Caroline have a negative experience",
    ]


def test_a_question_about_one_thing_has_no_parts() -> None:
    assert parts("What does Tim do to escape reality?") == []
    assert parts("When did Melanie paint a sunrise?") == []


def test_statement_form_drops_question_words_and_auxiliaries() -> None:
    assert statement_form("What does Tim do to escape reality?") == "Tim to escape reality"
    assert statement_form("Tim escape reality") is None  # nothing to drop


def test_wordnet_terms_leave_names_and_the_questions_own_terms_out() -> None:
    terms = wordnet_terms("What did Caroline research?")
    assert "carolean" not in terms  # a name is not expanded
    assert "research" not in terms
    assert terms == [] or "investig" in terms  # "investigate" when WordNet is installed
