"""`xc batch merge DIR... --out DIR`: the matrices of several `xc batch --shard` outputs as one, with each model's
run folder copied beside it so the merged matrix diffs run by run.

The shards are someone else's folders (CI artifacts): a run folder is copied file by file, regular files only,
symlinks never followed (safe_files), the whole copy bounded in size; a shard whose runs/MODEL resolves outside
its folder (runs/ or runs/MODEL a symlink out), or is not a folder, is refused before anything is written.
"""
from __future__ import annotations

import os
import shutil

from ..errors import XcInputError, printable_line
from ..safe_files import Tree, copy_regular, is_inside, regular_files, warn_skipped
from .matrix import RUNS_DIR, merge, read_matrix

MAX_MERGE_MB_ENV = "XC_MAX_MERGE_MB"
DEFAULT_MAX_MERGE_MB = 4096         # run folders keep reports (and, without the run store, artifacts): far below


def merge_batches(dirs: list[str], out: str) -> dict:
    """Read every shard, check every run folder to copy, then copy them into out/runs/; the merged matrix (the
    caller writes it). Bad input raises XcInputError in one line, before `out` is touched."""
    read = [read_matrix(d) for d in dirs]
    matrix = merge(read)
    out_runs = os.path.join(out, RUNS_DIR)
    planned = _run_folders(read, out_runs)
    bound = max_merge_bytes()
    total = sum(tree.size() for tree in planned.values())
    if total > bound:
        raise XcInputError(f"merge: the shards' run folders hold {total / 2**20:,.0f} MiB, more than "
                           f"{bound / 2**20:,.0f} MiB (raise it with {MAX_MERGE_MB_ENV}=N)")
    try:
        os.makedirs(out_runs, exist_ok=True)
    except OSError as e:
        raise XcInputError(f"--out {out}: cannot create the directory ({e.strerror})") from None
    skipped = {}
    for name, tree in planned.items():
        _copy_tree(tree, os.path.join(out_runs, name))
        skipped.update({f"{tree.root}/{rel}": why for rel, why in tree.skipped.items()})
    warn_skipped("xc batch merge", skipped)
    return matrix


def max_merge_bytes() -> int:
    raw = os.environ.get(MAX_MERGE_MB_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_MERGE_MB << 20
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < 1 << 40:
        raise XcInputError(f"{MAX_MERGE_MB_ENV}={printable_line(raw)[:40]}: expected a size in MiB above 0")
    return int(value * (1 << 20))


def _run_folders(read: list[tuple[dict, str]], out_runs: str) -> dict[str, Tree]:
    """runs/MODEL name → its Tree, for every model folder a row names (a model in two shards: the later one's,
    as merge() takes its row). Run folders already where they would be copied to (merging into a shard) stay."""
    planned: dict[str, Tree] = {}
    for m, folder in read:
        runs = os.path.join(folder, RUNS_DIR)
        for row in m["models"]:
            rels = [row["report"]] if row.get("report") else []
            rels += list((row.get("runs") or {}).values())
            for name in dict.fromkeys(rel.split("/")[1] for rel in rels):   # parse_matrix: runs/NAME/…
                src = os.path.join(runs, name)
                if not os.path.lexists(src):
                    continue            # the shard lost it: the merged matrix's diff takes that run from the store
                shown = f"{printable_line(folder)}: {RUNS_DIR}/{printable_line(name)}"
                if not is_inside(folder, src):
                    raise XcInputError(f"{shown} is a symlink out of the shard's folder — not merged (xc batch "
                                       "never writes one)")
                if not os.path.isdir(src):
                    raise XcInputError(f"{shown} is not a folder — not merged (xc batch writes each model's run "
                                       "folder there)")
                if os.path.realpath(src) == os.path.realpath(os.path.join(out_runs, name)):
                    planned.pop(name, None)
                    continue
                planned[name] = regular_files(src)
    return planned


def _copy_tree(tree: Tree, dest: str) -> None:
    """The Tree's regular files into `dest`, replacing what an earlier merge left there."""
    if os.path.islink(dest) or os.path.isfile(dest):
        os.unlink(dest)
    elif os.path.isdir(dest):
        shutil.rmtree(dest)
    os.makedirs(dest)
    for rel, full in tree.files.items():
        target = os.path.join(dest, *rel.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        copy_regular(full, target, tree.stats[rel])
