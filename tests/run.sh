#!/usr/bin/env bash
# Creates .venv if needed, installs everything, runs the tests. CI (.ci/run) calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements.txt -r tests/requirements.txt
.venv/bin/python -m pip install -q --no-deps -r requirements-nodeps.txt
# The real-browser test drives Debian's Chromium (playwright's own browser download does not work here).
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "warning: could not install chromium; the browser test will be skipped" >&2
fi
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
