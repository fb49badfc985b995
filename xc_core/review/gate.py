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

Rules on what a change does to a release (review/matters.py reads the figures; a run without a dataset, or without
a cost or compute-share block, has nothing for them to judge, and they stay silent). Losses are percentage points;
-1 turns a rule off.

    max_accuracy_loss = 1.0      # points of top-1 accuracy the target may lose against the reference in the new run
                                 # (without labels: the share of samples whose class changed). Default 1.0; a loss
                                 # the base run already had (as large or larger) is not this change's and passes
    max_accuracy_drop = 0.5      # points of top-1 accuracy (without labels: agreement) lost against the base run.
                                 # Default 0.5 (two samples of digits-mini's 360)
    accuracy_evidence = ["measured", "emulated"]   # the evidence kinds the accuracy rules accept (default these two:
                                 # a run on this host, or a bit-faithful emulation); others are not judged
    max_peak_memory_mb = 2000    # peak resident memory of the run phase, MB. Off by default. Measured only
    max_memory_ratio = 1.25      # peak memory new / base. Default 1.25. Measured only
    max_artifact_mb = 50         # the compiled artifact on disk, MB. Off by default. Measured only (its file sizes)
    max_artifact_ratio = 1.25    # artifact size new / base. Default 1.25. Measured only
    max_load_ratio = 1.5         # load time new / base on the same CPU. Off by default (noisy machines, like the
                                 # other times). Measured only
    share_weight = "macs"        # how the two share rules weigh the accelerated share: "macs" (compute from shapes,
                                 # any evidence the placement has) or "time" (measured time only)
    min_weighted_share = 80      # the least accelerated share, percent. Off by default
    max_weighted_share_loss = 1.0   # points of weighted accelerated share lost against the base run. Default 1.0;
                                 # not counted again for a target whose new fallbacks or ops moved to the CPU
                                 # already failed max_new_fallbacks / max_to_cpu
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields, replace

from ..errors import XcInputError
from ..evidence import ALL as EVIDENCE_KINDS
from ..evidence import MEASURED
from .matters import headline, loss_vs_reference, mb, pct, size

CONFIG_FILE = ".xc-gate.toml"
OFF = -1
SHARE_WEIGHTS = {"macs": "by_macs", "time": "by_time"}     # share_weight → the compute_share figure it reads


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
    # What a change does to a release (the module docstring says each rule's default and the evidence it accepts)
    max_accuracy_loss: float = 1.0    # points lost against the reference, in the new run
    max_accuracy_drop: float = 0.5    # points lost against the base run
    accuracy_evidence: tuple[str, ...] = ("measured", "emulated")
    max_peak_memory_mb: float = OFF
    max_memory_ratio: float = 1.25
    max_artifact_mb: float = OFF
    max_artifact_ratio: float = 1.25
    max_load_ratio: float = OFF
    share_weight: str = "macs"
    min_weighted_share: float = OFF   # percent
    max_weighted_share_loss: float = 1.0
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
        elif key == "accuracy_evidence":
            if not isinstance(value, (list, tuple)) or not all(v in EVIDENCE_KINDS for v in value):
                raise XcInputError(f"{where}: accuracy_evidence must be a list of evidence kinds "
                                   f"({', '.join(EVIDENCE_KINDS)}), not {value!r}")
            value = tuple(value)
        elif key == "share_weight":
            if value not in SHARE_WEIGHTS:
                raise XcInputError(f"{where}: share_weight must be one of {', '.join(SHARE_WEIGHTS)}, not {value!r}")
        elif want is not None and (not isinstance(value, want) or (want is not bool and isinstance(value, bool))):
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
        # The ops that left the accelerator are named above: the share they took with them is no second regression.
        placement_named = any(x["target"] == tid and x["rule"] in ("max_new_fallbacks", "max_to_cpu") for x in out)
        matters_regressions(t, r, add, placement_named)
        if r.checklist_worse:
            for c in t["checklist"]:
                if c["worse"]:
                    add("checklist_worse", f"checklist ({c['id']}) {c['base']} → {c['new']}: {c['detail']}")
    return out


def matters_regressions(t: dict, r: GateRules, add, placement_named: bool = False) -> None:
    """The rules on task accuracy, cost and weighted share for one target of a run diff (its `accuracy`, `cost`
    and `compute_share`: base and new, review/matters.py), each regression through add(rule, what). A diff made
    before these blocks existed has nothing here. `placement_named`: the fallback rules already named the ops that
    left the accelerator, so the share lost against base is not counted again (the minimum share still is)."""
    acc = t.get("accuracy") or {}
    b, n = acc.get("base"), acc.get("new")
    if n and n.get("evidence") in r.accuracy_evidence:
        lost = loss_vs_reference(n)
        # A loss the base run already had is not this change's doing: the gate judges changes, so a target that
        # was past the limit before only fails when it lost more.
        before = loss_vs_reference(b) if b and b.get("evidence") in r.accuracy_evidence else None
        already = before is not None and lost is not None and before[0] >= lost[0] - 1e-9
        if r.max_accuracy_loss != OFF and lost and lost[0] > r.max_accuracy_loss + 1e-9 and not already:
            add("max_accuracy_loss", f"{lost[1]}: −{lost[0]:.1f} points against the reference on "
                                     f"{n.get('samples_run')} samples (allowed −{r.max_accuracy_loss:g}, "
                                     f"{n['evidence']})")
        if b and r.max_accuracy_drop != OFF:
            labelled = b.get("accuracy") is not None and n.get("accuracy") is not None   # read both alike
            (bv, what), (nv, _) = headline(b, labelled), headline(n, labelled)
            if bv is not None and nv is not None and 100 * (bv - nv) > r.max_accuracy_drop + 1e-9:
                samples = "" if b.get("samples") == n.get("samples") else \
                    f"; {b.get('samples')} → {n.get('samples')} samples: another dataset"
                add("max_accuracy_drop", f"{what} {pct(bv)} → {pct(nv)}: −{100 * (bv - nv):.1f} points against "
                                         f"the base run (allowed −{r.max_accuracy_drop:g}, {n['evidence']}{samples})")
    cost = t.get("cost") or {}
    b, n = cost.get("base") or {}, cost.get("new") or {}
    if n.get("evidence") == MEASURED:           # this host's measurements; never a runtime's or compiler's figure
        where = f"measured on {n['host']}" if n.get("host") else MEASURED
        both = b.get("evidence") == MEASURED
        peak, base_peak = n.get("peak_rss_mb"), b.get("peak_rss_mb") if both else None
        if r.max_peak_memory_mb != OFF and peak is not None and peak > r.max_peak_memory_mb:
            add("max_peak_memory_mb", f"peak memory {mb(peak)} (allowed {r.max_peak_memory_mb:g} MB, {where})")
        if r.max_memory_ratio != OFF and peak and base_peak and peak / base_peak > r.max_memory_ratio:
            add("max_memory_ratio", f"peak memory {mb(base_peak)} → {mb(peak)}, {peak / base_peak:.2f}× (allowed "
                                    f"{r.max_memory_ratio:g}×, {where})")
        art, base_art = n.get("artifact_bytes"), b.get("artifact_bytes") if both else None
        if r.max_artifact_mb != OFF and art is not None and art > r.max_artifact_mb * (1 << 20):
            add("max_artifact_mb", f"artifact {size(art)} on disk (allowed {r.max_artifact_mb:g} MB)")
        if r.max_artifact_ratio != OFF and art and base_art and art / base_art > r.max_artifact_ratio:
            add("max_artifact_ratio", f"artifact {size(base_art)} → {size(art)} on disk, {art / base_art:.2f}× "
                                      f"(allowed {r.max_artifact_ratio:g}×)")
        load, base_load = n.get("load_s"), b.get("load_s") if both else None
        same_host = b.get("host") == n.get("host")
        if (r.max_load_ratio != OFF and load and base_load and same_host
                and load / base_load > r.max_load_ratio):
            add("max_load_ratio", f"load time {1000 * base_load:,.0f} → {1000 * load:,.0f} ms, "
                                  f"{load / base_load:.2f}× (allowed {r.max_load_ratio:g}×, {where})")
    share = t.get("compute_share") or {}
    way = SHARE_WEIGHTS[r.share_weight]
    b, n = (share.get("base") or {}).get(way) or {}, (share.get("new") or {}).get(way) or {}
    # By time the weights are measured times: nothing else is a time. By MACs any evidence the placement has.
    if n.get("share") is not None and (way != "by_time" or n.get("evidence") == MEASURED):
        words = f"accelerated share by {'MACs' if way == 'by_macs' else 'measured time'}"
        if r.min_weighted_share != OFF and 100 * n["share"] < r.min_weighted_share - 1e-9:
            add("min_weighted_share", f"{words} {pct(n['share'])} (at least {r.min_weighted_share:g}% wanted, "
                                      f"{n.get('evidence')})")
        if (r.max_weighted_share_loss != OFF and b.get("share") is not None and not placement_named
                and 100 * (b["share"] - n["share"]) > r.max_weighted_share_loss + 1e-9):
            add("max_weighted_share_loss", f"{words} {pct(b['share'])} → {pct(n['share'])}: "
                                           f"−{100 * (b['share'] - n['share']):.1f} points (allowed "
                                           f"−{r.max_weighted_share_loss:g}, {n.get('evidence')})")


def fallback_place(f: dict) -> str:
    """A fallback of the diff, in the words the gate and the diff both use: "GELU at layers.1.mlp.act_fn", with
    "× 2" when the group holds more than one node."""
    count = f.get("count") or 1
    return f"{f['op_type']} at {f['module_path'] or '(root)'}" + (f" × {count}" if count > 1 else "")
