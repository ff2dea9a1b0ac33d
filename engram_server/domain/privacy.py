"""The privacy filter: secrets and ``<private>…</private>`` content never reach the embedder, the
store or an LLM.

It runs on every write path of the service — AddMemory, AddMemories, UpdateMemory (content and
metadata values), ExtractMemories (every input text, before the LLM sees it) — in the domain, so
no adapter or client can skip it. What it removes:

- ``<private>…</private>`` spans (case-insensitive, across lines; an unclosed ``<private>`` hides
  everything after it): removed without a trace;
- well-known key and token formats (AWS, GCP, Azure, GitHub, GitLab, Slack, Stripe, OpenAI,
  Anthropic, JWTs, PEM private-key blocks, bearer tokens): replaced by ``[REDACTED:<kind>]``;
- the value of ``password=`` / ``secret: …`` / ``api_key=…`` style assignments (English and
  Chinese key words) and the password of a connection string (``postgres://user:pw@host``): the
  key, user and host stay, the value becomes ``[REDACTED:<kind>]``;
- anything matching the operator's extra patterns (``ENGRAM_PRIVACY_EXTRA_PATTERNS``): the whole
  match becomes ``[REDACTED:custom]``.

Hashes, UUIDs, commit ids and URLs without credentials are left alone: the patterns are anchored
on the prefixes and shapes the providers publish, not on entropy. ``eval/privacy_fp.py`` measures
the false-positive rate on ordinary text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

MARK = "[REDACTED:{kind}]"

_PRIVATE = re.compile(r"<private>.*?(?:</private>|\Z)", re.IGNORECASE | re.DOTALL)

#: (kind, pattern); the whole match is replaced. Order matters: specific before generic.
_TOKENS: tuple[tuple[str, str], ...] = (
    (
        "private_key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?"
        r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    ),
    ("aws_access_key", r"\b(?:AKIA|ASIA|ABIA|ACCA|AIDA|AROA)[0-9A-Z]{16}\b"),
    ("gcp_api_key", r"\bAIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])"),
    ("gcp_oauth_token", r"\bya29\.[0-9A-Za-z_\-]{20,}"),
    ("github_token", r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,}\b"),
    ("github_token", r"\bgithub_pat_[A-Za-z0-9_]{22,}\b"),
    ("gitlab_token", r"\bgl(?:pat|dt|ptt|rt|cbt|oas)-[A-Za-z0-9_\-]{20,}(?![A-Za-z0-9_\-])"),
    ("slack_token", r"\bxox[abposre]-[A-Za-z0-9\-]{10,}"),
    ("slack_webhook", r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9_/\-]{20,}"),
    ("stripe_key", r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}\b"),
    ("stripe_webhook_secret", r"\bwhsec_[A-Za-z0-9]{24,}\b"),
    ("anthropic_key", r"\bsk-ant-[a-z]{3,6}\d{2}-[A-Za-z0-9_\-]{20,}(?![A-Za-z0-9_\-])"),
    ("openai_key", r"\bsk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}(?![A-Za-z0-9_\-])"),
    ("jwt", r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    ("azure_storage_key", r"(?i)\bAccountKey=[A-Za-z0-9+/=]{40,}"),
    ("azure_sas_signature", r"(?i)(?<=[?&])sig=[A-Za-z0-9%+/=]{20,}"),
    ("azure_connection_key", r"(?i)\bSharedAccessKey=[A-Za-z0-9+/=]{20,}"),
    ("bearer_token", r"(?i)\bbearer\s+[A-Za-z0-9\-._~+/]{20,}=*"),
)

#: Secret-bearing key words of ``key = value`` / ``key: value`` assignments.
_KEYWORDS = (
    r"password|passwd|passphrase|secret|client[_\-]?secret|secret[_\-]?key|api[_\-]?key|apikey|"
    r"access[_\-]?key(?:[_\-]?id)?|access[_\-]?token|auth[_\-]?token|refresh[_\-]?token|token|"
    r"private[_\-]?key|aws_secret_access_key|credentials?"
)
#: ``password=hunter2``, ``"api_key": "abc"``, ``SECRET: x9!``, ``密码：abc123``. With ``:`` (prose uses
#: colons) the value must look like a secret: quoted, or holding a digit or a symbol.
_ASSIGN_EQ = re.compile(
    rf"(?i)(?P<key>\b[\w.\-]*(?:{_KEYWORDS})[\"']?\s*=\s*)(?P<value>\"[^\"\n]+\"|'[^'\n]+'|[^\s,;&]+)"
)
_ASSIGN_COLON = re.compile(
    rf"(?i)(?P<key>\b[\w.\-]*(?:{_KEYWORDS})[\"']?\s*:\s*)"
    r"(?P<value>\"[^\"\n]+\"|'[^'\n]+'|(?=[^\s,;]*[0-9!@#$%^&*+/=_\-])[^\s,;]{4,})"
)
_ASSIGN_ZH = re.compile(
    r"(?P<key>(?:密码|口令|密钥|私钥|令牌)\s*(?:是|为|[:：=]))\s*(?P<value>[^\s，。,;；]+)"
)
#: ``scheme://user:password@host``: the password goes, user and host stay.
_URL_PASSWORD = re.compile(r"(?P<key>\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/@]+:)(?P<value>[^\s@/]+)(?=@)")


#: The patterns whose key stays, in order, each with the strings one of which a match holds.
_KEPT_KEY: tuple[tuple[str, re.Pattern[str], tuple[str, ...]], ...] = (
    ("connection_string_password", _URL_PASSWORD, ("://",)),
    ("assigned_secret", _ASSIGN_EQ, ("=",)),
    ("assigned_secret", _ASSIGN_COLON, (":",)),
    ("assigned_secret", _ASSIGN_ZH, ("密码", "口令", "密钥", "私钥", "令牌")),
)

#: A value that refers to a secret instead of holding it: ``$VAR``, ``${VAR}``, ``os.environ[…]``,
#: ``process.env.X``, ``<your-key>``, ``{{ secret }}``.
_REFERENCE = re.compile(r"[\"']?(?:\$|os\.environ|os\.getenv|process\.env|<[^<>\s]+>$|\{\{)")


@dataclass(frozen=True, slots=True)
class Redacted:
    """The filtered text and what was taken out (kinds, in order, repeated per finding)."""

    text: str
    kinds: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.kinds)


@dataclass(frozen=True, slots=True)
class PrivacyFilter:
    """Strips secrets and private spans. ``enabled=False`` turns every check off (the operator's
    choice, e.g. a store that only ever receives vetted text)."""

    enabled: bool = True
    extra_patterns: tuple[str, ...] = ()
    _compiled: tuple[tuple[str, re.Pattern[str]], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        compiled = [(kind, re.compile(p, re.DOTALL)) for kind, p in _TOKENS]
        compiled += [("custom", re.compile(p)) for p in self.extra_patterns]
        object.__setattr__(self, "_compiled", tuple(compiled))

    def redact(self, text: str) -> Redacted:
        if not self.enabled or not text:
            return Redacted(text)
        kinds: list[str] = []

        def drop_private(m: re.Match[str]) -> str:
            kinds.append("private")
            return ""

        out = _PRIVATE.sub(drop_private, text)
        if "private" in kinds:
            out = re.sub(r"[ \t]{2,}", " ", out).strip()
        for kind, pattern in self._compiled:
            out = pattern.sub(_marker(kind, kinds), out)
        for kind, pattern, needs in _KEPT_KEY:
            # (each needs a character or word the text lacks more often than not: the test is
            # on the text as it is now, earlier patterns' marks included; scanning for an
            # assignment costs a few microseconds, the test a fraction of one)
            if any(n in out for n in needs):
                out = pattern.sub(_keep_key(kind, kinds), out)
        return Redacted(out, tuple(kinds))

    def redact_all(self, texts: Iterable[str]) -> tuple[list[str], tuple[str, ...]]:
        outs: list[str] = []
        kinds: list[str] = []
        for t in texts:
            r = self.redact(t)
            outs.append(r.text)
            kinds.extend(r.kinds)
        return outs, tuple(kinds)

    def redact_mapping(self, values: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
        kinds: list[str] = []
        out: dict[str, str] = {}
        for k, v in values.items():
            r = self.redact(v)
            out[k] = r.text
            kinds.extend(r.kinds)
        return out, tuple(kinds)


def _marker(kind: str, kinds: list[str]) -> Callable[[re.Match[str]], str]:
    def sub(m: re.Match[str]) -> str:
        kinds.append(kind)
        return MARK.format(kind=kind)

    return sub


def _keep_key(kind: str, kinds: list[str]) -> Callable[[re.Match[str]], str]:
    def sub(m: re.Match[str]) -> str:
        value = m.group("value")
        if value.strip("\"'").startswith("[REDACTED:"):
            return m.group(0)  # already taken by a specific pattern
        if _REFERENCE.match(value):
            return m.group(0)  # names where the secret is (an environment variable, a template)
        kinds.append(kind)
        return m.group("key") + MARK.format(kind=kind)

    return sub


def check_patterns(patterns: Iterable[str]) -> list[str]:
    """Problems with operator-supplied patterns (for the settings check)."""
    problems: list[str] = []
    for p in patterns:
        try:
            compiled = re.compile(p)
        except re.error as exc:
            problems.append(f"{p!r}: {exc}")
            continue
        if compiled.match(""):
            problems.append(f"{p!r} matches the empty string")
    return problems


__all__ = ["MARK", "PrivacyFilter", "Redacted", "check_patterns"]
