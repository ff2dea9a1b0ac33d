"""The write gate's answer to a replayed request (pure).

A request whose ``request_id`` was used before is answered with the memory it created, without
running the gate again (the collection may have changed since). The stored memory keeps the near
duplicates the gate saw, with their similarities; the reasons the gate gave (``conflicting_specifics``
with the values, ``allow_duplicate``, ``same_words``, ``same_meaning``) are derived from them and
from the texts by the same rules, so a replay answers what the first call answered: the reasons
are a function of the two texts, the similarity and the thresholds, all of which are known again
here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from engram_server.domain.crosslingual import meaning_conflicts, same_meaning, translation_pair
from engram_server.domain.service.commands import GateReason, Policy, Similar
from engram_server.domain.specifics import conflicts, same_words

__all__ = ["replayed_gate"]


def replayed_gate(
    content: str, near: Sequence[Similar], policy: Policy, *, allow_duplicate: bool
) -> tuple[tuple[Similar, ...], GateReason]:
    """The near duplicates of a CREATED memory with the reasons the gate gave them, and the
    response's reason (see ``Writing._gate`` and ``Writing._add_items``: the same rules, in order)."""
    out = sorted(near, key=lambda s: s.similarity, reverse=True)
    top: int | None = None
    check = policy.check_specifics
    for i, s in enumerate(out):
        if s.similarity <= policy.dedup_threshold:
            break
        found = tuple(conflicts(s.record.content, content)) if check and s.similarity < 1.0 else ()
        if check and s.similarity < 1.0 and not found and policy.gate_translations:
            found = meaning_conflicts(s.record.content, content)
        if found:
            out[i] = replace(s, reason=GateReason.CONFLICTING_SPECIFICS, conflicts=found)
            continue
        if allow_duplicate:
            out[i] = replace(s, reason=GateReason.ALLOW_DUPLICATE)
            top = i
        break
    if top is None and allow_duplicate and check:
        for i, s in enumerate(out):
            if s.similarity < policy.restatement_threshold:
                break
            if s.reason:
                continue
            if same_words(s.record.content, content) and not conflicts(s.record.content, content):
                out[i] = replace(s, reason=GateReason.ALLOW_DUPLICATE)
                top = i
                break
    if top is None and allow_duplicate and check and policy.gate_translations and policy.gate_same_meaning:
        for i, s in enumerate(out):
            if s.similarity < policy.meaning_threshold:
                break
            old = s.record.content
            if not s.reason and same_meaning(old, content) and not conflicts(old, content):
                out[i] = replace(s, reason=GateReason.ALLOW_DUPLICATE)
                top = i
                break
    if top is None and allow_duplicate and policy.gate_translations:
        for i, s in enumerate(out):
            if s.similarity < policy.translation_floor:
                break
            if not s.reason and translation_pair(s.record.content, content):
                out[i] = replace(s, reason=GateReason.ALLOW_DUPLICATE)
                top = i
                break
    for i, s in enumerate(out):
        if s.similarity < policy.near_duplicate_threshold:
            break
        if s.reason or i == top or s.similarity > policy.dedup_threshold or not check:
            continue
        found = tuple(conflicts(s.record.content, content))
        if found:
            out[i] = replace(s, reason=GateReason.CONFLICTING_SPECIFICS, conflicts=found)
    if top is not None:
        reason = GateReason.ALLOW_DUPLICATE
    elif out and out[0].similarity > policy.dedup_threshold:
        reason = GateReason.CONFLICTING_SPECIFICS
    else:
        reason = GateReason.NONE
    return tuple(out), reason
