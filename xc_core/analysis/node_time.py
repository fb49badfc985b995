"""Where the time goes: a target's measured time per compiled node (each node's `measured_us`, from its runtime's
profiler) summed per backend and per op type, its costliest nodes, and the cost of each CPU fallback; and whether
a time changed between two runs by more than the runs' own noise.

Works on the report's plain node dicts, so the report build, the pages, Markdown/HTML and the diff read the same
figures. Times are this host's CPU (the `node_times` block names it), not a phone's: what they show is the shape of
the profile — which nodes dominate, what a fallback costs next to the rest — not the device's latency.

Noise. Each figure is the median of a few profiled runs (XC_PROFILE_RUNS, default 5); `node_times.samples_us`
keeps every run's sample. Between two analyses the same node moves by far more than within one: on a shared
2-core host every XNNPACK operator of one analysis took ~29 µs more than in the other (1 → 30 µs), and every
OpenVINO layer half as long. So a time is "slower" only by `time_change`'s test (NOISE_TEST says it in words): the
medians differ by a material ratio and an absolute floor, the runs' interquartile ranges do not overlap, and the
change is more than the target-wide shift every node of the run shared (a busier host moves every node together; a
compiler's decision moves its own nodes). Without per-run samples on both sides (a report from an older xc) the
spread is unknown and the time is never a regression on its own.
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict

TOP_NODES = 10


def time_summary(nodes: list[dict]) -> dict:
    """Total timed µs, the share per backend and per op type (largest first), and the TOP_NODES costliest nodes
    with their share of the total."""
    def us(n: dict):
        # a node's time: measured, or a vendor compiler's estimate (a target has one kind: node_times says which)
        return n.get("measured_us") if n.get("measured_us") is not None else n.get("estimated_us")
    timed = [n for n in nodes if us(n) is not None]
    total = sum(us(n) for n in timed)
    by_backend: dict[str, float] = defaultdict(float)
    by_op: dict[str, float] = defaultdict(float)
    for n in timed:
        by_backend[n.get("backend") or "unknown"] += us(n)
        by_op[n["op_type"]] += us(n)

    def shares(table: dict[str, float]) -> list[dict]:
        return [{"key": k, "us": round(v, 3), "share": round(v / total, 4) if total else 0.0}
                for k, v in sorted(table.items(), key=lambda kv: -kv[1])]

    top = sorted(timed, key=lambda n: -us(n))[:TOP_NODES]
    return {"timed_us": round(total, 3),
            "by_backend": shares(by_backend), "by_op_type": shares(by_op),
            "top": [{"node": n["id"], "op_type": n["op_type"], "backend": n.get("backend"),
                     "precision": n.get("precision"), "module_path": n.get("module_path"),
                     "fallback": bool(n.get("fallback")), "us": us(n),
                     "share": round(us(n) / total, 4) if total else 0.0} for n in top]}


def fallback_costs(nodes: list[dict], boundary_items: list[dict], bandwidth_gb_s: float,
                   transition_overhead_ms: float) -> dict[str, dict]:
    """Each fallback node's two costs, kept apart because they are different kinds of figure: its kernel's
    measured time (`kernel_us`, None when not timed) and the copies of the accelerator ↔ CPU boundaries it sits on
    as the cost model assumes them (`copies_us_assumed`: bytes / bandwidth + the overhead per transition — this
    host makes no such copy, and both parameters are assumptions), with the `transitions` it counts. A boundary
    shared by two fallback nodes counts for each. Never summed: a measured kernel of 5 µs plus an assumed 400 µs
    would rank a node by the constant."""
    copies: dict[str, float] = defaultdict(float)
    transitions: dict[str, int] = defaultdict(int)
    for b in boundary_items:
        us = (b.get("bytes") or 0) / (bandwidth_gb_s * 1e9) * 1e6 + transition_overhead_ms * 1e3
        for nid in {b["from_node"], *b["consumers"]}:
            copies[nid] += us
            transitions[nid] += 1
    return {n["id"]: {"kernel_us": n.get("measured_us") if n.get("measured_us") is not None else n.get("estimated_us"), "copies_us_assumed": round(copies.get(n["id"], 0.0), 3),
                      "transitions": transitions.get(n["id"], 0)}
            for n in nodes if n.get("fallback")}


# ---- run-to-run spread ------------------------------------------------------------------------------------------
def spread(samples: list[float] | None) -> dict | None:
    """{median, q1, q3, min, max, n} of per-run samples (µs); quartiles by linear interpolation between the
    samples (statistics.quantiles, "inclusive"). None without samples."""
    values = sorted(float(v) for v in samples or [])
    if not values:
        return None
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
    return {"median": round(median, 3), "q1": round(q1, 3), "q3": round(q3, 3),
            "min": values[0], "max": values[-1], "n": len(values)}


def per_run_totals(node_samples: dict[str, list[float]]) -> list[float] | None:
    """Each profiled run's timed total (its samples of every node, summed), when every node has a sample in every
    run; None when the runs timed different nodes (a profiler that missed a kernel in one run), whose sums would
    not compare."""
    lengths = {len(v) for v in node_samples.values()}
    if len(lengths) != 1 or not node_samples:
        return None
    return [round(sum(run), 3) for run in zip(*node_samples.values())]


# ---- is it slower, or noise? --------------------------------------------------------------------------------------
# A material change: the medians' ratio at least SLOWER_RATIO and their difference at least the floor —
# max(SLOWER_MIN_US, SLOWER_MIN_SHARE of the run's timed total). The floor is there for µs-scale nodes, where the
# profilers' 1 µs resolution and a thread's wake-up dominate: 4 → 8 µs is 2× and means nothing.
SLOWER_RATIO = 1.5
SLOWER_MIN_US = 20.0
SLOWER_MIN_SHARE = 0.02
# The target-wide shift is taken from at least this many nodes timed in both runs (fewer: no shift is assumed).
SHIFT_MIN_NODES = 4
# A run profiled while its threads waited for a CPU more than this share of their runnable time (node_times
# `cpu_wait_share`, from the kernel's schedstat) was profiled on a busy host: its times are not judged. Measured on
# a shared 2-core host, tts-mini's Inductor kernels: ~1 ms a run at a share of 0.21, 330 ms a run — every run,
# with an interquartile range as tight as a quiet one's — at 0.62. No spread or shift tells that from a change.
HOST_BUSY_SHARE = 0.25

SLOWER, FASTER, WITHIN_NOISE, UNCHANGED, SPREAD_UNKNOWN = "slower", "faster", "within noise", "unchanged", \
    "spread unknown"

NOISE_TEST = ("a time is called slower (or faster) only when both runs kept their per-run samples, neither was "
              "profiled on a busy host (its threads waiting for a CPU over {busy:.0%} of their runnable time), the "
              "two runs' interquartile ranges do not overlap, and the new median is at least {ratio:g}× and {floor} "
              "µs past what the shift every timed node of the target shared predicts (base × their median ratio, or "
              "base + their median increase, whichever is further); otherwise within noise — or spread unknown "
              "where a run kept no samples, never a regression on time alone")


def noise_test(ratio: float = SLOWER_RATIO, floor: str | None = None) -> str:
    """NOISE_TEST with its thresholds filled in (the floor in words when it depends on the run)."""
    return NOISE_TEST.format(ratio=ratio, busy=HOST_BUSY_SHARE,
                             floor=floor or f"max({SLOWER_MIN_US:g}, {100 * SLOWER_MIN_SHARE:g}% of the run's timed "
                                            "total)")


def host_busy(base_wait: float | None, new_wait: float | None) -> str | None:
    """Why two runs' times cannot be compared for a busy host (a run's `cpu_wait_share` over HOST_BUSY_SHARE), or
    None. A share the run did not record (an older xc, a kernel without schedstat) says nothing either way."""
    busy = [(side, w) for side, w in (("base", base_wait), ("new", new_wait))
            if isinstance(w, (int, float)) and w > HOST_BUSY_SHARE]
    if not busy:
        return None
    return ("the host was busy while profiling the " + " and the ".join(side for side, _ in busy) + " run (its "
            "threads waited for a CPU " + " / ".join(f"{w:.0%}" for _, w in busy) + " of their runnable time, over "
            f"{HOST_BUSY_SHARE:.0%})")


def slower_floor(timed_us: float | None) -> float:
    """The absolute floor a node's change must pass in a run whose compiled nodes took `timed_us` in all."""
    return max(SLOWER_MIN_US, SLOWER_MIN_SHARE * (timed_us or 0.0))


def target_shift(pairs: list[tuple[list[float], list[float]]]) -> dict | None:
    """The shift every node of a target shared between two runs, from (base samples, new samples) of each node
    timed in both: {"ratio": the median of the nodes' median ratios, "increase_us": the median of their median
    differences, "nodes"}. Nodes that took 0 in both (a runtime's no-op: a reshape in place) say nothing and are
    left out; None with fewer than SHIFT_MIN_NODES nodes."""
    ratios, increases = [], []
    for b, n in pairs:
        bm, nm = statistics.median(b), statistics.median(n)
        if bm == 0 and nm == 0:
            continue
        increases.append(nm - bm)
        if bm > 0:
            ratios.append(nm / bm)
    if len(increases) < SHIFT_MIN_NODES:
        return None
    return {"ratio": round(statistics.median(ratios), 4) if ratios else 1.0,
            "increase_us": round(statistics.median(increases), 3), "nodes": len(increases)}


def figure(us: float | None, samples: list[float] | None) -> dict | None:
    """A time as `time_change` takes it: the spread of its per-run samples, else its median alone (a run that
    kept none), else None (not timed)."""
    return spread(samples) or ({"median": us} if us is not None else None)


def time_change(b: dict | None, n: dict | None, floor_us: float, shift: dict | None = None,
                min_ratio: float = SLOWER_RATIO, nodes: int = 1, busy: str | None = None) -> dict:
    """One time in two runs, judged by the noise test. `b` / `n`: its `figure` in base and new ({median, q1,
    q3, …}, or {median} alone where a run kept no samples). Returns {base, new, ratio (new / base medians),
    expected_us (what the shared shift predicts for the new run), verdict, why}: `verdict` is SLOWER or FASTER
    (beyond noise), UNCHANGED (below the material ratio or floor), WITHIN_NOISE (material, but inside the runs'
    spread or the shared shift, or `busy`: why the host was, from `host_busy`) or SPREAD_UNKNOWN (material, and a
    run kept no samples). `nodes` is how many nodes the time sums (a whole run: the additive shift counts once per
    node)."""
    out = {"base": b, "new": n, "ratio": None, "expected_us": None, "verdict": UNCHANGED, "why": None}
    if b is None or n is None:
        out["why"] = "not timed in both runs"
        return out
    bm, nm = b["median"], n["median"]
    out["ratio"] = (round(nm / bm, 4) if bm else (None if nm == 0 else math.inf))
    grew = nm >= bm
    ratio = (nm / bm if bm else math.inf) if grew else (bm / nm if nm else math.inf)
    if ratio < min_ratio or abs(nm - bm) < floor_us:
        out["why"] = f"below {min_ratio:g}× or {floor_us:,.0f} µs"
        return out
    if "q1" not in b or "q1" not in n:
        out["verdict"], out["why"] = SPREAD_UNKNOWN, ("the " + ("base" if "q1" not in b else "new")
                                                      + " run kept no per-run samples")
        return out
    if busy:
        out["verdict"], out["why"] = WITHIN_NOISE, busy
        return out
    if (n["q1"] <= b["q3"]) if grew else (n["q3"] >= b["q1"]):
        out["verdict"], out["why"] = WITHIN_NOISE, (f"the runs' interquartile ranges overlap ({_iqr(b)} / "
                                                    f"{_iqr(n)} µs)")
        return out
    # What the shift every node shared predicts: the further of the multiplicative and additive readings, in the
    # direction of the change (a shift the other way predicts nothing here).
    s_ratio, s_add = (shift or {}).get("ratio", 1.0), (shift or {}).get("increase_us", 0.0) * nodes
    if grew:
        expected = max(bm * max(s_ratio, 1.0), bm + max(s_add, 0.0))
        beyond = nm >= min_ratio * expected and nm - expected >= floor_us
    else:
        expected = min(bm * min(s_ratio, 1.0), bm + min(s_add, 0.0))
        beyond = nm * min_ratio <= expected and expected - nm >= floor_us
    out["expected_us"] = round(expected, 3)
    if not beyond:
        out["verdict"], out["why"] = WITHIN_NOISE, (f"every timed node of the target moved together (median "
                                                    f"×{s_ratio:.2f}, {s_add / nodes:+,.0f} µs each): the host, "
                                                    "not a compiler's decision")
        return out
    out["verdict"] = SLOWER if grew else FASTER
    out["why"] = f"IQR {_iqr(b)} → {_iqr(n)} µs" + (f", {expected:,.0f} µs expected from the shift every node "
                                                    "shared" if expected != bm else "")
    return out


def _iqr(s: dict) -> str:
    return f"{s['q1']:,.0f}–{s['q3']:,.0f}"


def spread_text(s: dict | None) -> str:
    """"IQR 960–1,271 µs over 5 runs", or "" without samples (a report from an older xc)."""
    if not s or "q1" not in s:
        return ""
    return f"IQR {_iqr(s)} µs over {s['n']} runs"
