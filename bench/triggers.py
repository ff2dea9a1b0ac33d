"""How GetTriggers should match an action to trigger names: exact (with parents), prefix, semantic.

    .venv/bin/python bench/triggers.py

A small labelled set: 14 trigger names in use (some hierarchical: ``deploy/prod``) and 30 actions an
agent might ask about, each with the names whose lessons it should get (a parent's lessons apply
to its children; another action's never do, however close its name). For each rule, precision and
recall over all (action, name) pairs:

- ``exact+parents`` (what GetTriggers does): the normalised action and its ``/`` parents;
- ``prefix``: every name that starts with the normalised action, or that the action starts with;
- ``semantic@t``: names whose e5 embedding (real local model, ``query:`` for the action,
  ``passage:`` for the name with '-' and '/' as spaces) has cosine ≥ t to the action's.

Agents that ask with free text ("push my branch") are what a semantic rule would serve; the set
has such cases, so the figures show both what it gains there and what it costs elsewhere.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_server.adapters.embedding.local import LocalE5Embedder
from engram_server.domain.context import normalise_trigger, trigger_lineage

NAMES = ["deploy", "deploy/prod", "deploy/staging", "git-push", "git-push/force", "git-commit",
         "db-migration", "release", "rollback", "send-email", "delete-data", "rotate-keys", "pay-invoice",
         "destroy-cluster"]  # fmt: skip

# action -> the names whose lessons apply (the action's own name and its parents, when in use)
LABELS: dict[str, set[str]] = {
    "deploy": {"deploy"},
    "Deploy": {"deploy"},
    "deploy/prod": {"deploy", "deploy/prod"},
    "deploy/staging": {"deploy", "deploy/staging"},
    "deploy/prod/eu": {"deploy", "deploy/prod"},
    "git push": {"git-push"},
    "git-push": {"git-push"},
    "git-push/force": {"git-push", "git-push/force"},
    "git commit": {"git-commit"},
    "git": set(),
    "db-migration": {"db-migration"},
    "release": {"release"},
    "rollback": {"rollback"},
    "send-email": {"send-email"},
    "send email": {"send-email"},
    "delete-data": {"delete-data"},
    "rotate-keys": {"rotate-keys"},
    "pay-invoice": {"pay-invoice"},
    "destroy-cluster": {"destroy-cluster"},
    "deploy-docs": set(),
    "release-notes": set(),
    "delete": set(),
    "pay": set(),
    "send-sms": set(),
    "rotate-logs": set(),
    # free text: only a semantic rule can serve these
    "push my branch to the remote": {"git-push"},
    "ship the new version to production": {"deploy", "deploy/prod"},
    "run the database schema migration": {"db-migration"},
    "wipe the user's records": {"delete-data"},
    "email the customer": {"send-email"},
}


def exact_parents(action: str) -> set[str]:
    return set(trigger_lineage(normalise_trigger(action))) & set(NAMES)


def prefix(action: str) -> set[str]:
    a = normalise_trigger(action)
    return {n for n in NAMES if n.startswith(a) or a.startswith(n)} if a else set()


def score(rule: dict[str, set[str]]) -> tuple[float, float]:
    tp = sum(len(rule[a] & want) for a, want in LABELS.items())
    fp = sum(len(rule[a] - want) for a, want in LABELS.items())
    fn = sum(len(want - rule[a]) for a, want in LABELS.items())
    return tp / max(1, tp + fp), tp / max(1, tp + fn)


async def main() -> None:
    embedder = LocalE5Embedder()
    try:
        names = await embedder.embed_documents([n.replace("-", " ").replace("/", " ") for n in NAMES])
        actions = await embedder.embed_queries([a.replace("-", " ").replace("/", " ") for a in LABELS])
    finally:
        await embedder.close()
    cos = np.asarray(actions) @ np.asarray(names).T
    rows = [
        ("exact+parents", {a: exact_parents(a) for a in LABELS}),
        ("prefix", {a: prefix(a) for a in LABELS}),
    ]
    for t in (0.80, 0.84, 0.88):
        rows.append(
            (
                f"semantic@{t:.2f}",
                {a: {NAMES[j] for j in np.flatnonzero(cos[i] >= t)} for i, a in enumerate(LABELS)},
            )
        )
    print(
        f"{len(LABELS)} actions × {len(NAMES)} names; {sum(len(v) for v in LABELS.values())} relevant pairs"
    )
    print("| rule | precision | recall |")
    print("|---|---|---|")
    for name, rule in rows:
        p, r = score(rule)
        print(f"| {name} | {p:.2f} | {r:.2f} |")


if __name__ == "__main__":
    asyncio.run(main())
