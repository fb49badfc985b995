"""When a batch may take a model's cells from the run store instead of compiling again.

The keys are xc_core/run_keys.py's, the ones `xc analyze` and the dashboard use: a cell (one model × one target)
stored by any of them — a CLI run of several targets, a dashboard upload of the same file, an earlier batch — is
taken, not compiled again. Here a manifest's model becomes the parts of those keys: its source and inputs by
content, its --shape/--dim/--value/--range flags parsed to what analyze() takes.
"""
from __future__ import annotations

from ..run_keys import (  # noqa: F401 — the fleet's names for them (matrix.json lists the toolchains)
    TOOLCHAINS,
    cell_keys as _cell_keys,
    inputs_digest,
    request_parts,
    run_key_of,
    source_digest as source_sha256,
    target_identities,
    toolchain_versions,
)
from .manifest import FleetModel


def model_parts(model: FleetModel, source_sha: str, analysis_kwargs: dict, limits, toolchains: dict) -> dict:
    """What every cell of this model shares: its source and inputs by content, its input edits as analyze() takes
    them (`analysis_kwargs`: shapes, dims, values, ranges, already parsed from the manifest's flags)."""
    return request_parts(source_sha, inputs_digest(model.inputs),
                         **{k: analysis_kwargs.get(k) for k in ("shapes", "dims", "values", "ranges")},
                         limits=limits, toolchains=toolchains)


def cell_keys(parts: dict, identities: dict[str, str]) -> dict[str, str]:
    """column (a target as --targets names it) → the key of that target's cell for this model."""
    by_identity = _cell_keys(parts, list(dict.fromkeys(identities.values())), None)
    return {column: by_identity[identity] for column, identity in identities.items()}


def model_key(cells_by_column: dict[str, str], columns: list[str], worker_limits) -> str:
    """The key of the model's run over exactly these columns, as `xc analyze` would name the same run."""
    return run_key_of({c: cells_by_column[c] for c in columns}, worker_limits)
