"""The privacy filter on its own: positive samples (each secret format is taken out, the text
around it kept) and negative samples (ordinary technical prose is left exactly as it was)."""

from __future__ import annotations

import pytest

from engram_server.config import ConfigError, Settings, load_settings, privacy_patterns
from engram_server.domain.privacy import PrivacyFilter

F = PrivacyFilter()

# (kind, text, the secret that must be gone)
POSITIVE = [
    ("aws_access_key", "deploy with AKIAIOSFODNN7EXAMPLE please", "AKIAIOSFODNN7EXAMPLE"),
    ("aws_access_key", "temp creds ASIAY34FZKBOKMUTVV7A expire soon", "ASIAY34FZKBOKMUTVV7A"),
    (
        "assigned_secret",
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    (
        "gcp_api_key",
        "maps key AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY in the app",
        "AIzaSyD-9tSrke72PouQMnMX",
    ),
    ("gcp_oauth_token", "token ya29.a0AfH6SMBx3kXr9QvL2mN8pQ7rT5uW1yZ4cE in header", "ya29.a0AfH6SMBx3kXr9"),
    (
        "azure_storage_key",
        "DefaultEndpointsProtocol=https;AccountName=acme;"
        "AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;"
        "EndpointSuffix=core.windows.net",
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq",
    ),
    (
        "azure_sas_signature",
        "https://acme.blob.core.windows.net/c/f.txt?sv=2022-11-02&sig=9kLmN0pQrStUvWxYz1234567890abcdEFGH%3D",
        "9kLmN0pQrStUvWxYz1234567890abcdEFGH",
    ),
    (
        "github_token",
        "export GH_TOKEN=ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    ),
    (
        "github_token",
        "fine-grained github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVW",
        "github_pat_11ABCDEFG0123456789",
    ),
    ("gitlab_token", "use glpat-xY3zA9bC7dE5fG1hJ2kL for CI", "glpat-xY3zA9bC7dE5fG1hJ2kL"),
    (
        "slack_token",
        "bot token xoxb-2048-4096-AbCdEfGhIjKlMnOpQrStUv",
        "xoxb-2048-4096-AbCdEfGhIjKlMnOpQrStUv",
    ),
    (
        "slack_webhook",
        "post to https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX now",
        "XXXXXXXXXXXXXXXXXXXXXXXX",
    ),
    ("stripe_key", "STRIPE=sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    (
        "stripe_webhook_secret",
        "whsec_5f8a9b2c3d4e5f6a7b8c9d0e1f2a3b4c signs events",
        "whsec_5f8a9b2c3d4e5f6a7b8c9d0e1f2a3b4c",
    ),
    (
        "openai_key",
        "OPENAI_API_KEY=sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z",
        "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z",
    ),
    ("openai_key", "old style sk-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zT3BlbkFJ key", "sk-Ab3dEf6hIj9kLm2nOp5q"),
    (
        "anthropic_key",
        "ANTHROPIC_API_KEY=sk-ant-api03-Xy9_zW8vU7tS6rQ5pO4nM3lK2jI1hG0fE-dC",
        "sk-ant-api03-Xy9_zW8vU7tS6rQ5pO4nM3lK2jI1hG0fE-dC",
    ),
    (
        "jwt",
        "Cookie: session=eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ),
    (
        "private_key",
        "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7bq9\nabcdEFGH\n"
        "-----END RSA PRIVATE KEY-----\nend",
        "MIIEpAIBAAKCAQEA7bq9",
    ),
    (
        "private_key",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAE\n(truncated",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAE",
    ),
    (
        "bearer_token",
        "curl -H 'Authorization: Bearer abcDEF123456ghiJKL789012mnoPQR'",
        "abcDEF123456ghiJKL789012mnoPQR",
    ),
    ("assigned_secret", "DB_PASSWORD=hunter2 in .env", "hunter2"),
    ("assigned_secret", 'config = {"password": "correct horse battery"}', "correct horse battery"),
    ("assigned_secret", "client_secret: 9f8e7d6c5b4a", "9f8e7d6c5b4a"),
    ("assigned_secret", "Password: Tr0ub4dor&3", "Tr0ub4dor&3"),
    ("assigned_secret", "数据库密码：Zx9!pass，别告诉别人", "Zx9!pass"),
    ("assigned_secret", "我的密码是abc12345", "abc12345"),
    ("connection_string_password", "DATABASE_URL=postgres://app:s3cr3tPw@db.internal:5432/prod", "s3cr3tPw"),
    ("connection_string_password", "redis://default:Rp4ss-word@cache:6379/0", "Rp4ss-word"),
    ("connection_string_password", "mongodb+srv://admin:M0ngoPw@cluster0.example.net/app", "M0ngoPw"),
]


@pytest.mark.parametrize(("kind", "text", "secret"), POSITIVE)
def test_each_secret_format_is_taken_out(kind: str, text: str, secret: str) -> None:
    r = F.redact(text)
    assert secret not in r.text, r.text
    assert kind in r.kinds, r.kinds
    assert f"[REDACTED:{kind}]" in r.text


def test_the_text_around_a_secret_stays() -> None:
    r = F.redact("DATABASE_URL=postgres://app:s3cr3tPw@db.internal:5432/prod and the rest")
    assert (
        r.text == "DATABASE_URL=postgres://app:[REDACTED:connection_string_password]@db.internal:5432/prod"
        " and the rest"
    )
    assert F.redact("export GITHUB_TOKEN=ghp_16C7e42F292c6912E7710c838347Ae178B4a").text == (
        "export GITHUB_TOKEN=[REDACTED:github_token]"
    )


def test_private_spans_are_removed_without_a_trace() -> None:
    r = F.redact("I live in Lisbon. <private>My SSN is 078-05-1120.</private> I like jazz.")
    assert r.text == "I live in Lisbon. I like jazz." and r.kinds == ("private",)
    multi = F.redact("a <PRIVATE>line one\nline two</PRIVATE> b <private>x</private> c")
    assert multi.text == "a b c" and multi.kinds == ("private", "private")
    unclosed = F.redact("visible <private>everything after this is hidden")
    assert unclosed.text == "visible" and "hidden" not in unclosed.text


NEGATIVE = [
    "Fixed the bug in commit 3f2a9c1d0e8b7a6f5e4d3c2b1a0f9e8d7c6b5a49 and pushed to main.",
    "The request id was 123e4567-e89b-12d3-a456-426614174000; see https://example.com/logs?id=42&page=2.",
    "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "Use the password reset link in the email; the secret is to ask early.",
    "Password: see the vault entry for staging.",
    "The token limit is 4096 and max_tokens: 512 works best.",
    "Our API key rotation happens every 90 days.",
    "Connect to postgres://db.internal:5432/prod with your own credentials.",
    "The file is at /home/alice/projects/sk-learn-notes/README.md.",
    "Skiing in Whistler was great; we booked the sk-8 trail map.",
    "Meeting notes: secret santa draw on Friday, budget 20 EUR.",
    "我们明天 10 点在会议室讨论数据库迁移，密码学课程下周开始。",
    "Base64 of hello is aGVsbG8= and the hex is 68656c6c6f.",
    "git clone https://github.com/engram-memory/engram.git && cd engram",
    'curl -H "x-api-key: $ENGRAM_API_KEY" "$BASE/v1/collections"',
    "headers={'api-key': os.environ['ENGRAM_QDRANT_API_KEY']}",
    "Set password=<your-password> in the template and token={{ vault_token }} in CI.",
    "Docker image sha256:4bcff63911fcb4448bd4fdacec207030997caf25e9bea4045fa6c8c44de311d1 was pulled.",
]


@pytest.mark.parametrize("text", NEGATIVE)
def test_ordinary_technical_text_is_left_alone(text: str) -> None:
    r = F.redact(text)
    assert r.text == text and r.kinds == ()


def test_extra_patterns_and_the_switch() -> None:
    f = PrivacyFilter(extra_patterns=(r"\bACME-\d{6}\b", r"(?i)employee id \d+"))
    r = f.redact("ticket ACME-123456 for Employee ID 998877, not ACME-12")
    assert r.text == "ticket [REDACTED:custom] for [REDACTED:custom], not ACME-12"
    assert r.kinds == ("custom", "custom")
    off = PrivacyFilter(enabled=False)
    assert off.redact("password=hunter2").text == "password=hunter2"


def test_the_setting_takes_lines_or_a_json_array_and_refuses_bad_patterns() -> None:
    assert privacy_patterns(Settings(privacy_extra_patterns="ACME-\\d+\n\nfoo\\d")) == ("ACME-\\d+", "foo\\d")
    assert privacy_patterns(Settings(privacy_extra_patterns='["a,b", "c\\\\d"]')) == ("a,b", "c\\d")
    with pytest.raises(ConfigError, match="ENGRAM_PRIVACY_EXTRA_PATTERNS"):
        load_settings({"ENGRAM_PRIVACY_EXTRA_PATTERNS": "(unclosed"})
    with pytest.raises(ConfigError, match="empty string"):
        load_settings({"ENGRAM_PRIVACY_EXTRA_PATTERNS": "x*"})
    with pytest.raises(ConfigError, match="JSON array"):
        load_settings({"ENGRAM_PRIVACY_EXTRA_PATTERNS": "[1, 2]"})
    assert load_settings({"ENGRAM_PRIVACY_FILTER": "false"}).privacy_filter is False


def _every_pattern(f: PrivacyFilter, text: str) -> tuple[str, tuple[str, ...]]:
    """The filter as a plain sequence of substitutions, every pattern tried on every text (what
    ``redact`` does, without its tests for the characters a pattern needs)."""
    import re  # noqa: PLC0415

    from engram_server.domain import privacy as p  # noqa: PLC0415

    kinds: list[str] = []

    def drop(m: re.Match[str]) -> str:
        kinds.append("private")
        return ""

    out = p._PRIVATE.sub(drop, text)
    if "private" in kinds:
        out = re.sub(r"[ \t]{2,}", " ", out).strip()
    for kind, pattern in f._compiled:
        out = pattern.sub(p._marker(kind, kinds), out)
    for kind, pattern in (
        ("connection_string_password", p._URL_PASSWORD),
        ("assigned_secret", p._ASSIGN_EQ),
        ("assigned_secret", p._ASSIGN_COLON),
        ("assigned_secret", p._ASSIGN_ZH),
    ):
        out = pattern.sub(p._keep_key(kind, kinds), out)
    return out, tuple(kinds)


def test_skipping_patterns_a_text_cannot_match_changes_nothing() -> None:
    """``redact`` tries an assignment or connection-string pattern only on a text holding the
    character or word it needs (``=``, ``:``, ``://``, a Chinese key word), tested on the text
    as the earlier patterns left it: the answer is the plain sequence's, secrets or not, on
    every sample here and on their pairs (a secret's mark, which holds a ``:``, beside an
    assignment)."""
    texts = [t for _, t, _ in POSITIVE] + NEGATIVE
    texts += [a + " " + b for a in texts[:12] for b in texts[-12:]]
    texts += [
        "token ghp_16C7e42F292c6912E7710c838347Ae178B4a then secret: x9!yz and key=abc",
        "no secrets here, just a question about the quarterly report",
        "我的密码是abc12345 and api_key: 9f8e7d6c5b4a",
    ]
    for f in (F, PrivacyFilter(extra_patterns=(r"secret\S*",))):
        for text in texts:
            r = f.redact(text)
            assert (r.text, r.kinds) == _every_pattern(f, text), text
