"""The analysis's plan, decided before anything runs: its steps as data (PLAN), the worker entry of each, and the
run folder they share — each step a function of files there (pipeline/steps.py), so it can run in an isolated
worker (xc_core.worker) or in this process (pipeline/scheduler.py), with the same results.

    run_dir/
      inputs.npz                    the inputs every target ran (written by `prepare`)
      capture/captured.json         the captured graphs, output names, inputs, timings (typed, plain JSON); the
                                    workers' hand-off, removed once report.json (which holds the graphs) is written
      capture/model.onnx            what ONNX-consuming targets compile
      capture/exported_program.pt2  the ExportedProgram (PyTorch sources), read back with xc's safe loader
      capture/onnx_route.json       an ONNX source's ONNX → PyTorch route (its program: artifacts/capture/)
      artifacts/<target>/           what each target wrote
      work/<job>/                   a worker's result.json + arrays.npz, stderr and temp folder (removed after)

A target worker rebuilds the source from its spec (a sample is rebuilt from code, a file is loaded again through
the same safe loaders), so nothing but files and JSON crosses between processes.
"""
from __future__ import annotations

from dataclasses import dataclass

CAPTURE_DIR, INPUTS_FILE = "capture", "inputs.npz"
# In CAPTURE_DIR: the hand-off to the workers, removed once the report (which holds its graphs) is written.
CAPTURED_FILE = "captured.json"
# The prepare worker's phase once torch.export has finished and the ExportedProgram is on disk (ONNX export next).
EXPORTED = "exported"
ROUTE_FILE = "onnx_route.json"


@dataclass(frozen=True)
class PlanStep:
    """One step of an analysis: the progress step it reports as, the worker entry that runs it in isolation, and
    the step whose end it waits for (`early`: the worker phase of that step some targets may start at)."""
    name: str
    job: str
    after: str | None = None
    early: str | None = None


# The analysis, written once: prepare (load, inputs, capture), an ONNX source's ONNX → PyTorch route when a target
# compiles PyTorch programs, then every target (the reference first), then the report. scheduler.run_here walks it
# one step after another in this process; scheduler.IsolatedRun starts each step's jobs in workers as soon as what
# it waits for has finished — the targets that compile the ExportedProgram as soon as the prepare worker has
# written it (EXPORTED), while it goes on to the ONNX export; for an ONNX source, the targets that compile ONNX
# while the route runs, those that compile its program once it has.
PREPARE, ROUTE_STEP, TARGETS = "prepare", "onnx-route", "targets"
PLAN = (
    PlanStep(PREPARE, "xc_core.pipeline.steps:prepare_job"),
    PlanStep(ROUTE_STEP, "xc_core.pipeline.steps:route_job", after=PREPARE),
    PlanStep(TARGETS, "xc_core.pipeline.steps:target_job", after=PREPARE, early=EXPORTED),
    PlanStep("report", "xc_core.pipeline.steps:report_job", after=TARGETS),
)
PLAN_STEP = {step.name: step for step in PLAN}
