"""The rule-based extractor: sentence patterns in English and Chinese, no model, no network.

Lower quality than an LLM, and documented as such: it keeps what the speaker said (prefixed with
who said it) instead of rewriting it into a self-contained fact, it only knows the phrasings its
patterns list, and it cannot tell a rejected suggestion from an accepted one. What it keeps from a
conversation:

- identity: name, job, employer, home, origin, family and pets, age, birthday (``identity``, 7);
- preferences and standing instructions: like / prefer / hate / allergic, always / never / don't /
  from now on (``directive``, 6–8);
- decisions and changes: decided, switched / moved / migrated from … to …, started, joined, quit,
  deadlines and appointments (``event``, 6);
- project facts: uses / runs on / is written in / port / version (``insight``, 5).

Questions, greetings, thanks and sentences shorter than four words (six characters in Chinese)
are skipped; assistant messages count only when they report a decision or a change. From a tool
observation it keeps one line: the command or file and its outcome (failures first).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from engram_server.domain.model import MemoryType

EXTRACTED_TAG = "source:extraction"


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    content: str
    created_at: float | None = None


@dataclass(frozen=True, slots=True)
class Observation:
    tool_name: str
    input: str = ""
    output: str = ""
    error: str = ""


@dataclass(frozen=True, slots=True)
class Proposal:
    content: str
    type: MemoryType
    importance: int
    tags: tuple[str, ...] = ()
    created_at: float | None = None

    def with_content(self, content: str, extra_tags: Sequence[str] = ()) -> Proposal:
        tags = tuple(dict.fromkeys((EXTRACTED_TAG, *self.tags, *extra_tags)))[:32]
        return replace(self, content=content, tags=tags)


_CJK = re.compile(r"[\u3400-\u9fff]")

# (type, importance, tag, English pattern, Chinese pattern); the first match decides.
_RULES: tuple[tuple[MemoryType, int, str, str, str], ...] = (
    (
        MemoryType.DIRECTIVE,
        8,
        "instruction",
        r"\b(?:always|never|from now on|make sure (?:to|you)|remember to|don'?t ever|do not ever|"
        r"please (?:always|never|don'?t|do not|use|avoid|keep|write|reply|answer|call|stop)|"
        r"(?:you|we) (?:must|should always|should never)|avoid using)\b",
        r"(?:总是|永远不要|永远别|从现在起|以后(?:都|请|要|不要|别)|务必|一定要|千万别|千万不要|记得|"
        r"请(?:始终|总是|不要|别|使用|用|保持|回复|回答|避免)|不要再|别再)",
    ),
    (
        MemoryType.IDENTITY,
        7,
        "identity",
        r"\b(?:my name is|my name's|call me|i'?m called|i am called|i work (?:as|at|for|in)|"
        r"i'?m an? [a-z]+(?: [a-z]+)? (?:at|for|in|by)|i am an? [a-z]+(?: [a-z]+)? (?:at|for|in|by)|"
        r"i'?m an? (?:engineer|developer|teacher|nurse|doctor|student|designer|manager|lawyer|writer|"
        r"researcher|scientist|artist|chef|accountant|programmer|consultant|freelancer)|"
        r"i am an? (?:engineer|developer|teacher|nurse|doctor|student|designer|manager|lawyer|writer|"
        r"researcher|scientist|artist|chef|accountant|programmer|consultant|freelancer)|"
        r"i live in|i'?m from|i am from|i grew up in|i was born|i'?m \d+ years old|i am \d+ years old|"
        r"i turned \d+|my birthday|my (?:wife|husband|partner|girlfriend|boyfriend|son|daughter|kids?|"
        r"children|dog|cat|mom|mother|dad|father|brother|sister)(?:'s name)? (?:is|are|was)|"
        r"i have (?:a|an|one|two|three|four|\d+) (?:kids?|children|sons?|daughters?|dogs?|cats?|"
        r"brothers?|sisters?)|my email|my phone number|my pronouns)\b",
        r"(?:我叫|我的名字是|叫我|我是(?:一名|一个|个)?.{0,8}(?:工程师|程序员|老师|医生|护士|学生|设计师|经理|律师|"
        r"作家|研究员|厨师|会计|顾问|开发者?)|我在.{1,12}(?:工作|上班|读书|上学)|我住在|我来自|我老家|"
        r"我出生|我今年\d+岁|我的生日|我(?:的)?(?:妻子|丈夫|老婆|老公|女朋友|男朋友|儿子|女儿|孩子|狗|猫|"
        r"妈妈|爸爸|哥哥|姐姐|弟弟|妹妹)(?:叫|是|名叫)|我有(?:一|两|三|四|\d+)(?:个|只|条)(?:孩子|儿子|女儿|"
        r"狗|猫|哥哥|姐姐|弟弟|妹妹))",
    ),
    (
        MemoryType.DIRECTIVE,
        6,
        "preference",
        r"\b(?:i (?:really |absolutely |much |strongly )?(?:like|love|enjoy|prefer|hate|dislike|"
        r"can'?t stand|avoid)|my favou?rite|i'?m (?:allergic|vegetarian|vegan|lactose)|"
        r"i am (?:allergic|vegetarian|vegan|lactose)|i don'?t (?:like|eat|drink|use|want)|"
        r"i do not (?:like|eat|drink|use|want)|i(?:'d| would) rather)\b",
        r"(?:我(?:很|非常|特别|最|比较|更)?(?:喜欢|爱吃|爱喝|讨厌|不喜欢|偏好|倾向于|习惯用|过敏|不吃|不喝|吃素)|"
        r"我最爱|我宁愿|我更愿意)",
    ),
    (
        MemoryType.EVENT,
        6,
        "decision",
        r"\b(?:we|i|they|the team) (?:decided|agreed|chose|picked|settled on|went with)|"
        r"\b(?:switch(?:ed|ing)?|mov(?:ed|ing)|migrat(?:ed|ing)|upgrad(?:ed|ing)|downgrad(?:ed|ing)|"
        r"chang(?:ed|ing)|replac(?:ed|ing)) (?:\w+ ){0,3}(?:from|to|with)\b|"
        r"\b(?:i|we) (?:just )?(?:started|joined|quit|left|bought|adopted|sold|booked|signed|launched|"
        r"released|shipped|deployed|finished|completed|graduated|"
        r"got (?:a|an|my|the|married|engaged|promoted))\b|"
        r"\b(?:i'?m|i am|we'?re|we are) (?:going to|planning to|moving|switching|starting|getting)\b|"
        r"\b(?:deadline|due (?:on|by)|scheduled (?:for|on)|appointment|meeting (?:on|at)|"
        r"interview (?:on|at)|flight (?:on|at)|"
        r"on (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday))\b|"
        r"\bnext (?:week|month|year)\b|\blast (?:week|month|year)\b",
        r"(?:决定|商定|选定|定了|改用|换成|换到|迁移到|迁到|搬到|搬家|升级到|降级到|从.{1,20}(?:换|改|迁|搬|升级)|"
        r"(?:我|我们)(?:刚)?(?:开始|加入|入职|离职|辞职|买了|领养了|卖了|订了|签了|上线了|发布了|完成了|毕业)|"
        r"截止|到期|定在|安排在|预约|面试|航班|下(?:周|个月|星期)|上(?:周|个月|星期)|明年|去年|打算|计划)",
    ),
    (
        MemoryType.INSIGHT,
        5,
        "project",
        r"\b(?:(?:our|the|this|my) (?:project|app|service|api|backend|frontend|repo|database|db|stack|"
        r"server|cluster|pipeline|ci|build|team)\b.{0,40}\b"
        r"(?:uses?|runs?|is (?:written|built|hosted|deployed)|"
        r"lives|listens|depends|needs|requires|targets|is on)|"
        r"(?:uses|runs on|is written in|is built (?:with|on)|is hosted on|listens on|port \d+|"
        r"version \d|v\d+\.\d+))\b",
        r"(?:(?:项目|我们的|这个|服务|后端|前端|仓库|数据库|接口|集群|流水线).{0,20}(?:用|使用|基于|跑在|部署在|运行在|"
        r"写的|端口|版本|依赖)|端口\s*\d+|版本\s*\d)",
    ),
)

_COMPILED = tuple(
    (t, imp, tag, re.compile(en, re.IGNORECASE), re.compile(zh)) for t, imp, tag, en, zh in _RULES
)

_QUESTION_START = re.compile(
    r"^(?:what|why|how|when|where|who|which|whose|can|could|would|should|do|does|did|is|are|was|were|"
    r"will|shall|may|have|has|any idea|any thoughts)\b",
    re.IGNORECASE,
)
_ZH_QUESTION = re.compile(r"(?:吗|呢|么|什么|怎么|为什么|哪|谁|多少|是否|能不能|可不可以|要不要)[\s。!！]*$")
_FILLER = re.compile(
    r"^(?:hi|hello|hey|thanks|thank you|ok|okay|sure|great|cool|nice|sounds good|got it|yes|no|yep|"
    r"nope|lol|haha|bye|good (?:morning|night|evening))\b",
    re.IGNORECASE,
)
_ZH_FILLER = re.compile(r"^(?:你好|嗨|谢谢|好的|好吧|行|嗯|哈哈|再见|早上好|晚安|没问题|可以)[\s，,。!！]*$")
# A sentence ends at . ! ? (not inside a number or a file name), at their full-width forms, or at a
# line break.
_SPLIT = re.compile(
    r"(?<=[!?。！？；;])\s*|(?<!\bSt)(?<!\bDr)(?<!\bMr)(?<!\bMs)(?<!\bMrs)(?<!\bJr)(?<!\bvs)(?<!\be\.g)"
    r"(?<!\bi\.e)(?<=[a-z0-9%\)\"'”])\.\s+|\.(?=\s*$)|\n+",
    re.IGNORECASE,
)


def sentences(text: str) -> list[str]:
    out = []
    for part in _SPLIT.split(text):
        s = part.strip(" \t-*•>")
        if s:
            out.append(s)
    return out


def _is_question(s: str) -> bool:
    stripped = s.rstrip()
    if stripped.endswith(("?", "？")):
        return True
    if _CJK.search(s):
        return bool(_ZH_QUESTION.search(stripped))
    return bool(_QUESTION_START.match(stripped))


def _too_short(s: str) -> bool:
    if _CJK.search(s):
        return len(re.sub(r"\s", "", s)) < 6
    return len(s.split()) < 3


def _classify(s: str) -> tuple[MemoryType, int, str] | None:
    zh = bool(_CJK.search(s))
    for mtype, imp, tag, en, zh_re in _COMPILED:
        if (zh_re if zh else en).search(s) or (zh and en.search(s)):
            return mtype, imp, tag
    return None


def _speaker(role: str, s: str) -> str:
    zh = bool(_CJK.search(s))
    r = role.strip().lower()
    if r in {"user", "human", ""}:
        return "用户" if zh else "User"
    if r in {"assistant", "ai", "agent", "model"}:
        return "助手" if zh else "Assistant"
    return role.strip()[:40]


def rule_extract_messages(messages: Sequence[Message]) -> list[Proposal]:
    """Proposals from a conversation (or one text, as a single user message), in order."""
    out: list[Proposal] = []
    seen: set[str] = set()
    for m in messages:
        assistant = m.role.strip().lower() in {"assistant", "ai", "agent", "model"}
        for s in sentences(m.content):
            if _is_question(s) or _too_short(s):
                continue
            if (_ZH_FILLER if _CJK.search(s) else _FILLER).match(s) and len(s.split()) < 6:
                continue
            found = _classify(s)
            if found is None:
                continue
            mtype, importance, tag = found
            if assistant and tag not in {"decision"}:
                continue  # the assistant's own advice is not the user's fact
            key = " ".join(s.casefold().split())
            if key in seen:
                continue
            seen.add(key)
            colon = "：" if _CJK.search(s) else ": "
            content = f"{_speaker(m.role, s)}{colon}{s}"
            out.append(Proposal(content, mtype, importance, (tag,), m.created_at))
    return out


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


_TELLING = re.compile(
    r"error|fail|fatal|exception|not found|denied|refused|cannot|can't|unable|timed? ?out", re.I
)


def _telling_line(text: str) -> str:
    """The line of an error that says most: the first naming an error (not the exit code)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if _TELLING.search(line) and not re.match(r"(?i)exit code \d+$", line):
            return line
    return lines[0] if lines else ""


def _last_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()
    return ""


def _input_fields(raw: str) -> dict[str, object]:
    try:
        data = json.loads(raw) if raw.strip().startswith("{") else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


#: Tools whose successful runs are not worth a memory on their own (reading is not learning).
QUIET_TOOLS = frozenset(
    {"Read", "Glob", "Grep", "LS", "TodoWrite", "TodoRead", "NotebookRead", "ExitPlanMode"}
)


def observation_text(o: Observation) -> str:
    """The observation as the LLM is shown it."""
    parts = [f"tool: {o.tool_name}", f"input: {_short(o.input, 2000)}"]
    if o.error:
        parts.append(f"error: {_short(o.error, 2000)}")
    else:
        parts.append(f"output: {_short(o.output, 4000)}")
    return "\n".join(parts)


def rule_extract_observation(o: Observation) -> list[Proposal]:
    """One line for a tool observation: what ran and how it ended; nothing for quiet tools that
    succeeded."""
    fields = _input_fields(o.input)
    tool = o.tool_name.strip()
    tags = (f"tool:{tool.lower()[:59]}",)
    command = fields.get("command")
    path = fields.get("file_path") or fields.get("notebook_path") or fields.get("path")
    url = fields.get("url")
    subject = (
        f"`{_short(str(command), 200)}`"
        if isinstance(command, str)
        else str(path)
        if isinstance(path, str)
        else str(url)
        if isinstance(url, str)
        else _short(o.input, 200)
    )
    if o.error.strip():
        what = f"{tool} {subject}".strip() if tool != "Bash" else f"Command {subject}"
        err = _short(_telling_line(o.error), 300)
        return [Proposal(f"{what} failed: {err}", MemoryType.EVENT, 5, (*tags, "tool-failure"))]
    if tool in QUIET_TOOLS:
        return []
    if tool == "Bash":
        outcome = _short(_last_line(o.output), 240)
        content = f"Ran {subject}" + (f": {outcome}" if outcome else "")
        return [Proposal(content, MemoryType.EVENT, 3, tags)]
    if tool in {"Edit", "MultiEdit", "Write", "NotebookEdit"}:
        verb = "Wrote" if tool == "Write" else "Edited"
        return [Proposal(f"{verb} {subject}", MemoryType.EVENT, 3, tags)]
    outcome = _short(_first_line(o.output), 200)
    content = f"{tool} {subject}" + (f": {outcome}" if outcome else "")
    return [Proposal(content.strip(), MemoryType.EVENT, 2, tags)]


__all__ = [
    "EXTRACTED_TAG",
    "QUIET_TOOLS",
    "Message",
    "Observation",
    "Proposal",
    "observation_text",
    "rule_extract_messages",
    "rule_extract_observation",
    "sentences",
]
