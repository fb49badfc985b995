"""Culprit search: the smallest run of consecutive ops (captured execution order) that, compiled by the target
while the reference computes everything else, reproduces the target's output drift.

A trial compiles one range of ops as a sub-program (culprit/regions.py), feeds it the reference's values at its
inputs, and lets the reference finish the model from the range's outputs; its output drift is measured against
the reference's outputs as the target's is. The whole range first: that is the target's own drift as this
machinery measures it (the baseline). A range *explains* the drift when its output drift is at least SHARE of
the baseline's (when the baseline's outputs are non-finite: when its outputs are non-finite too).

Two binary searches, assuming that adding ops to a range never makes it explain less: the smallest end h such that
ops [0, h) explain it, then the largest start l such that [l, h) still do. About 2·log2(ops) trials; each is
counted. Where the assumption fails (two errors that cancel), the window found still explains the drift — it may
not be the smallest one.
"""
from __future__ import annotations

import math
import os
import time

import numpy as np

from .isolate import RegionFailed, quiet_target, run_region
from .metrics import compare, failed_gates
from .regions import compute_ops, finish_with_reference, region_program, user_outputs

SHARE = 0.9     # a culprit accounts for at least this share of the output drift


def output_drift(reference: list[np.ndarray], outputs: list[np.ndarray]) -> dict:
    """The worst output's figures (largest rel L2; a non-finite output is the worst)."""
    worst = None
    for r, o in zip(reference, outputs):
        o = np.asarray(o)
        if o.shape != r.shape and o.size == r.size:
            o = o.reshape(r.shape)
        f = compare(r, o)
        key = (f["non_finite"], f["rel_l2"] if f["rel_l2"] is not None else -1.0)
        if worst is None or key > (worst["non_finite"], worst["rel_l2"] if worst["rel_l2"] is not None else -1.0):
            worst = f
    return worst or compare(np.zeros(0), np.zeros(0))


class Search:
    """The trials of one target's culprit search, each run once."""

    def __init__(self, target, ep, values: dict, user_inputs: list, workdir: str):
        self.target, self.ep, self.values, self.user_inputs = quiet_target(target), ep, values, user_inputs
        self.workdir = workdir
        self.ops = compute_ops(ep.graph_module)
        self.reference = user_outputs(ep, values)
        self.trials: dict[tuple[int, int], dict] = {}
        self.folders: dict[tuple[int, int], str] = {}
        self.outputs: dict[tuple[int, int], dict] = {}     # what the target gave at each trial's outputs

    def trial(self, lo: int, hi: int) -> dict:
        """Ops [lo, hi) on the target, the rest on the reference: the output drift, or the target's error."""
        key = (lo, hi)
        if key in self.trials:
            return self.trials[key]
        import torch
        from ..errors import first_line
        folder = os.path.join(self.workdir, f"trial_{len(self.trials)}")
        region = region_program(self.ep, self.ops[lo:hi], self.values, cut_every_edge=False)
        t0 = time.perf_counter()
        try:
            got, _, _ = run_region(self.target, region, self.values, folder)
            missing = [v for v in region.outputs if v not in got]
            if missing:
                raise RegionFailed(f"the target returned no value for {len(missing)} of the range's outputs")
            overrides = {v: torch.from_numpy(np.array(got[v], order="C")).to(self.values[v].dtype)
                         for v in region.outputs}
            drift = output_drift(self.reference, finish_with_reference(self.ep, self.user_inputs, overrides))
            self.outputs[key] = got
            out = {"first": lo, "last": hi - 1, "ops": hi - lo, "rel_l2": drift["rel_l2"],
                   "non_finite": drift["non_finite"], "error": None}
        except Exception as e:  # noqa: BLE001 — a range the target refuses explains nothing; said in the trial
            out = {"first": lo, "last": hi - 1, "ops": hi - lo, "rel_l2": None, "non_finite": False,
                   "error": first_line(e, 300)}
        out["seconds"] = round(time.perf_counter() - t0, 2)
        self.trials[key] = out
        self.folders[key] = folder
        return out

    def explains(self, trial: dict, baseline: dict) -> bool:
        return reproduces(trial, baseline)


def reproduces(trial: dict, baseline: dict, share: float = SHARE) -> bool:
    """Whether a trial reproduces the baseline's drift: at least `share` of its rel L2, or non-finite outputs where
    the baseline's are non-finite. A trial the target refused reproduces nothing."""
    if trial.get("error"):
        return False
    if baseline.get("non_finite"):
        return bool(trial.get("non_finite"))
    return trial.get("rel_l2") is not None and trial["rel_l2"] >= share * (baseline.get("rel_l2") or 0.0)


def find_culprit(target, ep, values: dict, user_inputs: list, workdir: str, gates: dict,
                 budget_s: float | None = None) -> dict:
    """The culprit block: status `found` (the window, its share of the drift, the trials), `not-needed` (the
    output drift is within the gates), `not-found` (no range reproduced it: the baseline failed, or the drift
    needs the whole model) — with every trial run. Past `budget_s` seconds no new trial starts: the window
    narrowed so far is the answer, and `why` says the search stopped early."""
    t0 = time.perf_counter()
    stopped = []

    def out_of_time() -> bool:
        # A trial takes about as long as the longest so far: start one only if it can end within the budget.
        longest = max((t["seconds"] for t in s.trials.values()), default=0.0)
        if budget_s is not None and time.perf_counter() - t0 + longest > budget_s:
            stopped.append(len(s.trials))
            return True
        return False
    s = Search(target, ep, values, user_inputs, workdir)
    n = len(s.ops)
    baseline = s.trial(0, n)
    block = {"share_required": SHARE, "baseline": baseline, "status": None, "first": None, "last": None,
             "ops": [], "explained": None}

    def done(status: str, **kw) -> dict:
        for t in s.trials.values():      # each trial's verdict, as the search took it (the views show it)
            t["reproduces"] = t is baseline or (not baseline["error"] and reproduces(t, baseline))
        block.update(status=status, runs=len(s.trials), trials=list(s.trials.values()),
                     seconds=round(time.perf_counter() - t0, 2), **kw)
        block["_search"] = s
        return block

    if baseline["error"]:
        return done("not-found", why=f"the whole program as one range failed on the target: {baseline['error']}")
    baseline_figures = {"rel_l2": baseline["rel_l2"], "non_finite": baseline["non_finite"]}
    if not failed_gates(baseline_figures, {k: v for k, v in gates.items() if k == "rel_l2"} or {"rel_l2": 1e-2}):
        return done("not-needed", why=f"the output drift ({_fmt(baseline['rel_l2'])} rel L2) is within the gate")
    lo, hi = 0, n           # [0, hi) explains; [0, lo) does not
    while hi - lo > 1 and not out_of_time():
        mid = (lo + hi) // 2
        if s.explains(s.trial(0, mid), baseline):
            hi = mid
        else:
            lo = mid
    end = hi
    lo, hi = 0, end         # [lo, end) explains; [hi, end) does not
    while hi - lo > 1 and not out_of_time():
        mid = (lo + hi) // 2
        if s.explains(s.trial(mid, end), baseline):
            lo = mid
        else:
            hi = mid
    start = lo
    window = s.trial(start, end)
    if not s.explains(window, baseline):
        return done("not-found", why="no range smaller than the whole program reproduces the drift")
    explained = 1.0 if baseline["non_finite"] else (window["rel_l2"] or 0.0) / (baseline["rel_l2"] or math.inf)
    early = (f"the search stopped at its time budget ({budget_s:.0f} s) after {stopped[0]} trial(s): the window "
             f"may narrow further with a longer worker limit (--timeout)") if stopped else None
    return done("found", first=start, last=end - 1, ops=s.ops[start:end], explained=explained, window=window,
                folder=s.folders[(start, end)], why=early)


def _fmt(x) -> str:
    return "non-finite" if x is None or (isinstance(x, float) and math.isinf(x)) else f"{x:.2e}"
