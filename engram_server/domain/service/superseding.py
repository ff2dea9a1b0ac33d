"""Contradictions on write: which stored memories a new one contradicts, and whether each is
superseded (the rules are :mod:`engram_server.domain.contradictions`; the LLM judge is optional)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from engram_server.domain.contradictions import (
    JUDGE_SCHEMA,
    JUDGE_SYSTEM_PROMPT,
    Basis,
    ContradictionMode,
    judge,
    judge_prompt,
    parse_judgement,
)
from engram_server.domain.errors import LlmInvalidOutput, LlmUnavailable
from engram_server.domain.model import PROTECTED_TYPES, MemoryRecord
from engram_server.domain.service.commands import AddCommand, Contradiction, Similar
from engram_server.domain.service.core import ServiceCore
from engram_server.domain.specifics import Conflict, conflicts

log = logging.getLogger(__name__)

#: Most undecided pairs one add sends to the LLM judge.
MAX_JUDGED = 5


class Superseding(ServiceCore):
    """Finds the contradictions of a new memory (used by the write gate)."""

    async def _contradictions(
        self, cmd: AddCommand, record: MemoryRecord, similar: Sequence[Similar]
    ) -> tuple[Contradiction, ...]:
        """The memories among ``similar`` (the gate's candidates, most similar first) that the new
        ``record`` contradicts, each marked superseded or not by the mode and the protections."""
        pol = self.policy.contradictions
        mode = cmd.contradictions or pol.mode
        if mode is ContradictionMode.OFF:
            return ()
        decided: list[tuple[Similar, tuple[Conflict, ...], Basis, str]] = []
        undecided: list[tuple[Similar, tuple[Conflict, ...]]] = []
        for s in similar:
            if s.similarity < pol.cue_threshold:
                break
            if s.record.draft or s.record.superseded_by is not None or s.record.id == record.id:
                continue
            found = s.conflicts or tuple(conflicts(s.record.content, record.content))
            verdict = judge(s.record.content, record.content, s.similarity, found, pol)
            if verdict.contradiction:
                assert verdict.basis is not None
                decided.append((s, found, verdict.basis, verdict.explanation))
            elif verdict.contradiction is None:
                undecided.append((s, found))
        if undecided and self.contradiction_llm is not None:
            decided.extend(await self._llm_judge(record.content, undecided[:MAX_JUDGED]))
        out: list[Contradiction] = []
        for s, found, basis, why in decided:
            explanation = why
            superseded = mode is ContradictionMode.SUPERSEDE
            old = s.record
            if superseded and pol.protect_types and old.type in PROTECTED_TYPES and record.type != old.type:
                superseded = False
                explanation += (
                    f"; not superseded: a {old.type.value} memory is superseded only by a {old.type.value}"
                )
            elif superseded and record.created_at < old.created_at:
                superseded = False
                explanation += "; not superseded: the new memory is older than the stored one"
            out.append(Contradiction(old, s.similarity, basis, found, explanation, superseded))
        return tuple(out)

    async def _llm_judge(
        self, content: str, pairs: Sequence[tuple[Similar, tuple[Conflict, ...]]]
    ) -> list[tuple[Similar, tuple[Conflict, ...], Basis, str]]:
        """The pairs the LLM calls contradictions; none when it fails (the rules' answer stands)."""
        llm = self.contradiction_llm
        assert llm is not None
        try:
            result = await llm.complete_json(
                system=JUDGE_SYSTEM_PROMPT,
                user=judge_prompt(content, [s.record.content for s, _ in pairs]),
                schema=JUDGE_SCHEMA,
                schema_name="contradictions",
            )
        except (LlmUnavailable, LlmInvalidOutput) as exc:
            log.warning("contradiction judge unavailable, rules only: %s", exc)
            return []
        verdicts = parse_judgement(result.data, len(pairs))
        out: list[tuple[Similar, tuple[Conflict, ...], Basis, str]] = []
        for i, (s, found) in enumerate(pairs):
            contradicts, explanation = verdicts.get(i, (False, ""))
            if contradicts:
                out.append((s, found, Basis.LLM, explanation or f"{llm.model} judged it a contradiction"))
        return out
