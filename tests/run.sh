#!/usr/bin/env bash
# Creates .venv if needed, installs everything, runs the tests. CI (.ci/run) calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements.txt -r tests/requirements.txt
.venv/bin/python -m pip install -q --no-deps -r requirements-nodeps.txt
# xc itself, editable: the `xc` command (pyproject.toml; its dependencies are requirements.txt, installed above)
.venv/bin/python -m pip install -q --no-deps -e . >/dev/null 2>&1 || .venv/bin/python -m pip install -q --no-deps -e .
# Debian packages: Graphviz (`dot` draws the Topology view; required), Chromium for the real-browser tests
# (playwright's own browser download does not work here; its SwiftShader is litert-gpu's GPU) and g++ (TorchInductor's
# compiler).
missing=""
command -v dot >/dev/null 2>&1 || missing="$missing graphviz"
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
command -v g++ >/dev/null 2>&1 || missing="$missing g++"
# libvulkan1: the Vulkan loader LiteRT's GPU delegate opens (it runs on Chromium's SwiftShader, a software GPU)
ldconfig -p 2>/dev/null | grep -q libvulkan.so.1 || missing="$missing libvulkan1"
if [ -n "$missing" ] && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null) \
    || echo "warning: could not install$missing" >&2
fi
command -v dot >/dev/null 2>&1 || { echo "Graphviz's dot is missing: apt-get install graphviz (as root)" >&2; exit 1; }
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 "$@"
