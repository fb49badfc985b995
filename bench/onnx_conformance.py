"""xc's ONNX → PyTorch route against ONNX's own backend node tests (the ~1,900 cases the onnx wheel generates, each
a small model with inputs and the outputs the ONNX spec says it gives): per case match / mismatched (a silent
error) / refused (one line naming the op) / crashed (an exception nobody foresaw) / outside (no input xc takes),
as xc_core/onnx_route/conformance.py judges them.

    python bench/onnx_conformance.py [--jobs N] [--ops Conv,CumSum] [--cases REGEX] [--json FILE] [--baseline FILE]

Prints the totals, the mismatches and crashes case by case, the refusals by op and by reason. --json writes the
outcomes (to compare a later run with: --baseline prints before → after per column and the cases that changed).
Each case runs in a worker process (a case that kills its worker is a crash, and the worker restarts past it);
nothing is written but the --json file and a temporary folder removed at the end. Tens of minutes on two cores.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT]

CASE_SECONDS = 120          # a case still running after this is stopped and counted as crashed (timeout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    ap.add_argument("--ops", default="", help="only the cases whose model holds one of these op types")
    ap.add_argument("--cases", default="", help="only the cases whose name matches this regular expression")
    ap.add_argument("--json", default=None, help="write every case's outcome here")
    ap.add_argument("--baseline", default=None, help="an earlier --json: print before → after")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return _worker(*args.worker.split(",", 1))
    from xc_core.onnx_route.conformance import node_cases
    t0 = time.monotonic()
    wanted_ops = set(filter(None, args.ops.split(",")))
    pattern = re.compile(args.cases) if args.cases else None
    names = [name for name, case in node_cases().items()
             if (not wanted_ops or wanted_ops & {n.op_type for n in case.model.graph.node})
             and (pattern is None or pattern.search(name))]
    print(f"{len(names)} ONNX node test case(s), {args.jobs} worker(s)", flush=True)
    outcomes = _run_all(names, args.jobs)
    print(f"({time.monotonic() - t0:.0f} s)")
    _print(outcomes)
    if args.baseline:
        with open(args.baseline) as f:
            _print_change(json.load(f), outcomes)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(outcomes, f, indent=0)
    return 0


def _run_all(names: list[str], jobs: int) -> list[dict]:
    """Every case's outcome; the cases shared among `jobs` worker processes, each restarted past a case that kills
    it or runs longer than CASE_SECONDS (that case: crashed)."""
    scratch = tempfile.mkdtemp(prefix="onnx-conformance-")
    started = 0
    try:
        done: dict[str, dict] = {}
        running = []
        for share in (names[i::jobs] for i in range(jobs)):
            if share:
                running.append(_start(scratch, started, share))
                started += 1
        while running:
            time.sleep(0.5)
            for slot in list(running):
                lines = _read(slot["log"])
                for line in lines:
                    if "outcome" in line:
                        done[line["outcome"]["case"]] = line["outcome"]
                current = next((line["start"] for line in reversed(lines) if "start" in line), None)
                if current in done:
                    current = None
                if current != slot["current"]:
                    slot["current"], slot["since"] = current, time.monotonic()
                timed_out = current is not None and time.monotonic() - slot["since"] > CASE_SECONDS
                if timed_out:
                    slot["proc"].kill()
                    slot["proc"].wait()
                elif slot["proc"].poll() is None:
                    continue
                running.remove(slot)
                if current is not None:
                    why = (f"stopped after {CASE_SECONDS} s" if timed_out
                           else f"the worker died (exit {slot['proc'].returncode})")
                    done[current] = {"case": current, "ops": [], "status": "crashed", "reason": why, "op": ""}
                left = [n for n in slot["todo"] if n not in done]
                if left:
                    running.append(_start(scratch, started, left))
                    started += 1
            if sys.stdout.isatty():
                print(f"  {len(done)} / {len(names)} cases", end="\r", flush=True)
        return [done[n] for n in names if n in done]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _start(scratch: str, i: int, todo: list[str]) -> dict:
    listing = os.path.join(scratch, f"todo{i}.json")
    log = os.path.join(scratch, f"log{i}.jsonl")
    with open(listing, "w") as f:
        json.dump(todo, f)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", f"{listing},{log}"], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return {"proc": proc, "todo": todo, "log": log, "current": None, "since": time.monotonic()}


def _read(log: str) -> list[dict]:
    if not os.path.exists(log):
        return []
    out = []
    with open(log) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:        # a line the worker is still writing
                break
    return out


def _worker(listing: str, log: str) -> int:
    import torch

    from xc_core.onnx_route.conformance import node_cases, run_case
    from xc_core.quiet import quiet_torch
    torch.set_num_threads(1)
    with open(listing) as f:
        todo = json.load(f)
    cases = node_cases()
    with open(log, "a") as out:
        for name in todo:
            out.write(json.dumps({"start": name}) + "\n")
            out.flush()
            with quiet_torch():
                outcome = run_case(cases[name])
            out.write(json.dumps({"outcome": outcome.to_dict()}) + "\n")
            out.flush()
    return 0


def _print(outcomes: list[dict]) -> None:
    from xc_core.onnx_route.conformance import HELD_IN_FLOAT, OUTCOMES
    counts = collections.Counter(o["status"] for o in outcomes)
    converted = counts["match"] + counts["mismatched"]
    print(f"\n{len(outcomes)} cases · outside xc's inputs {counts['outside']} · taken {len(outcomes) - counts['outside']}"
          f" · converted {converted}")
    print("  " + " · ".join(f"{s} {counts[s]}" for s in OUTCOMES if s != "outside"))
    held = sum(1 for o in outcomes if o["status"] == "match" and o["reason"] == HELD_IN_FLOAT)
    if held:
        print(f"  (of the matches, {held} with {HELD_IN_FLOAT})")
    for status in ("mismatched", "crashed"):
        rows = [o for o in outcomes if o["status"] == status]
        if rows:
            print(f"\n{status} ({len(rows)}):")
            for o in rows:
                print(f"  {o['case']:60} {o['op']:22} {o['reason'][:160]}")
    refused = [o for o in outcomes if o["status"] == "refused"]
    if refused:
        print(f"\nrefused, by op ({len(refused)}):")
        by_op = collections.Counter(o["op"] for o in refused)
        for op, n in by_op.most_common():
            example = next(o["reason"] for o in refused if o["op"] == op)
            print(f"  {op:24} {n:4d}  {example[:150]}")
        print("\nrefused, by reason:")
        for reason, n in collections.Counter(_reason_kind(o["reason"]) for o in refused).most_common():
            print(f"  {n:4d}  {reason}")


def _reason_kind(reason: str) -> str:
    """A refusal's kind: its words without the node names and numbers that make each one different."""
    text = re.sub(r"'[^']*'", "'…'", reason)
    text = re.sub(r"\b\d+\b", "N", text)
    return text.split(" — ")[0][:110]


def _print_change(before: list[dict], after: list[dict]) -> None:
    from xc_core.onnx_route.conformance import OUTCOMES
    old = {o["case"]: o for o in before}
    new = {o["case"]: o for o in after}
    shared = [n for n in new if n in old]
    a = collections.Counter(old[n]["status"] for n in shared)
    b = collections.Counter(new[n]["status"] for n in shared)
    print(f"\nbefore → after, over the {len(shared)} cases in both runs:")
    for s in OUTCOMES:
        print(f"  {s:11} {a[s]:5d} → {b[s]:5d}")
    moved = collections.Counter((old[n]["status"], new[n]["status"]) for n in shared
                                if old[n]["status"] != new[n]["status"])
    for (s, t), n in moved.most_common():
        print(f"  {s} → {t}: {n}")


if __name__ == "__main__":
    sys.exit(main())
