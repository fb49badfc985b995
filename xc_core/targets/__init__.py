"""Targets by stable id (the ids the CLI, the report and the dashboard use). Importing this package registers
every target module."""
from __future__ import annotations

from ..errors import XcInputError, printable_line
from . import ort_cpu, ort_mobile, ort_int8, coreml, openvino_cpu, inductor_cpu, reference  # noqa: F401,I001  (registration order = display order)
from . import executorch  # noqa: F401,E402,I001  (after the others: the ExecuTorch columns come last)
from . import coreai  # noqa: F401,E402,I001  (Core AI after ExecuTorch: Apple's newest stack last)
from . import litert  # noqa: F401,E402,I001  (LiteRT: Android's most shipped runtime, newest in xc)
from .base import ERROR, OK, REGISTRY, UNAVAILABLE, Target, TargetResult
from .execute import execute_target
from .options import split_list, split_spec

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


def default_target_ids() -> list[str]:
    """What a run that names no targets compiles: every compiled target but the deprecated ones (`deprecated` on
    the target class), in display order. `--targets all` is still every one."""
    return [t for t in target_ids() if REGISTRY[t].in_default_set()]


def split_target_list(text: str) -> list[str]:
    """'ort-cpu,ort-cpu[level=basic,x=1],coreml-ane' → the three entries: commas inside brackets belong to the
    entry's options."""
    return split_list(text)


def parse_target_spec(spec: str) -> tuple[str, dict]:
    """'openvino-cpu[precision=f32]' → ('openvino-cpu', {'inference_precision': 'f32'}): a target id and its
    options, names resolved through the target's aliases and each value read as its option's type (the target's
    Options dataclass). The one place an identity string becomes options again."""
    tid, opts = split_spec(spec)
    if tid not in REGISTRY:
        raise XcInputError(f"unknown target '{printable_line(tid)}'; accepted: {', '.join(target_ids())} or all")
    return tid, REGISTRY[tid].check_options(opts, where=f"target '{printable_line(spec)}'")


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
            raise XcInputError(f"--option '{printable_line(f)}': expected TARGET.KEY=VALUE, e.g. ort-nnapi.fp16=true") from None
        if tid not in listed:
            raise XcInputError(f"--option '{printable_line(f)}': target '{printable_line(tid)}' is not among --targets ({', '.join(targets)})")
        checked = REGISTRY[base_id(tid)].check_options({key: value}, where=f"--option '{printable_line(f)}'")
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


def steps_captions() -> list[str]:
    """Each family's sentence on where its steps come from (the Stages page), once per family, in display order."""
    return list(dict.fromkeys(cls.steps_caption for cls in REGISTRY.values() if cls.steps_caption))


def shipped_together() -> list[tuple[str, str]]:
    """Pairs of targets users ship together, as the targets declare them (`shipped_with`), by rank: the first are
    the Overview's default comparisons. A pair is declared on one of its two targets (its own class, not a base)."""
    ranked = [(rank, tid, other) for tid, cls in REGISTRY.items()
              for other, rank in vars(cls).get("shipped_with", {}).items()]
    return [(tid, other) for _, tid, other in sorted(ranked, key=lambda r: r[0])]


def artifact_notes(target_id: str) -> dict[str, str]:
    """What each of a target's artifacts is, by file name, where the name alone does not say ({} for an id that is
    not registered: a report of a plug-in opened without it)."""
    cls = REGISTRY.get(base_id(target_id))
    return dict(cls.artifact_notes) if cls is not None else {}


def worker_modules(specs: list[str] | None) -> list[str]:
    """The libraries these targets' workers import beyond the capture's (every target's for None or [])."""
    return sorted({m for t in (specs or target_ids()) for m in getattr(REGISTRY.get(base_id(t)), "worker_modules", ())})


def takes_programs(specs: list[str]) -> bool:
    """Whether any of these targets compiles a PyTorch program (an ONNX source then goes through xc's ONNX →
    PyTorch route once, in prepare)."""
    return any(REGISTRY[tid].takes_program for tid, _ in map(parse_target_spec, specs) if tid in REGISTRY)


__all__ = ["parse_target_options", "parse_target_spec", "split_target_list", "make_targets", "base_id", "REGISTRY",
           "Target", "TargetResult", "execute_target", "make_target", "target_ids", "parse_target_list", "OK", "ERROR",
           "UNAVAILABLE", "REFERENCE_IDS", "steps_captions", "shipped_together", "artifact_notes",
           "default_target_ids"]
