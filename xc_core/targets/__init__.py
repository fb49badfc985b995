"""Targets by stable id (the ids the CLI, the report and the dashboard use). Importing this package registers
every target module."""
from __future__ import annotations

from ..errors import XcInputError
from . import ort_cpu, ort_mobile, ort_int8, coreml, openvino_cpu, inductor_cpu, reference  # noqa: F401,I001  (registration order = display order)
from . import executorch  # noqa: F401,E402,I001  (after the others: the ExecuTorch columns come last)
from . import coreai  # noqa: F401,E402,I001  (Core AI after ExecuTorch: Apple's newest stack last)
from . import litert  # noqa: F401,E402,I001  (LiteRT: Android's most shipped runtime, newest in xc)
from .base import ERROR, OK, REGISTRY, UNAVAILABLE, Target, TargetResult
from .execute import execute_target

REFERENCE_IDS = ("torch", "onnx-reference", "tflite-reference")


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


def split_target_list(text: str) -> list[str]:
    """'ort-cpu,ort-cpu[level=basic,x=1],coreml-ane' → the three entries: commas inside brackets belong to the
    entry's options."""
    entries, depth, cur = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            entries.append(cur.strip())
            cur = ""
        else:
            cur += ch
    entries.append(cur.strip())
    return [e for e in entries if e]


def parse_target_spec(spec: str) -> tuple[str, dict]:
    """'openvino-cpu[precision=f32]' → ('openvino-cpu', {'inference_precision': 'f32'}): a target id and its
    options, names resolved through the target's aliases and values checked against what it accepts."""
    spec = spec.strip()
    tid, opts = spec, {}
    if "[" in spec:
        if not spec.endswith("]"):
            raise XcInputError(f"target '{spec}': expected ID[KEY=VALUE,...], e.g. ort-cpu[level=basic]")
        tid, body = spec[:-1].split("[", 1)
        for part in split_target_list(body):
            if "=" not in part:
                raise XcInputError(f"target '{spec}': option '{part}' is not KEY=VALUE, e.g. ort-cpu[level=basic]")
            key, value = (x.strip() for x in part.split("=", 1))
            opts[key] = _parse_value(value)
    tid = tid.strip()
    if tid not in REGISTRY:
        raise XcInputError(f"unknown target '{tid}'; accepted: {', '.join(target_ids())} or all")
    return tid, REGISTRY[tid].check_options(opts, where=f"target '{spec}'")


def make_target(spec: str, **options) -> Target:
    """A target from its id or a variant spec ('ort-cpu[level=basic]'); keyword options are added (the spec's
    own options win)."""
    tid, opts = parse_target_spec(spec)
    extra = REGISTRY[tid].check_options(options, where=f"options for {tid}") if options else {}
    return REGISTRY[tid](**{**extra, **opts})


def parse_target_list(text: str) -> list[str]:
    """--targets: ids and variants ('ort-cpu,ort-cpu[level=basic]') or all. Entries come back as identities (the
    same target with the same options listed twice is one column)."""
    if text.strip() == "all":
        return target_ids()
    specs = split_target_list(text)
    if not specs:
        raise XcInputError(f"--targets is empty; accepted: {', '.join(target_ids())} or all, and variants "
                           "such as ort-cpu[level=basic]")
    return list(dict.fromkeys(make_target(s).identity for s in specs))


def base_id(identity: str) -> str:
    """'ort-cpu[level=basic]' → 'ort-cpu'."""
    return identity.split("[", 1)[0]


def parse_target_options(flags: list[str] | None, targets: list[str]) -> dict[str, dict]:
    """--option TARGET.KEY=VALUE (repeatable): TARGET is an id (every listed variant of it) or one listed
    variant; options become part of the target's identity in the report."""
    out: dict[str, dict] = {}
    listed = set(targets) | {base_id(t) for t in targets}
    for f in flags or []:
        try:
            lhs, value = f.split("=", 1)
            tid, key = lhs.rsplit(".", 1)
        except ValueError:
            raise XcInputError(f"--option '{f}': expected TARGET.KEY=VALUE, e.g. ort-nnapi.fp16=true") from None
        if tid not in listed:
            raise XcInputError(f"--option '{f}': target '{tid}' is not among --targets ({', '.join(targets)})")
        checked = REGISTRY[base_id(tid)].check_options({key: _parse_value(value)}, where=f"--option '{f}'")
        out.setdefault(tid, {}).update(checked)
    return out


def make_targets(specs: list[str], target_options: dict[str, dict] | None = None) -> list[Target]:
    """The targets of one analysis: each spec with the options given for its id, then for the spec itself, then
    the spec's own; two entries that end as the same identity are one."""
    target_options = target_options or {}
    made, seen = [], set()
    for spec in specs:
        tid, own = parse_target_spec(spec)
        t = make_target(tid, **{**target_options.get(tid, {}), **target_options.get(spec, {}), **own})
        if t.identity not in seen:
            seen.add(t.identity)
            made.append(t)
    return made


def worker_modules(specs: list[str] | None) -> list[str]:
    """The libraries these targets' workers import beyond the capture's (every target's for None or [])."""
    return sorted({m for t in (specs or target_ids()) for m in getattr(REGISTRY.get(base_id(t)), "worker_modules", ())})


def takes_programs(specs: list[str]) -> bool:
    """Whether any of these targets compiles a PyTorch program (an ONNX source then goes through xc's ONNX →
    PyTorch route once, in prepare)."""
    return any(REGISTRY[tid].takes_program for tid, _ in map(parse_target_spec, specs) if tid in REGISTRY)


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


__all__ = ["parse_target_options", "parse_target_spec", "split_target_list", "make_targets", "base_id", "REGISTRY",
           "Target", "TargetResult", "execute_target", "make_target", "target_ids", "parse_target_list", "OK", "ERROR",
           "UNAVAILABLE", "REFERENCE_IDS"]
