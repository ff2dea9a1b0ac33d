#!/usr/bin/env bash
# buf breaking (FILE rules, from buf.yaml) of proto/ against main.
#
#   scripts/polyglot_buf_breaking.sh [path/to/buf]
#
# What "main" is, in order:
#   - $BUF_BREAKING_AGAINST if set (any buf input, e.g. '.git#tag=v1.2.0');
#   - the main branch (local `main`, else `origin/main`) when HEAD is another commit
#     (a feature branch or a pull request);
#   - HEAD~1 when HEAD is main itself (CI on main: the last commit, plus any uncommitted
#     change, must not break the contract);
#   - HEAD when there is no history at all (a depth-1 clone): only uncommitted changes
#     are checked, and the script says so.
# buf clones the local .git itself, so this works offline.
set -euo pipefail
cd "$(dirname "$0")/.."
BUF=${1:-${BUF:-.tools/node_modules/.bin/buf}}

if [[ -n "${BUF_BREAKING_AGAINST:-}" ]]; then
  against=$BUF_BREAKING_AGAINST
  what="$BUF_BREAKING_AGAINST (BUF_BREAKING_AGAINST)"
elif ! git rev-parse --git-dir >/dev/null 2>&1; then
  echo "buf breaking: not a git checkout, nothing to compare against (skipped)"
  exit 0
else
  head=$(git rev-parse HEAD)
  base=""
  for ref in refs/heads/main refs/remotes/origin/main; do
    if git rev-parse -q --verify "$ref^{commit}" >/dev/null; then
      base=$ref
      break
    fi
  done
  if [[ -n $base && $(git rev-parse "$base^{commit}") != "$head" ]]; then
    sha=$(git rev-parse "$base^{commit}")
    against=".git#ref=$sha"
    what="main (${base#refs/}, ${sha:0:12})"
  elif parent=$(git rev-parse -q --verify "HEAD~1^{commit}"); then
    against=".git#ref=$parent"
    what="HEAD~1 (${parent:0:12}; HEAD is main)"
  else
    against=".git#ref=$head"
    what="HEAD (${head:0:12}; no history in this clone, so only uncommitted changes are checked)"
  fi
fi

echo "buf breaking: proto/ against $what"
"$BUF" breaking --against "$against"
