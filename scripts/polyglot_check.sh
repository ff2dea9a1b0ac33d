#!/usr/bin/env bash
# Static checks of the non-Python clients, for `make lint`:
#   - the committed Go stubs are what the pinned plugins generate from proto/;
#   - clients/go is gofmt-clean and passes go vet;
#   - clients/ts installs from its lock file and type-checks (types generated from proto/).
# A language is skipped, with a message, only when its toolchain (go / node) is absent.
#
#   scripts/polyglot_check.sh [python]    # python: the venv's interpreter (grpcio-tools)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}

if command -v go >/dev/null 2>&1; then
  "$PY" scripts/polyglot_gen_go.py --check
  unformatted=$(cd clients/go && gofmt -l .)
  if [[ -n $unformatted ]]; then
    echo "gofmt would change (run: cd clients/go && gofmt -w .):" "$unformatted" >&2
    exit 1
  fi
  (cd clients/go && go vet ./...)
  echo "clients/go: stubs up to date, gofmt and go vet clean"
else
  echo "go is not on PATH: skipping the Go checks (install Go >= 1.26)"
fi

if command -v node >/dev/null 2>&1; then
  cd clients/ts
  lock=$(sha256sum package-lock.json | cut -d' ' -f1)
  marker=node_modules/.engram-lock-sha256
  if [[ ! -f $marker || $(cat "$marker") != "$lock" ]]; then
    npm ci --no-audit --no-fund --silent
    echo -n "$lock" >"$marker"
  fi
  npm run typecheck --silent
  echo "clients/ts: tsc --strict clean"
else
  echo "node is not on PATH: skipping the TypeScript checks (install Node >= 20)"
fi
