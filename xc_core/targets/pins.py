"""The versions xc is tested with, read from requirements.txt — the one place they are written — so a target's
install hint names the exact pin without a second copy in code.

Where it is read from, in order: requirements.txt beside the xc_core package (a source checkout, the Docker
image); else the installed distribution's own dependencies (`pip install .` reads requirements.txt into the wheel's
Requires-Dist, see pyproject.toml); else nowhere — then `pin` returns None and the hint names the package without a
version (`pip install executorch`), which is still a command that works.
"""
from __future__ import annotations

import functools
import os
import re

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REQUIREMENTS = os.path.join(_ROOT, "requirements.txt")
# Installed with --no-deps (their declared dependencies clash with xc's pins): onnx2torch, tosa-tools.
REQUIREMENTS_NODEPS = os.path.join(_ROOT, "requirements-nodeps.txt")
_EXACT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)")


def _normal(name: str) -> str:
    """PEP 503: ai_edge.litert, AI-Edge-LiteRT and ai-edge-litert are one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(lines) -> dict[str, str]:
    """Exact pins (`name==version`) among requirement lines; comments, markers and ranges are left out."""
    out = {}
    for line in lines:
        m = _EXACT.match(line.split("#", 1)[0])
        if m:
            out[_normal(m.group(1))] = m.group(2)
    return out


@functools.cache
def pins() -> dict[str, str]:
    """Distribution name (normalised) → the version requirements.txt pins."""
    if os.path.isfile(REQUIREMENTS):
        with open(REQUIREMENTS, encoding="utf-8") as fh:
            return read_pins(fh)
    from importlib import metadata
    try:
        return read_pins(metadata.requires("xc") or [])
    except metadata.PackageNotFoundError:
        return {}


def pin(distribution: str) -> str | None:
    """The version requirements.txt pins for a distribution ('executorch' → '1.5.1'), None where it is not known."""
    return pins().get(_normal(distribution))


@functools.cache
def nodeps_pins() -> dict[str, str]:
    """Distribution name (normalised) → version, for what requirements-nodeps.txt installs with --no-deps."""
    if os.path.isfile(REQUIREMENTS_NODEPS):
        with open(REQUIREMENTS_NODEPS, encoding="utf-8") as fh:
            return read_pins(fh)
    return {}


def install_hint(*distributions: str) -> str:
    """'pip install executorch==1.5.1': the command that installs what xc was tested with ('pip install --no-deps
    tosa-tools==2026.8.0' for a distribution requirements-nodeps.txt installs on its own)."""
    nodeps = [d for d in distributions if _normal(d) in nodeps_pins()]
    plain = [d for d in distributions if d not in nodeps]
    hints = []
    if plain:
        hints.append("pip install " + " ".join(d + (f"=={pin(d)}" if pin(d) else "") for d in plain))
    if nodeps:
        hints.append("pip install --no-deps " + " ".join(f"{d}=={nodeps_pins()[_normal(d)]}" for d in nodeps))
    return "; ".join(hints)
