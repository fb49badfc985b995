"""Targets by stable id (the ids the CLI, the report and the dashboard use). Importing this package registers
every target module."""
from __future__ import annotations

from ..errors import XcInputError
from . import ort_cpu, ort_mobile, ort_int8, coreml, openvino_cpu, reference  # noqa: F401,I001  (registration order = display order)
from .base import ERROR, OK, REGISTRY, UNAVAILABLE, Target, TargetResult, execute_target

REFERENCE_IDS = ("torch", "onnx-reference")


def load_plugins() -> None:
    """Modules named in XC_PLUGINS (comma-separated) register more targets when imported; workers import a
    target's module by name, so a plug-in target runs isolated like the built-in ones."""
    import importlib
    import os
    for name in filter(None, (m.strip() for m in os.environ.get("XC_PLUGINS", "").split(","))):
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise XcInputError(f"XC_PLUGINS: cannot import '{name}' ({e})") from None


load_plugins()


def target_ids() -> list[str]:
    """Compiled targets (references excluded), in display order."""
    return [t for t in REGISTRY if t not in REFERENCE_IDS]


def make_target(target_id: str, **options) -> Target:
    if target_id not in REGISTRY:
        raise XcInputError(f"unknown target '{target_id}'; accepted: {', '.join(target_ids())} or all")
    return REGISTRY[target_id](**options)


def parse_target_list(text: str) -> list[str]:
    if text.strip() == "all":
        return target_ids()
    ids = [t.strip() for t in text.split(",") if t.strip()]
    if not ids:
        raise XcInputError(f"--targets is empty; accepted: {', '.join(target_ids())} or all")
    for t in ids:
        make_target(t)
    return list(dict.fromkeys(ids))


def parse_target_options(flags: list[str] | None, targets: list[str]) -> dict[str, dict]:
    """--option TARGET.KEY=VALUE (repeatable): options become part of the target's identity in the report."""
    out: dict[str, dict] = {}
    for f in flags or []:
        try:
            lhs, value = f.split("=", 1)
            tid, key = lhs.rsplit(".", 1)
        except ValueError:
            raise XcInputError(f"--option '{f}': expected TARGET.KEY=VALUE, e.g. ort-nnapi.fp16=true") from None
        if tid not in targets:
            raise XcInputError(f"--option '{f}': target '{tid}' is not among --targets ({', '.join(targets)})")
        allowed = getattr(REGISTRY[tid], "option_names", ())
        if key not in allowed:
            raise XcInputError(f"--option '{f}': {tid} takes no option '{key}'"
                               + (f"; it takes {', '.join(allowed)}" if allowed else "; it takes none"))
        out.setdefault(tid, {})[key] = _parse_value(value)
    return out


def _parse_value(text: str):
    low = text.strip().lower()
    if low in ("true", "on", "yes", "1"):
        return True
    if low in ("false", "off", "no", "0"):
        return False
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


__all__ = ["parse_target_options", "REGISTRY", "Target", "TargetResult", "execute_target", "make_target", "target_ids",
           "parse_target_list", "OK", "ERROR", "UNAVAILABLE", "REFERENCE_IDS"]
