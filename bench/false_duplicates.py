"""False duplicates at scale: distinct agent memories from templates, written through AddMemories.

Every generated memory states a different fact (different people, places, services, numbers, ids,
dates, times; English and Chinese templates; no two texts equal), so every one the write gate
refuses as a DUPLICATE is a fact lost. The generator is seeded: the same ``--seed`` and
``--memories`` give the same texts. Reported: refused as duplicates, written with
``gate_reason=conflicting_specifics`` (above the duplicate threshold, kept apart by the specifics
check), written plainly; JSON and Markdown under ``--out``.

    python bench/false_duplicates.py --memories 10000                      # the gate as configured
    python bench/false_duplicates.py --memories 2000 --family heldout      # the second template family
    ENGRAM_GATE_SPECIFICS=false python bench/false_duplicates.py --memories 10000   # similarity only

Not part of CI (10,000 memories take minutes on the local model).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_client import AddOutcome, AsyncEngramClient, NewMemory


def _words(text: str) -> list[str]:
    return text.split()


FIRST = _words(
    "Emma Liam Olivia Noah Ava Elijah Sophia Lucas Mia Mateo Amelia Ethan Harper Levi Ella Aiden Chloe "
    "Daniel Nora Henry Zoe Samuel Lily Jack Hannah Owen Aria David Grace Leo Priya Ravi Ananya Kenji "
    "Yuki Carlos Lucia Jonas Lena Omar Fatima Tomasz Marta Ingrid Sven Aisha Kwame Diego Sofia Ivan"
)
LAST = _words(
    "Smith Johnson Brown Garcia Miller Davis Martinez Lopez Wilson Anderson Taylor Thomas Moore Martin "
    "Lee Clark Lewis Walker Hall Young King Wright Scott Green Baker Adams Nelson Hill Campbell Shah "
    "Patel Tanaka Sato Silva Novak Berg Okafor Mensah Kowalski Ivanova"
)
CITIES = _words(
    "Berlin Lisbon Madrid Paris Vienna Prague Warsaw Oslo Stockholm Helsinki Dublin London Boston "
    "Denver Austin Seattle Chicago Toronto Vancouver Montreal Sydney Melbourne Auckland Tokyo Osaka "
    "Seoul Singapore Mumbai Nairobi Lagos Cairo Istanbul Athens Rome Milan Zurich Munich Hamburg Porto"
)
SERVICES = _words(
    "Netflix Spotify Dropbox Notion Slack Zoom Figma GitHub Copilot Audible Duolingo Headspace Peloton "
    "Hulu Disney+ YouTube Premium iCloud OneDrive Canva Grammarly"
)
LANGS = _words("Python Rust Go TypeScript Kotlin Java Swift Elixir Scala Haskell")
PROJECTS = _words("billing search checkout onboarding analytics payments reporting inventory shipping auth")
TEAMS = _words("platform data mobile web infra security growth payments search design")
MONTHS = _words("January February March April May June July August September October November December")
WEEKDAYS = _words("Monday Tuesday Wednesday Thursday Friday")
ZH_SURNAME = list("王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹")
ZH_GIVEN = _words("伟 芳 娜 敏 静 丽 强 磊 军 洋 勇 艳 杰 娟 涛 明 超 秀英 霞 平 刚 桂英 鹏 浩 宇 欣 晨 雪")
ZH_CITIES = _words("北京 上海 广州 深圳 杭州 成都 武汉 西安 南京 重庆 天津 苏州 长沙 郑州 青岛")
ZH_SERVICES = _words("视频会员 音乐会员 网盘会员 健身房年卡 外卖会员 云服务器 在线课程 打车会员")
ALLERGENS = _words("peanuts shellfish penicillin pollen dairy")
ZH_DIGITS = "零一二三四五六七八九"


def _zh_num(n: int) -> str:
    """1–99 in Chinese numerals."""
    tens, ones = divmod(n, 10)
    if tens == 0:
        return ZH_DIGITS[ones]
    return ("" if tens == 1 else ZH_DIGITS[tens]) + "十" + (ZH_DIGITS[ones] if ones else "")


Template = Callable[[random.Random], str]


def _person(r: random.Random) -> str:
    return f"{r.choice(FIRST)} {r.choice(LAST)}"


def _zh_person(r: random.Random) -> str:
    return r.choice(ZH_SURNAME) + r.choice(ZH_GIVEN)


def _date(r: random.Random) -> str:
    return f"{r.choice(MONTHS)} {r.randint(1, 28)}"


def _zh_date(r: random.Random) -> str:
    return f"{r.randint(1, 12)}月{r.randint(1, 28)}日"


def _time(r: random.Random) -> str:
    return f"{r.randint(7, 20)}:{r.choice(('00', '15', '30', '45'))}"


TEMPLATES: tuple[Template, ...] = (
    lambda r: f"{_person(r)} cancelled the {r.choice(SERVICES)} subscription on {_date(r)}.",
    lambda r: f"Invoice {r.randint(1000, 99999)} for ${r.randint(50, 9000):,} was paid on {_date(r)}.",
    lambda r: f"{_person(r)} moved to {r.choice(CITIES)} in {r.randint(2005, 2025)}.",
    lambda r: f"{_person(r)}'s flight to {r.choice(CITIES)} leaves at {_time(r)} on {_date(r)}.",
    lambda r: f"Order #{r.randint(10000, 999999)} shipped to the {r.choice(CITIES)} office on {_date(r)}.",
    lambda r: f"{_person(r)} prefers {r.choice(LANGS)} for the {r.choice(PROJECTS)} service.",
    lambda r: f"The {r.choice(TEAMS)} team's standup is at {_time(r)} every {r.choice(WEEKDAYS)}.",
    lambda r: f"Ticket OPS-{r.randint(100, 9999)} was assigned to {_person(r)}.",
    lambda r: f"{_person(r)} has {r.randint(2, 12)} years of experience with {r.choice(LANGS)}.",
    lambda r: f"The {r.choice(PROJECTS)} service runs {r.randint(2, 48)} replicas in {r.choice(CITIES)}.",
    lambda r: (
        f"{_person(r)} is allergic to {r.choice(('peanuts', 'shellfish', 'penicillin', 'pollen', 'dairy'))}."
    ),
    lambda r: f"{_person(r)} does not want meetings before {r.randint(8, 11)} am on {r.choice(WEEKDAYS)}s.",
    lambda r: f"{_person(r)} booked room {r.randint(1, 9)}{r.choice('ABCDE')} for {_date(r)} at {_time(r)}.",
    lambda r: f"{_person(r)}'s monthly rent in {r.choice(CITIES)} is ${r.randint(8, 45) * 100:,}.",
    lambda r: f"{_zh_person(r)}在{_zh_date(r)}取消了{r.choice(ZH_SERVICES)}。",
    lambda r: f"发票{r.randint(1000, 99999)}的金额是{r.randint(50, 9000)}元，已在{_zh_date(r)}付款。",
    lambda r: f"{_zh_person(r)}{r.randint(2005, 2025)}年搬到了{r.choice(ZH_CITIES)}。",
    lambda r: f"{_zh_person(r)}每周{r.choice('一二三四五')}下午{_zh_num(r.randint(1, 6))}点开周会。",
    lambda r: f"{_zh_person(r)}的孩子今年{_zh_num(r.randint(1, 18))}岁。",
    lambda r: f"工单 OPS-{r.randint(100, 9999)} 分配给了{_zh_person(r)}。",
    lambda r: f"{_zh_person(r)}在{r.choice(ZH_CITIES)}的月租是{r.randint(15, 90) * 100}元。",
    lambda r: f"{_zh_person(r)}不吃{r.choice(('香菜', '辣椒', '海鲜', '牛肉', '花生'))}。",
)


# A second family, written apart from the first and never used to choose a gate default: other
# domains (home, health, family, travel, shopping) and, on purpose, facts that differ only in a
# lower-case common noun (a cat / a dog, the kitchen / the bathroom), a verb (bought / sold) or an
# adjective (red / blue) — what no specific (number, date, name) tells apart.
PETS = _words("cat dog rabbit parrot hamster turtle goldfish")
ROOMS = _words("kitchen bathroom bedroom garage hallway attic basement balcony")
FIXTURES = _words("light faucet window door heater fan outlet sink")
COLOURS = _words("red blue green black white silver yellow grey")
VEHICLES = _words("car van truck motorbike bicycle scooter")
MEDS = _words("ibuprofen aspirin metformin insulin amoxicillin melatonin vitamin-D")
MEALS = _words("breakfast lunch dinner")
FOODS = _words("pasta sushi tacos curry salad soup pizza dumplings")
INSTRUMENTS = _words("piano guitar violin drums cello flute trumpet")
SPORTS = _words("tennis soccer chess swimming basketball volleyball climbing")
RELATIVES = _words("sister brother mother father aunt uncle cousin daughter son")
DEALS = _words("bought sold rented borrowed returned repaired")
ZH_PETS = _words("猫 狗 兔子 鹦鹉 仓鼠 乌龟 金鱼")
ZH_ROOMS = _words("厨房 浴室 卧室 车库 走廊 阳台 书房")
ZH_FIXTURES = _words("灯 水龙头 窗户 门 暖气 空调 插座")
ZH_COLOURS = _words("红色 蓝色 绿色 黑色 白色 银色 黄色")
ZH_FOODS = _words("饺子 面条 米饭 火锅 寿司 披萨 沙拉")
ZH_INSTRUMENTS = _words("钢琴 吉他 小提琴 鼓 大提琴 长笛")
ZH_RELATIVES = _words("姐姐 哥哥 妈妈 爸爸 阿姨 叔叔 表妹 女儿 儿子")


HELDOUT: tuple[Template, ...] = (
    lambda r: f"{r.choice(FIRST)}'s {r.choice(PETS)} is named {r.choice(FIRST)}.",
    lambda r: f"The {r.choice(FIXTURES)} in the {r.choice(ROOMS)} was fixed on {r.choice(WEEKDAYS)}.",
    lambda r: f"{r.choice(FIRST)} drives a {r.choice(COLOURS)} {r.choice(VEHICLES)}.",
    lambda r: f"{r.choice(FIRST)} takes {r.choice(MEDS)} after {r.choice(MEALS)}.",
    lambda r: f"{r.choice(FIRST)} had {r.choice(FOODS)} for {r.choice(MEALS)} with {r.choice(FIRST)}.",
    lambda r: f"{r.choice(FIRST)}'s {r.choice(RELATIVES)} plays the {r.choice(INSTRUMENTS)}.",
    lambda r: f"{r.choice(FIRST)} {r.choice(DEALS)} a {r.choice(COLOURS)} {r.choice(VEHICLES)} last week.",
    lambda r: "{} quit {} and started {}.".format(r.choice(FIRST), *r.sample(SPORTS, 2)),
    lambda r: f"{r.choice(FIRST)}'s {r.choice(RELATIVES)} lives in {r.choice(CITIES)}.",
    lambda r: f"{r.choice(FIRST)} keeps the spare key in the {r.choice(ROOMS)}.",
    lambda r: f"{r.choice(FIRST)} is learning the {r.choice(INSTRUMENTS)} from {r.choice(FIRST)}.",
    lambda r: f"{r.choice(FIRST)} painted the {r.choice(ROOMS)} {r.choice(COLOURS)}.",
    lambda r: (
        f"{r.choice(ZH_SURNAME)}{r.choice(ZH_GIVEN)}家的{r.choice(ZH_PETS)}叫{r.choice(ZH_GIVEN)}{r.choice(ZH_GIVEN)}。"
    ),
    lambda r: f"{r.choice(ZH_ROOMS)}的{r.choice(ZH_FIXTURES)}坏了。",
    lambda r: f"{_zh_person(r)}开一辆{r.choice(ZH_COLOURS)}的车。",
    lambda r: f"{_zh_person(r)}晚饭吃了{r.choice(ZH_FOODS)}。",
    lambda r: f"{_zh_person(r)}的{r.choice(ZH_RELATIVES)}会弹{r.choice(ZH_INSTRUMENTS)}。",
    lambda r: f"{_zh_person(r)}把备用钥匙放在{r.choice(ZH_ROOMS)}里。",
    lambda r: f"{_zh_person(r)}的{r.choice(ZH_RELATIVES)}住在{r.choice(ZH_CITIES)}。",
    lambda r: f"{_zh_person(r)}把{r.choice(ZH_ROOMS)}刷成了{r.choice(ZH_COLOURS)}。",
)
FAMILIES = {"base": TEMPLATES, "heldout": HELDOUT}


def generate(n: int, seed: int, family: str = "base") -> list[str]:
    """``n`` distinct memories (seeded); templates of ``family`` are drawn uniformly."""
    templates = FAMILIES[family]
    r = random.Random(seed)
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < n:
        text = r.choice(templates)(r)
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


async def write_all(address: str, texts: Sequence[str], collection: str, batch: int) -> dict[str, Any]:
    counts: Counter[str] = Counter()
    examples: list[dict[str, Any]] = []
    async with AsyncEngramClient(address, timeout=300) as client:
        for start in range(0, len(texts), batch):
            chunk = texts[start : start + batch]
            results = await client.add_many([NewMemory(t) for t in chunk], collection=collection)
            for text, res in zip(chunk, results, strict=True):
                if res.outcome == AddOutcome.DUPLICATE:
                    counts["refused_duplicate"] += 1
                    if len(examples) < 20:
                        examples.append(
                            {
                                "new": text,
                                "existing": res.memory.content,
                                "similarity": round(res.duplicate_similarity or 0.0, 4),
                            }
                        )
                elif res.gate_reason == "conflicting_specifics":
                    counts["written_conflicting_specifics"] += 1
                else:
                    counts["written"] += 1
            done = start + len(chunk)
            if done % 1000 < batch:
                print(f"  {done} written: {dict(counts)}", flush=True)
    return {"counts": dict(counts), "refused_examples": examples}


WriteAll = Callable[[str, Sequence[str], str, int], Coroutine[Any, Any, dict[str, Any]]]


async def run_in_process(
    texts: Sequence[str], batch: int, write: WriteAll, prefix: str, **settings: Any
) -> dict[str, Any]:
    from engram_server.testing import running_server  # noqa: PLC0415 - server only when in-process

    with tempfile.TemporaryDirectory(prefix=f"engram-{prefix}-") as tmp:
        async with running_server(Path(tmp) / "data", **settings) as server:
            return await write(server.address, texts, prefix, batch)


def parse_and_run(  # noqa: PLR0917 - the benchmarks' six parts, in order
    description: str,
    default_memories: int,
    generator: Callable[..., list[str]],
    write: WriteAll,
    prefix: str,
    argv: Sequence[str] | None,
    families: Sequence[str] = (),
) -> tuple[argparse.Namespace, dict[str, Any]]:
    """The templated write benchmarks' command line: generate the texts, write them through
    AddMemories (to ``--address`` or a server started here with the ``ENGRAM_*`` settings)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--memories", type=int, default=default_memories)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument(
        "--address", help=f"an already running server (writes into collection {prefix}-<time>)"
    )
    parser.add_argument("--out", type=Path, default=Path("results/bench"))
    parser.add_argument("--label", default="", help="suffix of the report files (e.g. before)")
    if families:
        parser.add_argument("--family", choices=families, default=families[0], help="the template family")
    args = parser.parse_args(argv)
    texts = (
        generator(args.memories, args.seed, args.family) if families else generator(args.memories, args.seed)
    )
    started = time.perf_counter()
    if args.address:
        report = asyncio.run(write(args.address, texts, f"{prefix}-{int(time.time())}", args.batch))
    else:
        from engram_server.config import env_overrides  # noqa: PLC0415

        report = asyncio.run(run_in_process(texts, args.batch, write, prefix, **env_overrides()))
    report.update(
        memories=args.memories,
        seed=args.seed,
        seconds=round(time.perf_counter() - started, 1),
        at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    return args, report


def main(argv: Sequence[str] | None = None) -> int:
    args, report = parse_and_run(
        __doc__.split("\n\n")[0], 10_000, generate, write_all, "fd", argv, families=tuple(FAMILIES)
    )
    report["family"] = args.family
    report["gate_specifics"] = os.environ.get("ENGRAM_GATE_SPECIFICS", "true")
    refused = report["counts"].get("refused_duplicate", 0)
    kept = report["counts"].get("written_conflicting_specifics", 0)
    suffix = f"_{args.label}" if args.label else ""
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"false_duplicates{suffix}.json").write_text(
        json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8"
    )
    lines = [
        "# False duplicates: distinct templated memories through AddMemories",
        "",
        f"{args.memories} memories ({args.family} templates), seed {args.seed}, "
        f"ENGRAM_GATE_SPECIFICS={report['gate_specifics']}, "
        f"{report['seconds']} s, {report['at']}.",
        "",
        f"- refused as duplicates (facts lost): **{refused}** ({refused / args.memories:.2%})",
        f"- written, kept apart by the specifics check: {kept}",
        f"- written: {report['counts'].get('written', 0)}",
        "",
        "Refused examples (new | existing | similarity):",
        "",
        *[f"- {e['new']} | {e['existing']} | {e['similarity']}" for e in report["refused_examples"]],
    ]
    (args.out / f"false_duplicates{suffix}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"refused as duplicates: {refused}/{args.memories}; counts {report['counts']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
