"""The write gate's decision (pure): which near memory a new text duplicates, and why the others
are not duplicates.

One function, :func:`decide`, holds the gate's ordered rules. The live gate
(``Writing._gate``) calls it with the calibrated candidates it found; a replayed request
(:func:`replayed_gate`) calls it with the near duplicates its memory kept, so a replay answers
what the first call answered: the reasons are a function of the two texts, the similarity and the
thresholds, all of which are known again.

The rules, in order, over the candidates most similar first:

1. Above the duplicate threshold: the most similar candidate whose specifics agree
   (:func:`~engram_server.domain.specifics.conflicts`: numbers, dates, ids, names, negation,
   term, action, antonym, order) and, with translations gated, whose meaning does not conflict
   (:func:`~engram_server.domain.crosslingual.meaning_conflicts`) is the duplicate. Those that
   conflict are labelled ``CONFLICTING_SPECIFICS`` with the conflicts. An exact copy (similarity
   1.0) is a duplicate whatever its words.
2. Else, at the restatement level: the same content words (or the same words with synonyms in
   place, or "X's car is …" / "X drives …", or "gave the report a review" / "reviewed the
   report") and the same specifics
   (:func:`~engram_server.domain.specifics.same_words`): ``SAME_WORDS``.
3. Else, with ``gate_same_meaning`` on, at the meaning level: other words of the same meaning in
   the same language (:func:`~engram_server.domain.crosslingual.same_meaning`): ``SAME_MEANING``.
4. Else, with translations gated, above the translation floor: a dictionary-aligned translation
   (:func:`~engram_server.domain.crosslingual.translation_pair`): ``TRANSLATION``.
5. Candidates in the near-duplicate zone that are not the duplicate and whose specifics differ
   are labelled ``CONFLICTING_SPECIFICS``, so the caller can tell "the same fact, changed" from
   "the same fact, reworded".

With ``allow_duplicate`` the duplicate is labelled ``ALLOW_DUPLICATE`` instead (the memory is
written anyway).

Optionally (``ENGRAM_GATE_LLM``), the candidates the rules leave undecided — no duplicate found,
at or above the restatement level (or, with translations gated, in the other script above the
translation floor), with no conflicting specifics or meanings — go to an LLM in one call
(:func:`undecided`, :data:`JUDGE_SYSTEM_PROMPT`, :data:`JUDGE_SCHEMA`, :func:`judge_prompt`,
:func:`parse_restatement`): the one it says the new text restates is the duplicate,
``JUDGED_SAME``. The rules' guarantee holds: a pair whose specifics conflict is never sent, so
never refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from engram_server.domain.crosslingual import meaning_conflicts, same_meaning, translation_pair
from engram_server.domain.service.commands import GateReason, Policy, Similar
from engram_server.domain.specifics import Conflict, conflicts, same_words
from engram_server.domain.text import script_of

__all__ = [
    "JUDGE_SCHEMA",
    "JUDGE_SYSTEM_PROMPT",
    "MAX_JUDGED",
    "GateDecision",
    "decide",
    "judge_prompt",
    "parse_restatement",
    "replayed_gate",
    "undecided",
]


@dataclass(frozen=True, slots=True)
class GateDecision:
    #: The candidates, most similar first, with the reasons the gate gave them.
    near: tuple[Similar, ...]
    #: The candidate the new text duplicates (an element of ``near``), or None.
    duplicate: Similar | None
    #: The response's reason: the duplicate's reason; without one, ``CONFLICTING_SPECIFICS`` when
    #: the most similar candidate is above the duplicate threshold (yet a different fact), else NONE.
    reason: GateReason


def decide(
    content: str,
    near: Sequence[Similar],
    policy: Policy,
    *,
    allow_duplicate: bool,
    refusing: bool = True,
) -> GateDecision:
    """The gate's decision for ``content`` against ``near`` (any order; sorted here, most similar
    first, stable for ties).

    ``refusing=False`` is for the replay of a memory that was written without
    ``allow_duplicate``: the first call found no duplicate, so only the conflicts are labelled
    (even if the thresholds changed since and a rule would now find one)."""
    out = sorted(near, key=lambda s: s.similarity, reverse=True)
    check = policy.check_specifics
    look = allow_duplicate or refusing
    dup_reason = GateReason.ALLOW_DUPLICATE if allow_duplicate else None
    top: int | None = None
    for i, s in enumerate(out):
        if s.similarity <= policy.dedup_threshold:
            break
        found: tuple[Conflict, ...] = ()
        if check and s.similarity < 1.0:
            found = tuple(conflicts(s.record.content, content))
            if not found and policy.gate_translations:  # opposite words, swapped roles
                found = meaning_conflicts(s.record.content, content)
        if found:
            out[i] = replace(s, reason=GateReason.CONFLICTING_SPECIFICS, conflicts=found)
            continue
        if look:
            out[i] = replace(s, reason=dup_reason or s.reason)
            top = i
        break

    def first(floor: float, reason: GateReason, same: Callable[[str], bool]) -> int | None:
        for i, s in enumerate(out):
            if s.similarity < floor:
                break
            if not s.reason and same(s.record.content):
                out[i] = replace(s, reason=dup_reason or reason)
                return i
        return None

    if top is None and look and check:
        # Reworded, not changed: the same content words and specifics, which the embedding may
        # place just under the threshold.
        top = first(
            policy.restatement_threshold,
            GateReason.SAME_WORDS,
            lambda old: same_words(old, content) and not conflicts(old, content),
        )
    if top is None and look and check and policy.gate_translations and policy.gate_same_meaning:
        # Other words of the same meaning, same language, none opposed, the same specifics and roles.
        top = first(
            policy.meaning_threshold,
            GateReason.SAME_MEANING,
            lambda old: same_meaning(old, content) and not conflicts(old, content),
        )
    if top is None and look and policy.gate_translations:
        # A translation (zh↔en): the embedding places it anywhere in 0.35–0.75, as close as a
        # translation with one word changed, so the dictionary alignment decides.
        top = first(
            policy.translation_floor, GateReason.TRANSLATION, lambda old: translation_pair(old, content)
        )
    if check:
        for i, s in enumerate(out):
            if s.similarity < policy.near_duplicate_threshold:
                break
            if s.reason or i == top or s.similarity > policy.dedup_threshold:
                continue
            found = tuple(conflicts(s.record.content, content))
            if found:
                out[i] = replace(s, reason=GateReason.CONFLICTING_SPECIFICS, conflicts=found)
    duplicate = out[top] if top is not None else None
    if duplicate is not None:
        reason = duplicate.reason
    elif out and out[0].similarity > policy.dedup_threshold:
        reason = GateReason.CONFLICTING_SPECIFICS  # above the threshold, yet a different fact
    else:
        reason = GateReason.NONE
    return GateDecision(tuple(out), duplicate, reason)


def replayed_gate(
    content: str, near: Sequence[Similar], policy: Policy, *, allow_duplicate: bool
) -> tuple[tuple[Similar, ...], GateReason]:
    """The near duplicates of a CREATED memory with the reasons the gate gave them, and the
    response's reason: :func:`decide` over the near duplicates the memory kept."""
    d = decide(content, near, policy, allow_duplicate=allow_duplicate, refusing=False)
    return d.near, d.reason


# ---------------------------------------------------------------------------------------------
# The optional LLM judge of restatements the rules leave undecided

#: Most candidates one add sends to the judge (the most similar undecided ones).
MAX_JUDGED = 3

JUDGE_SYSTEM_PROMPT = """\
You are the duplicate check of a long-term memory system. You receive one NEW memory and numbered \
STORED memories. Decide whether the new memory restates one of the stored memories: the same claim \
about the same people and things, possibly reworded or translated into another language, so that \
storing it would add nothing. It is NOT a restatement if it adds, drops or changes any detail \
(who, what, which thing, when, where, how much, how often) or negates it, or if it is only about \
the same topic. Answer with a JSON object only: the number of the stored memory it restates, or 0 \
for none."""

JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["restates"],
    "properties": {"restates": {"type": "integer"}},
}


def undecided(content: str, near: Sequence[Similar], policy: Policy) -> list[Similar]:
    """The candidates of a :func:`decide` without a duplicate that an LLM may judge, most similar
    first, at most :data:`MAX_JUDGED`: no reason given by the rules, below the duplicate threshold,
    and either at or above the restatement level (``restatement_threshold``: below it the calibrated
    scale says "the same topic", not "the same claim") or (translations gated) in the other script above the
    translation floor; with no conflicting specifics (:func:`conflicts`) nor, with translations
    gated, conflicting meanings (:func:`meaning_conflicts`). Empty for ``check_specifics`` off:
    without the specifics the judge could refuse a different fact."""
    if not policy.check_specifics:
        return []
    script = script_of(content)
    out: list[Similar] = []
    for s in sorted(near, key=lambda s: s.similarity, reverse=True):
        if s.reason or s.similarity > policy.dedup_threshold:
            continue
        other = script_of(s.record.content) != script
        translated = other and policy.gate_translations
        floor = policy.translation_floor if translated else policy.restatement_threshold
        if s.similarity < floor:
            continue
        if conflicts(s.record.content, content):
            continue
        if policy.gate_translations and meaning_conflicts(s.record.content, content):
            continue
        out.append(s)
        if len(out) == MAX_JUDGED:
            break
    return out


def judge_prompt(new: str, stored: Sequence[str]) -> str:
    lines = [f"NEW: {new}", "STORED:"]
    lines.extend(f"[{i}] {text}" for i, text in enumerate(stored, start=1))
    return "\n".join(lines)


def parse_restatement(data: dict[str, Any], count: int) -> int | None:
    """The 0-based index of the stored memory the LLM says the new one restates; None for "none"
    and for an answer out of range or malformed."""
    value = data.get("restates")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= count:
        return None
    return value - 1
