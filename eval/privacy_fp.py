"""The privacy filter's false-positive rate on ordinary text.

Every text here is free of secrets, so every redaction is a false positive. Two corpora:

- the turns of the LoCoMo conversations (read at run time from ``../shared/data/locomo``, never
  copied into the project): everyday chat, names, dates, numbers;
- ``TECHNICAL``, below: developer prose full of the things that look like secrets and are not —
  commit ids, hashes, UUIDs, URLs with query strings, base64, version numbers, file paths, the words
  password / secret / token / key used in prose.

    python -m eval.privacy_fp [--data ../shared/data/locomo/locomo_dev.json]

Prints the texts checked, the texts changed and the rate per corpus, and each false positive.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from engram_server.domain.privacy import PrivacyFilter

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo_dev.json"

TECHNICAL = [
    "Fixed the flaky test in commit 3f2a9c1d0e8b7a6f5e4d3c2b1a0f9e8d7c6b5a49; see PR #4812.",
    "The request id 123e4567-e89b-12d3-a456-426614174000 shows up in both traces.",
    "sha256 of the tarball is e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855.",
    "Pull ghcr.io/acme/api@sha256:4bcff63911fcb4448bd4fdacec207030997caf25e9bea4045fa6c8c44de311d1.",
    "Open https://example.com/search?q=engram&page=2&sort=desc to see the ranking issue.",
    "The S3 bucket is s3://acme-logs/2026/11/30/ and lifecycle rules expire objects after 30 days.",
    "We moved from Postgres 14 to 16 and bumped pgvector to 0.7.4.",
    "The password reset flow sends a link that expires after 15 minutes.",
    "Never commit secrets; the secret scanning job runs on every push.",
    "Rotate the API key every 90 days and store it in the vault, not in .env files.",
    "The token budget is 2000 and max_tokens: 512 keeps answers short.",
    "Tokens: 1,234 prompt and 567 completion in the last call.",
    "Password: use the one in 1Password under 'staging db'.",
    "Base64 of hello is aGVsbG8= and its hex is 68656c6c6f.",
    "The JWT library validates the exp and nbf claims before anything else.",
    "Connect with psql -h db.internal -U app and enter your own credentials.",
    "postgres://db.internal:5432/prod is the read replica; writes go to the primary.",
    "The Slack channel #deploys gets a message from the CI bot after each release.",
    "Use AWS_PROFILE=staging and run terraform plan before apply.",
    "The GitHub Actions workflow caches ~/.cache/pip keyed on hashFiles('requirements.txt').",
    "Stripe webhooks are verified with the signing secret from the dashboard.",
    "The Anthropic and OpenAI clients both retry 429s with exponential backoff.",
    "ghp tokens are being phased out in favour of fine-grained tokens.",
    "sk-learn is not a package name; install scikit-learn instead.",
    "The build artifact is dist/engram-0.1.0a1-py3-none-any.whl (412 KB).",
    "Kubernetes secret objects are only base64-encoded, not encrypted, unless KMS is on.",
    "The private key never leaves the HSM; we only ship the public key.",
    "Our Redis runs at redis://cache.internal:6379/0 without auth inside the VPC.",
    "Set ENGRAM_API_KEY in the environment; the server refuses calls without it.",
    "The regex ^[A-Z0-9]{20}$ matches AWS key ids, so we use it in the pre-commit hook.",
    "The user id 4f9c2a7e-1b3d-4e5f-8a9b-0c1d2e3f4a5b owns 12 collections.",
    "Grafana shows p99 at 182 ms after the index rebuild on 2026-11-28.",
    "Bearer auth is required on every route except /healthz.",
    "我们把缓存从 Redis 6 升级到了 7.2，密码学课程下周开始。",
    "登录页面的密码输入框需要显示强度提示。",
    "The file lives at /home/alice/projects/secret-santa/README.md.",
    "Meeting notes: secret santa draw on Friday, budget 20 EUR.",
    "The AKIA prefix marks long-term AWS access keys; ASIA marks temporary ones.",
    "eyJ is what every base64-encoded JSON object starts with.",
    "-----BEGIN CERTIFICATE----- blocks are public and safe to share.",
    'curl -H "x-api-key: $ENGRAM_API_KEY" "$BASE/v1/collections"',
    "headers={'api-key': os.environ['ENGRAM_QDRANT_API_KEY']}",
    "Set password=<your-password> in the template and token={{ vault_token }} in CI.",
]


def locomo_turns(path: Path) -> list[str]:
    data = json.loads(path.read_text())
    out: list[str] = []
    for sample in data:
        conv = sample["conversation"]
        for key, value in conv.items():
            if key.startswith("session_") and isinstance(value, list):
                out.extend(str(t.get("text", "")) for t in value if t.get("text"))
    return out


def measure(name: str, texts: list[str], f: PrivacyFilter) -> list[tuple[str, str]]:
    hits = [(t, f.redact(t).text) for t in texts if f.redact(t).changed]
    rate = len(hits) / len(texts) if texts else 0.0
    print(f"{name}: {len(texts)} texts, {len(hits)} changed, false-positive rate {rate:.4%}")
    return hits


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    f = PrivacyFilter()
    found: list[tuple[str, str]] = []
    if args.data.is_file():
        found += measure("LoCoMo turns", locomo_turns(args.data), f)
    else:
        print(f"LoCoMo: {args.data} not found; skipped")
    found += measure("technical prose", TECHNICAL, f)
    for before, after in found:
        print(f"  FP: {before!r}\n   -> {after!r}")


if __name__ == "__main__":
    main()
