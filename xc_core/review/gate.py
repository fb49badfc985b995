"""The CI gate: which changes between a baseline run and a new run count as regressions.

Rules have defaults that catch what ships badly (a new CPU fallback, an op leaving the accelerator, drift that
grew, a checklist verdict that got worse, a target that stopped compiling) and leave alone what is a matter of
taste (fusions, op counts, precision choices) unless the repository asks for them. They come from, in order of
precedence: command-line flags, a TOML file in the repository under test (`.xc-gate.toml`, or `--config FILE`),
the defaults. Per-target overrides sit in `[target."ort-nnapi"]` tables.

    # .xc-gate.toml
    max_new_fallbacks = 0        # per target; -1 turns the rule off
    max_drift_ratio = 1.5        # new rel L2 / base rel L2, per output
    drift_floor = 1e-4           # drift below this rel L2 is rounding noise, never a regression
    max_slower_nodes = 0         # compiled nodes slower beyond the runs' noise (same CPU); off by default
    max_share_loss = 0           # fleet matrices: accelerated-share points a cell may lose
    max_time_ratio = 1.5         # fleet matrices: a cell's time new / base, beyond noise (same CPU); off by default
    [target."ort-cpu-int8"]
    max_drift_ratio = 3
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields, replace

from ..errors import XcInputError

CONFIG_FILE = ".xc-gate.toml"
OFF = -1


@dataclass(frozen=True)
class GateRules:
    max_new_fallbacks: int = 0        # CPU fallbacks added on a target
    max_to_cpu: int = 0               # source ops moved from an accelerator to the CPU
    max_drift_ratio: float = 1.5      # per output; only where the new drift is at least drift_floor
    drift_floor: float = 1e-4
    max_lost_fusions: int = OFF       # fusion instances lost
    max_op_increase: int = OFF        # compiled ops added
    max_precision_changes: int = OFF  # source ops whose precision changed
    # Compiled nodes slower beyond the runs' noise: 1.5× or more past the runs' spread and the shift every node
    # shared (analysis/node_time.py's test; same CPU only). Off by default: a shared CI machine's times are noisy
    # even so; a repository with a quiet runner turns it on with 0.
    max_slower_nodes: int = OFF
    # Fleet matrices only (xc_core/fleet/diff.py): percentage points of accelerated share a cell may lose, and its
    # measured time new / base on the same CPU (off by default, like max_slower_nodes).
    max_share_loss: float = 0.0
    max_time_ratio: float = OFF
    checklist_worse: bool = True      # a verdict that went pass → warn / fail, or warn → fail
    status_worse: bool = True         # a target that compiled and no longer does
    targets: tuple[str, ...] = ()     # gate only these targets (default: every target in both runs)


def load_rules(config: str | None = None, overrides: dict | None = None, search_dir: str = ".") \
        -> tuple[GateRules, dict[str, GateRules]]:
    """(rules for every target, per-target rules). `config` None looks for .xc-gate.toml in `search_dir`."""
    data: dict = {}
    path = config or os.path.join(search_dir, CONFIG_FILE)
    if config or os.path.isfile(path):
        data = _read_toml(path)
    per_target_data = data.pop("target", {}) or {}
    base = _apply(GateRules(), data, path)
    base = _apply(base, {k: v for k, v in (overrides or {}).items() if v is not None}, "the command line")
    per_target = {}
    if not isinstance(per_target_data, dict):
        raise XcInputError(f"{path}: [target] must be tables of rules by target id")
    for tid, values in per_target_data.items():
        per_target[tid] = _apply(base, values or {}, f"{path} [target.\"{tid}\"]")
    return base, per_target


def _read_toml(path: str) -> dict:
    import tomllib
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise XcInputError(f"--config {path}: no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise XcInputError(f"{path}: not valid TOML ({e})") from None


def _apply(rules: GateRules, values: dict, where: str) -> GateRules:
    known = {f.name: f for f in fields(GateRules)}
    changes = {}
    for key, value in values.items():
        if key not in known:
            raise XcInputError(f"{where}: unknown gate rule {key!r} (known: {', '.join(sorted(known))})")
        want = {"int": int, "float": (int, float), "bool": bool}.get(str(known[key].type))
        if key == "targets":
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                raise XcInputError(f"{where}: targets must be a list of target ids")
            value = tuple(value)
        elif want is not None and (not isinstance(value, want) or (want is int and isinstance(value, bool))):
            raise XcInputError(f"{where}: {key} must be {known[key].type}, not {value!r}")
        changes[key] = value
    return replace(rules, **changes)


def regressions(diff: dict, rules: GateRules, per_target: dict[str, GateRules] | None = None) -> list[dict]:
    """Every change the rules count as a regression: {target, rule, what}."""
    out = []
    for tid, t in diff["targets"].items():
        r = (per_target or {}).get(tid, rules)
        if r.targets and tid not in r.targets:
            continue

        def add(rule, what):
            out.append({"target": tid, "rule": rule, "what": what})
        if r.status_worse and t["status"]["base"] == "ok" and t["status"]["new"] != "ok":
            add("status_worse", f"{t['status']['base']} → {t['status']['new']}")
        # New as the diff judges it: a source op that ran on the accelerator in base, or is new and falls back
        # (review/diff.py _fallbacks) — an op replaced on the CPU by another on the CPU is none. One name per op
        # and place, with its count.
        added = t["fallbacks"]["added"]
        new_count = sum(f.get("count") or 1 for f in added)
        if r.max_new_fallbacks != OFF and new_count > r.max_new_fallbacks:
            names = ", ".join(f"{fallback_place(f)} ({f['reason'] or 'no reason'})" for f in added)
            add("max_new_fallbacks", f"{new_count} new CPU fallback(s) (allowed {r.max_new_fallbacks}): {names}")
        to_cpu = [c for c in t["backend_changes"] if c["to_cpu"]]
        if r.max_to_cpu != OFF and len(to_cpu) > r.max_to_cpu:
            add("max_to_cpu", f"{len(to_cpu)} source op(s) left the accelerator: " +
                ", ".join(f"{c['op_type']} at {c['module_path'] or '(root)'} {c['base']} → {c['new']}"
                          for c in to_cpu))
        # Drift as the diff measured it: a target that compiled the program xc's ONNX → PyTorch route made is
        # compared against that program, so the route's own error never fails it. A figure that became implausible
        # (NaN, or off by orders of magnitude) fails even where no ratio can be taken.
        for x in t["drift"]:
            ratio = x["ratio"]
            became = (x.get("implausible") or {}).get("new") and not (x.get("implausible") or {}).get("base")
            if r.max_drift_ratio == OFF or ratio is None:
                continue
            if became:
                base = "—" if x["base"] is None else f"{x['base']:.3g}"
                add("max_drift_ratio", f"drift of '{x['output']}' became implausible (rel L2 {base} before): "
                                       f"{x['implausible']['new']} ({x['evidence']})")
            elif ratio > r.max_drift_ratio and x["new"] is not None and x["new"] >= r.drift_floor:
                grew = "∞" if math.isinf(ratio) else f"{ratio:.2f}"
                add("max_drift_ratio", f"drift of '{x['output']}' grew {grew}× (rel L2 {x['base']:.3g} → "
                                       f"{x['new']:.3g}; allowed {r.max_drift_ratio:g}×, {x['evidence']})")
        lost = sum(f["base"] - f["new"] for f in t["fusions"]["lost"])
        if r.max_lost_fusions != OFF and lost > r.max_lost_fusions:
            add("max_lost_fusions", f"{lost} fusion instance(s) lost: " +
                ", ".join(f["pattern"] for f in t["fusions"]["lost"]))
        b, n = t["op_count"]["base"], t["op_count"]["new"]
        if r.max_op_increase != OFF and b is not None and n is not None and n - b > r.max_op_increase:
            add("max_op_increase", f"compiled ops {b} → {n} (allowed +{r.max_op_increase})")
        changes = t["precision_changes"]
        if r.max_precision_changes != OFF and len(changes) > r.max_precision_changes:
            add("max_precision_changes", f"{len(changes)} source op(s) changed precision: " +
                ", ".join(f"{c['op_type']} {c['base']} → {c['new']}" for c in changes[:10]))
        # Slower beyond the runs' noise only (analysis/node_time.time_change): a time within noise, or from a run
        # that kept no per-run samples (spread unknown), is never a regression.
        # A compiler's estimates (estimated-compiler) are compared exactly instead: slower by more than 1 %.
        slower = (t.get("time") or {}).get("slower") or []
        how = ("by the compiler's estimate (estimated-compiler)"
               if (t.get("time") or {}).get("evidence") == "estimated-compiler" else "beyond the runs' noise")
        if r.max_slower_nodes != OFF and len(slower) > r.max_slower_nodes:
            add("max_slower_nodes", f"{len(slower)} compiled node(s) got slower {how} (allowed "
                                    f"{r.max_slower_nodes}): " +
                ", ".join(f"{x['op_type']} at {x['module_path'] or '(root)'} {x['base_us']:,.0f} → "
                          f"{x['new_us']:,.0f} µs" for x in slower[:10]))
        if r.checklist_worse:
            for c in t["checklist"]:
                if c["worse"]:
                    add("checklist_worse", f"checklist ({c['id']}) {c['base']} → {c['new']}: {c['detail']}")
    return out


def fallback_place(f: dict) -> str:
    """A fallback of the diff, in the words the gate and the diff both use: "GELU at layers.1.mlp.act_fn", with
    "× 2" when the group holds more than one node."""
    count = f.get("count") or 1
    return f"{f['op_type']} at {f['module_path'] or '(root)'}" + (f" × {count}" if count > 1 else "")
