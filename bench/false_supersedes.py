"""False supersedes at scale: distinct templated facts written through AddMemories with the default
contradiction handling (``ENGRAM_CONTRADICTIONS=supersede``).

Every generated memory is a different fact: records told apart by a counter-like label ("writer 3
noted fact number 10 …", "locker 12 belongs to …", "作者3记录了第10条事实", "员工12负责…") and the
templates of ``bench/false_duplicates.py`` (people, invoices, orders, cities, times; English and
Chinese). The generator is seeded and may draw a label twice ("Probe 83 is installed in Osaka." …
"Probe 83 is installed in Boston."): such a pair is one record whose value changed, which the
counter-label rule supersedes on purpose; it is counted apart (:func:`same_record`). Every other
memory the write gate marks superseded is a fact lost from search. Reported: memories superseded
and wrongly superseded (distinct ids), with examples; JSON and Markdown under ``--out``.

    python bench/false_supersedes.py --memories 3000
    ENGRAM_CONTRADICTIONS=report python bench/false_supersedes.py --memories 3000   # nothing superseded

Not part of CI (thousands of memories take minutes on the local model).
"""

from __future__ import annotations

import json
import os
import random
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engram_client import AsyncEngramClient, NewMemory

sys.path.insert(0, str(Path(__file__).resolve().parent))
from false_duplicates import CITIES, PROJECTS, TEMPLATES, ZH_CITIES, Template, _words, parse_and_run

TOPICS = _words("billing search latency backups onboarding pricing security hiring logging caching")
ITEMS = _words("laptops monitors cables chairs printers keyboards routers phones desks lamps")
COLOURS = _words("red blue green yellow purple orange black white")
ZH_TOPICS = _words("计费 搜索 延迟 备份 入职 定价 安全 招聘 日志 缓存")
ZH_ITEMS = _words("笔记本 显示器 线缆 椅子 打印机 键盘 路由器 手机")

#: Records told apart by a counter-like label ("<noun> <n>"): the label names the record, the rest
#: of the sentence is the same template.
LABELLED: tuple[Template, ...] = (
    lambda r: f"writer {r.randint(1, 40)} noted fact number {r.randint(1, 60)} about {r.choice(TOPICS)}.",
    lambda r: f"Locker {r.randint(1, 300)} belongs to the {r.choice(PROJECTS)} team.",
    lambda r: f"Shelf {r.randint(1, 80)} in warehouse {r.randint(1, 9)} holds {r.choice(ITEMS)}.",
    lambda r: f"Agent {r.randint(1, 50)} finished run {r.randint(1, 200)} without errors.",
    lambda r: f"Tenant {r.randint(1, 400)} parks in the {r.choice(COLOURS)} zone.",
    lambda r: f"Probe {r.randint(1, 90)} is installed in {r.choice(CITIES)}.",
    lambda r: f"Volunteer {r.randint(1, 150)} covers the {r.choice(TOPICS)} desk on shift {r.randint(1, 3)}.",
    lambda r: f"作者{r.randint(1, 40)}记录了第{r.randint(1, 60)}条关于{r.choice(ZH_TOPICS)}的事实。",
    lambda r: f"员工{r.randint(1, 300)}负责{r.choice(ZH_TOPICS)}工作。",
    lambda r: f"{r.randint(1, 80)}号货架存放{r.choice(ZH_ITEMS)}。",
    lambda r: f"租户{r.randint(1, 400)}的车停在{r.choice(ZH_CITIES)}停车场。",
)


def generate(n: int, seed: int) -> list[str]:
    """``n`` distinct memories (seeded): half counter-labelled records, half the false-duplicates
    templates."""
    r = random.Random(seed)
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < n:
        pool = LABELLED if r.random() < 0.5 else TEMPLATES
        text = r.choice(pool)(r)
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


async def write_all(address: str, texts: Sequence[str], collection: str, batch: int) -> dict[str, Any]:
    superseded: dict[str, dict[str, Any]] = {}
    reported = 0
    async with AsyncEngramClient(address, timeout=300) as client:
        for start in range(0, len(texts), batch):
            chunk = texts[start : start + batch]
            results = await client.add_many([NewMemory(t) for t in chunk], collection=collection)
            for text, res in zip(chunk, results, strict=True):
                for c in res.conflicts:
                    if not c.superseded:
                        reported += 1
                        continue
                    superseded.setdefault(
                        c.memory_id,
                        {
                            "superseded": c.content,
                            "new": text,
                            "basis": c.basis,
                            "similarity": round(c.similarity, 3),
                            "explanation": c.explanation,
                        },
                    )
            done = start + len(chunk)
            if done % 500 < batch:
                print(f"  {done} written, {len(superseded)} superseded", flush=True)
    same = [e for e in superseded.values() if same_record(e["superseded"], e["new"])]
    others = [e for e in superseded.values() if not same_record(e["superseded"], e["new"])]
    return {
        "superseded": len(superseded),
        "same_record": len(same),
        "reported_not_superseded": reported,
        "examples": others[:25],
        "same_record_examples": same[:5],
    }


_RE_FIRST_NUMBER = re.compile(r"\d+")
#: The label nouns of :data:`LABELLED` (before the number) and the one label written after it.
_LABEL_WORDS = frozenset(
    ("writer", "Locker", "Shelf", "Agent", "Tenant", "Probe", "Volunteer", "作者", "员工", "租户")
)


def same_record(a: str, b: str) -> bool:
    """Whether two generated texts of a :data:`LABELLED` template name the same record: the same
    label noun and number ("Probe 83 is installed in Osaka." / "Probe 83 is installed in Boston.",
    "租户35的车停在西安停车场。" / "租户35的车停在苏州停车场。", "12号货架…"). The generator may draw a
    label twice; such a pair is one record whose value changed, which the counter-label rule
    supersedes on purpose (the label names the subject)."""
    ma, mb = _RE_FIRST_NUMBER.search(a), _RE_FIRST_NUMBER.search(b)
    if ma is None or mb is None:
        return False
    if ma.start() == 0:  # "12号货架存放键盘。"
        return a[ma.end() :].startswith("号货架") and a[: ma.end() + 3] == b[: mb.end() + 3]
    return a[: ma.start()].strip() in _LABEL_WORDS and a[: ma.end()] == b[: mb.end()]


def main(argv: Sequence[str] | None = None) -> int:
    args, report = parse_and_run(__doc__.split("\n\n")[0], 3000, generate, write_all, "fs", argv)
    report["contradictions"] = os.environ.get("ENGRAM_CONTRADICTIONS", "supersede")
    suffix = f"_{args.label}" if args.label else ""
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"false_supersedes{suffix}.json").write_text(
        json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8"
    )
    lines = [
        "# False supersedes: distinct templated facts through AddMemories",
        "",
        f"{args.memories} memories, seed {args.seed}, ENGRAM_CONTRADICTIONS={report['contradictions']}, "
        f"{report['seconds']} s, {report['at']}.",
        "",
        f"- superseded: {report['superseded']} ({report['superseded'] / args.memories:.2%}), of which "
        f"{report['same_record']} name the same record as the memory they supersede (a label drawn "
        "twice: one record's value changed, superseded on purpose)",
        f"- wrongly superseded (facts lost from search): **{report['superseded'] - report['same_record']}** "
        f"({(report['superseded'] - report['same_record']) / args.memories:.2%})",
        f"- listed as conflicts, not superseded: {report['reported_not_superseded']}",
        "",
        "Examples (superseded | by | basis | similarity):",
        "",
        *[f"- {e['superseded']} | {e['new']} | {e['basis']} | {e['similarity']}" for e in report["examples"]],
    ]
    (args.out / f"false_supersedes{suffix}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    wrong = report["superseded"] - report["same_record"]
    print(f"superseded: {report['superseded']}/{args.memories}; wrongly (another record): {wrong}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
