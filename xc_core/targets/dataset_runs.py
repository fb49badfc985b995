"""Every sample of a dataset (--data) through a compiled target, as its run phase runs the inputs: the target's own
`_run`, its outputs made comparable by outputs.normalize_outputs, stacked on a leading sample axis into
`result.dataset_outputs`. `result.dataset_run` says how many samples ran and why it stopped early (the per-target
time budget, a sample that failed, a target this host cannot run). Never raises: accuracy is an extra, and a
failure here must not cost the target its other results.
"""
from __future__ import annotations

import copy
import time

import numpy as np

from ..errors import first_line
from ..outputs import normalize_outputs


def run_dataset(target, compiled, captured, result, dataset: dict) -> None:
    """`dataset`: input name -> samples stacked on a leading axis (inputs/dataset.py, every model input present)."""
    samples = min((len(v) for v in dataset.values()), default=0)
    run = {"samples": samples, "samples_run": 0, "stopped": None, "seconds": 0.0}
    result.dataset_run = run
    if result.numerics_not_run:
        run["stopped"] = result.numerics_not_run
        return
    limits = getattr(target, "limits", None)
    budget = float(getattr(limits, "dataset_seconds", 120))
    expected = list(captured.output_names or [])
    collected: dict[str, list] = {}
    t0 = time.perf_counter()
    for i in range(samples):
        if time.perf_counter() - t0 > budget:
            run["stopped"] = (f"the {budget:g} s budget per target ran out after {i} of {samples} samples (raise it "
                              "with --dataset-seconds or XC_DATASET_SECONDS)")
            break
        feeds = {name: values[i] for name, values in dataset.items()}
        # A scratch copy: what a runtime notes about one sample must not land in the target's own result.
        scratch = copy.copy(result)
        scratch.info, scratch.notes, scratch.artifacts = dict(result.info), list(result.notes), list(result.artifacts)
        scratch.evidence, scratch.timings = dict(result.evidence), dict(result.timings)
        try:
            outputs, _, _ = normalize_outputs(target._run(compiled, feeds, captured, scratch), expected)
        except Exception as e:  # noqa: BLE001 — a sample the target cannot run ends the dataset run, said why
            run["stopped"] = f"sample {i} failed: {type(e).__name__}: {first_line(e, 300)}"
            break
        if collected and set(outputs) != set(collected):
            run["stopped"] = f"sample {i} returned other outputs ({sorted(outputs)}) than the samples before it"
            break
        shapes_differ = [k for k, v in outputs.items() if collected and collected[k][0].shape != np.shape(v)]
        if shapes_differ:
            run["stopped"] = (f"sample {i}: output '{shapes_differ[0]}' has shape {list(np.shape(outputs[shapes_differ[0]]))}, "
                              f"the samples before it {list(collected[shapes_differ[0]][0].shape)}")
            break
        for k, v in outputs.items():
            collected.setdefault(k, []).append(np.asarray(v))
        run["samples_run"] = i + 1
    run["seconds"] = round(time.perf_counter() - t0, 4)
    result.dataset_outputs = {k: np.stack(v) for k, v in collected.items()}
