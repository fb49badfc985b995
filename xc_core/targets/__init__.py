"""Targets by stable id (DESIGN.md). Importing this package registers every target module."""
from __future__ import annotations

from ..errors import XcInputError
from . import ort_cpu, ort_mobile, ort_int8, openvino_cpu, reference  # noqa: F401,I001  (registration order = display order)
from .base import ERROR, OK, REGISTRY, UNAVAILABLE, Target, TargetResult, execute_target

REFERENCE_IDS = ("torch", "onnx-reference")


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


__all__ = ["REGISTRY", "Target", "TargetResult", "execute_target", "make_target", "target_ids",
           "parse_target_list", "OK", "ERROR", "UNAVAILABLE", "REFERENCE_IDS"]
