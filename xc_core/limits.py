"""Bounds checked before anything is read whole, unpacked or allocated: an upload must not be able to fill the
server's memory or disk. Each limit has a default, an environment variable and a CLI flag; the error for a
breached limit names all three, so whoever runs xc can raise it.

The defaults fit realistic models (a 1 GiB checkpoint, a 4 GiB unpacked archive, a batch of large images) and
stop crafted files long before the machine suffers.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace

from .errors import XcInputError

MIB = 1 << 20


@dataclass(frozen=True)
class Limit:
    name: str
    default: float
    env: str
    flag: str
    unit: str            # "MiB" or "" (a count)
    what: str            # what the limit bounds, for the message and --help
    zero_ok: bool = False    # 0 is accepted (turns the work off) rather than refused


LIMITS = {
    "max_file_mb": Limit("max_file_mb", 1024, "XC_MAX_FILE_MB", "--max-file-mb", "MiB",
                         "size of a model or inputs file"),
    "max_unzipped_mb": Limit("max_unzipped_mb", 4096, "XC_MAX_UNZIPPED_MB", "--max-unzipped-mb", "MiB",
                             "unpacked size of an archive (.pt2, .pt, .npz, zipped .mlpackage)"),
    "max_zip_entries": Limit("max_zip_entries", 100_000, "XC_MAX_ZIP_ENTRIES", "--max-zip-entries", "",
                             "number of files in an archive"),
    # Weights barely compress; a megabyte that claims to inflate past a hundred is a zip bomb. Only entries
    # above ZIP_RATIO_MIN_BYTES are held to it (small JSON manifests compress well legitimately).
    "max_zip_ratio": Limit("max_zip_ratio", 100, "XC_MAX_ZIP_RATIO", "--max-zip-ratio", "×",
                           "compression ratio of an archive entry"),
    "max_input_mb": Limit("max_input_mb", 1024, "XC_MAX_INPUT_MB", "--max-input-mb", "MiB",
                          "total size of the model inputs for the shapes that will run"),
    # Not a safety bound but a time one: onnxruntime's quantize_dynamic takes time quadratic in graph size (about
    # 30 s at 5,000 nodes and 11 minutes at 20,000 on one core here), so ort-cpu-int8 skips bigger models, saying
    # so in the report, instead of holding every other result back.
    "max_int8_nodes": Limit("max_int8_nodes", 3000, "XC_MAX_INT8_NODES", "--max-int8-nodes", "",
                            "ONNX nodes ort-cpu-int8 quantizes (a bigger model skips that target)"),
    # A time bound as well: the targets that compile a PyTorch program (Core ML, Core AI, ExecuTorch, Inductor,
    # LiteRT; for an ONNX upload, the program xc's ONNX → PyTorch route makes) spend time in their own lowering
    # that grows at least linearly with the program: on a flat 1,007-node transformer here ExecuTorch XNNPACK
    # took 130 s, Core AI 107 s, Vulkan 63 s, Inductor 56 s, LiteRT 19 s, Core ML 8 s; at 20,007 nodes every one
    # of them ran into the 300 s worker limit. Above this many program nodes they are skipped, saying so (and for
    # an ONNX upload the route is not built), instead of holding the run for minutes to time out.
    "max_program_nodes": Limit("max_program_nodes", 5000, "XC_MAX_PROGRAM_NODES", "--max-program-nodes", "",
                               "nodes of a PyTorch program the PyTorch-side targets compile (a bigger one skips "
                               "them)"),
    # A time bound too: every target that can time its compiled nodes runs the model this many more times with
    # its profiler on, after the run whose outputs are compared (0 skips the time per node).
    "profile_runs": Limit("profile_runs", 5, "XC_PROFILE_RUNS", "--profile-runs", "",
                          "profiled runs per target for the time per node (0: none)", zero_ok=True),
    # A time bound: the ORT targets show the graph after each optimization level (Stages) by building one more
    # session per level, and ORT's optimizer grows faster than the graph (0.8 s a level at 5,000 flat-transformer
    # nodes, about 45 s at 20,000 — three levels cost several times the compile). Above this many ONNX nodes the
    # Stages page shows the model ORT loads and its final graph, and says how to ask for the levels.
    "max_level_graph_nodes": Limit("max_level_graph_nodes", 5000, "XC_MAX_LEVEL_GRAPH_NODES",
                                   "--max-level-graph-nodes", "",
                                   "ONNX nodes up to which the ORT targets also show the graph after each "
                                   "optimization level (one more session per level; 0: never)", zero_ok=True),
    # Task accuracy on a dataset (--data, inputs/dataset.py): an upload like any other, bounded in samples, in total
    # and per file; and a time bound per target, since every sample runs on every target.
    "max_dataset_samples": Limit("max_dataset_samples", 10_000, "XC_MAX_DATASET_SAMPLES", "--max-dataset-samples",
                                 "", "samples in a dataset (--data)"),
    "max_dataset_mb": Limit("max_dataset_mb", 1024, "XC_MAX_DATASET_MB", "--max-dataset-mb", "MiB",
                            "total size of a dataset's files and of its samples as model inputs (--data)"),
    "max_sample_mb": Limit("max_sample_mb", 64, "XC_MAX_SAMPLE_MB", "--max-sample-mb", "MiB",
                           "size of one file of a dataset (--data)"),
    "dataset_seconds": Limit("dataset_seconds", 120, "XC_DATASET_SECONDS", "--dataset-seconds", "",
                             "seconds each target spends running the dataset's samples (the rest are not run, and "
                             "the report says so)"),
}
ZIP_RATIO_MIN_BYTES = 1 << 20

# Reports read back (the History page's import, `report` and `diff`) are parsed whole into memory: a crafted
# report.json must not fill the server's. report.json itself stays small (lists over 256 KiB go to the sidecar), so
# 64 MiB is far above any real one; the sidecar holds a big model's per-node lists (90 MB inline for an LSTM of
# 60,000 Core ML ops). No flag: `report` and `diff` read them through the environment like the dashboard.
REPORT_LIMITS = {
    "max_report_mb": Limit("max_report_mb", 64, "XC_MAX_REPORT_MB", "", "MiB", "size of a report.json read back"),
    "max_sidecar_mb": Limit("max_sidecar_mb", 512, "XC_MAX_SIDECAR_MB", "", "MiB",
                            "size of a report.nodes.json(.gz) read back, also once decompressed"),
}
# Nesting of a report read back: xc writes 9 levels; readers (and Python's recursion limit) need a bound, and a
# 200,000-deep array is a few hundred kilobytes.
REPORT_MAX_DEPTH = 64


def report_limit(name: str) -> float:
    """A REPORT_LIMITS value: its environment variable, else its default."""
    lim = REPORT_LIMITS[name]
    raw = os.environ.get(lim.env)
    return _parse(raw, lim, source=lim.env) if raw is not None and raw.strip() else lim.default


@dataclass(frozen=True)
class Limits:
    max_file_mb: float = LIMITS["max_file_mb"].default
    max_unzipped_mb: float = LIMITS["max_unzipped_mb"].default
    max_zip_entries: int = int(LIMITS["max_zip_entries"].default)
    max_zip_ratio: float = LIMITS["max_zip_ratio"].default
    max_input_mb: float = LIMITS["max_input_mb"].default
    max_int8_nodes: int = int(LIMITS["max_int8_nodes"].default)
    max_program_nodes: int = int(LIMITS["max_program_nodes"].default)
    profile_runs: int = int(LIMITS["profile_runs"].default)
    max_level_graph_nodes: int = int(LIMITS["max_level_graph_nodes"].default)
    max_dataset_samples: int = int(LIMITS["max_dataset_samples"].default)
    max_dataset_mb: float = LIMITS["max_dataset_mb"].default
    max_sample_mb: float = LIMITS["max_sample_mb"].default
    dataset_seconds: int = int(LIMITS["dataset_seconds"].default)

    @classmethod
    def from_env(cls, **overrides) -> "Limits":
        """Defaults, then the XC_MAX_* environment variables, then explicit overrides (CLI flags)."""
        values = {}
        for f in fields(cls):
            lim = LIMITS[f.name]
            raw = os.environ.get(lim.env)
            if raw is not None and raw.strip():
                values[f.name] = _parse(raw, lim, source=lim.env)
        limits = replace(cls(), **values)
        given = {k: v for k, v in overrides.items() if v is not None}
        for k, v in given.items():
            if v < 0 or (v == 0 and not LIMITS[k].zero_ok):
                raise XcInputError(f"{LIMITS[k].flag} {v}: must be a positive number")
        return replace(limits, **given)

    def bytes(self, name: str) -> int:
        return int(getattr(self, name) * MIB)


def _parse(raw: str, lim: Limit, source: str) -> float:
    try:
        value = int(raw) if lim.unit == "" else float(raw)
    except ValueError:
        raise XcInputError(f"{source}={raw!r}: expected a {'number of MiB' if lim.unit else 'whole number'}") \
            from None
    if value < 0 or (value == 0 and not lim.zero_ok):
        raise XcInputError(f"{source}={raw!r}: must be positive")
    return value


def exceeded(name: str, subject: str, actual: float, limits: Limits | None = None) -> XcInputError:
    """The one-line error for a breached limit: what is too big, by how much, and the two ways to raise it.
    `subject` reads before the amount: "model.pt2: the archive unpacks to" → "… to 5.00 GiB, above …"."""
    lim = LIMITS.get(name) or REPORT_LIMITS[name]
    value = getattr(limits, name) if name in LIMITS else report_limit(name)
    if lim.unit == "MiB":
        amount, bound = human_bytes(actual), f"{value:g} MiB"
    elif lim.unit == "×":
        amount, bound = f"{actual:,.0f}×", f"{value:g}×"
    else:
        amount, bound = f"{int(actual):,}", f"{int(value):,}"
    said = f"{subject} {amount}, above the {bound} limit on the {lim.what}"
    # The dashboard has no flags: its server reads the environment variable when it starts.
    how = f"{lim.flag} or the environment variable" if lim.flag else "the environment variable"
    return XcInputError(f"{said} (raise it with {how} {lim.env})",
                        dashboard=f"{said} (raise it with the environment variable {lim.env} where the dashboard "
                                  "server is started)")


def human_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} bytes"


def check_file_size(path: str, limits: Limits) -> None:
    """One line naming the file and the limit when the file is bigger than XC_MAX_FILE_MB allows."""
    size = os.path.getsize(path)
    if size > limits.bytes("max_file_mb"):
        raise exceeded("max_file_mb", f"{os.path.basename(path)}: the file is", size, limits)
