"""`python -m xc_core ...`: the same analysis as the dashboard, for CI and pull-request review.

Exit codes: 0 success; 2 bad input or usage (one line on stderr, no traceback); 1 an internal error (one line;
XC_DEBUG=1 shows the traceback).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from .errors import XcInputError

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse prints usage + message and exits 2; keep it to one line
        print(f"xc: {message} (see python -m xc_core {self.prog.split()[-1]} --help)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="xc", description="Compile one model for several runtimes and compare what each did.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    a = sub.add_parser("analyze", help="compile SOURCE for each target and write report.json")
    a.add_argument("source", help="a model file (.pt2, .pt, .onnx) or sample:NAME")
    a.add_argument("--targets", default="all", help="comma-separated target ids, or all (default)")
    a.add_argument("--inputs", metavar="FILE.npz", help="input arrays by input name (default: seeded random)")
    a.add_argument("--shape", action="append", metavar="NAME=DxD[:dtype]",
                   help="an input's whole shape, repeatable (required for TorchScript without --inputs)")
    a.add_argument("--dim", action="append", metavar="NAME=N",
                   help="a symbolic dim by the model's name for it, in every input, repeatable (e.g. height=640)")
    a.add_argument("--value", action="append", metavar="NAME=V",
                   help="set every element of an input to V, repeatable (e.g. a sample rate that picks a branch)")
    a.add_argument("--range", action="append", metavar="NAME=LOW:HIGH",
                   help="draw an integer input from [LOW, HIGH), repeatable (default: the embedding's size "
                        "where the graph shows one)")
    a.add_argument("--option", action="append", metavar="TARGET.KEY=VALUE",
                   help="a target option, repeatable; e.g. ort-nnapi.fp16=true (emulate NNAPI's relaxed fp16), "
                        "ort-coreml.bandwidth_gb_s=8, openvino-cpu.inference_precision=f32")
    a.add_argument("--out", required=True, metavar="DIR", help="writes DIR/report.json and DIR/artifacts/")
    a.add_argument("--quiet", action="store_true", help="print nothing but errors")
    from .worker import DEFAULT_MEMORY_GIB, DEFAULT_TIMEOUT_S
    w = a.add_argument_group("workers", "loading + capture, the reference and every target run in isolated worker "
                                        "processes; a crash, a hang or runaway memory becomes that target's error")
    w.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="targets compiled at once (default: the machine's cores)")
    w.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help=f"wall time per worker (default {DEFAULT_TIMEOUT_S:g}; env XC_TIMEOUT_S)")
    w.add_argument("--memory", type=float, default=None, metavar="GIB",
                   help=f"resident memory per worker (default {DEFAULT_MEMORY_GIB:g}; env XC_MEMORY_GIB)")
    w.add_argument("--no-store", action="store_true",
                   help="do not record the run in xc's run store ($XC_HOME, default the user data dir)")
    from .limits import LIMITS
    lim = a.add_argument_group("limits", "bounds checked before a file is read or unpacked, or inputs allocated; "
                                         "each also has an environment variable")
    for key, spec in LIMITS.items():
        lim.add_argument(spec.flag, dest=key, type=int if spec.unit == "" else float, default=None,
                         metavar="N", help=f"{spec.what} (default {spec.default:g}{' ' + spec.unit if spec.unit else ''};"
                                           f" env {spec.env})")
    sub.add_parser("targets", help="list targets and whether each is available on this host")
    sub.add_parser("samples", help="list bundled sample models")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "targets":
            return _targets()
        if args.command == "samples":
            return _samples()
        return _analyze(args)
    except XcInputError as e:
        print(f"xc: {e.for_cli()}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:  # noqa: BLE001 — a bug in xc: one line, the traceback on request
        if os.environ.get("XC_DEBUG"):
            raise
        text = str(e).strip().splitlines()
        print(f"xc: internal error: {type(e).__name__}: {text[0][:300] if text else ''} (set XC_DEBUG=1 for the "
              "traceback)", file=sys.stderr)
        return EXIT_INTERNAL


def _targets() -> int:
    from .targets import REGISTRY, target_ids
    for tid in target_ids():
        cls = REGISTRY[tid]
        ok, why = cls.available()
        print(f"{tid:16} {'available' if ok else 'unavailable: ' + why:40} {cls.description}")
    return EXIT_OK


def _samples() -> int:
    from .sources.samples import DEFAULT_SAMPLE, SAMPLES
    for name, s in SAMPLES.items():
        ins = ", ".join(f"{i.name} {i.dtype}{list(i.shape)}" for i in s.inputs)
        print(f"sample:{name:18} {s.description} (inputs: {ins}){' [default]' if name == DEFAULT_SAMPLE else ''}")
    return EXIT_OK


def _analyze(args) -> int:
    from .api import analyze
    from .inputs import parse_dim_flags, parse_range_flags, parse_shape_flags, parse_value_flags
    from .limits import LIMITS, Limits
    from .targets import parse_target_list, parse_target_options
    targets = parse_target_list(args.targets)
    options = parse_target_options(args.option, targets)
    shapes = parse_shape_flags(args.shape)
    limits = Limits.from_env(**{k: getattr(args, k) for k in LIMITS})
    from .worker import WorkerLimits
    worker_limits = WorkerLimits.from_env(args.timeout, args.memory)
    if args.jobs is not None and args.jobs < 1:
        raise XcInputError(f"--jobs {args.jobs}: must be at least 1")
    if args.inputs and not os.path.isfile(args.inputs):
        raise XcInputError(f"--inputs {args.inputs}: no such file (accepted: an .npz written by numpy.savez)")
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        raise XcInputError(f"--out {args.out}: cannot create the directory ({e.strerror})") from None

    def progress(ev):
        if args.quiet:
            return
        if ev["stage"] == "target" and ev["status"] != "running":
            msg = ev["status"] + (f" — {ev['error']}" if ev.get("error") else "")
            print(f"  {ev['target']:16} {msg}", file=sys.stderr)
        elif ev["stage"] == "capture" and ev["status"] == "running":
            print("  capturing (torch.export / ONNX)…", file=sys.stderr)

    report = analyze(args.source, targets, inputs_npz=args.inputs, shapes=shapes, dims=parse_dim_flags(args.dim),
                     values=parse_value_flags(args.value), ranges=parse_range_flags(args.range), out_dir=args.out,
                     target_options=options, progress=progress, limits=limits, worker_limits=worker_limits,
                     jobs=args.jobs)
    if not args.no_store:
        _record(args, report, targets, options, shapes, limits)
    if not args.quiet:
        print(inputs_table(report))
        print(summary_table(report))
        print(checklist_table(report))
        print(f"wrote {os.path.join(args.out, 'report.json')}")
    return EXIT_OK


def _record(args, report: dict, targets, options, shapes, limits) -> None:
    """Keep the run in the store (history, re-opening in the dashboard). A store that cannot be written is a
    warning, not a failed analysis."""
    from dataclasses import asdict

    from .store import RunStore, run_key
    try:
        key = run_key(source=report["source"]["sha256"], npz=_file_sha(args.inputs), targets=targets,
                      options=options, shapes=shapes, dims=args.dim, values=args.value, ranges=args.range,
                      limits=asdict(limits))
        RunStore().put(key, report, args.out)
    except (OSError, ValueError) as e:
        print(f"xc: warning: the run was not recorded in the store ({e})", file=sys.stderr)


def _file_sha(path: str | None) -> str | None:
    if not path:
        return None
    from .sources import sha256_file
    return sha256_file(path)


def inputs_table(report: dict) -> str:
    from .views import input_rows, probe_rows
    lines = ["inputs:"]
    for r in input_rows(report):
        lines.append(f"  {r['input']} {r['shape']} {r['dtype']} — shape from {r['shape from']}, values from "
                     f"{r['values from']}" + (f"; {r['note']}" if r["note"] else ""))
    for p in probe_rows(report):
        if not p["result"].startswith("ran"):
            lines.append(f"  tried {p['tried']}: {p['result']}")
    ref = report.get("reference") or {}
    if ref.get("status") == "error":
        lines.append(f"  the reference failed with these inputs: {ref.get('error')} — set them with --shape, --dim, "
                     "--value or --inputs")
    return "\n".join(lines) + "\n"


def summary_table(report: dict) -> str:
    from .views import overview_rows
    rows = overview_rows(report)
    cols = ["target", "status", "ops", "fused groups", "precision", "worst drift (rel L2)"]
    extra = ["accelerated share", "partitions", "fallbacks", "ORT verdict", "latency cliff (est.)",
             "Core ML units", "casts", "MIL ops"]
    cols += [c for c in extra if any(c in r for r in rows)] + ["evidence"]
    lines = [" | ".join(cols)]
    for r in rows:
        lines.append(" | ".join(str(r.get(c, "—")) for c in cols))
    for r in rows:
        if r.get("error"):
            lines.append(f"{r['target']}: {r['error']}")
    return "\n".join(lines)


def checklist_table(report: dict) -> str:
    marks = {"pass": "PASS", "warn": "WARN", "fail": "FAIL", "not applicable": "n/a"}
    lines = ["", "checklist: (1) report read (2) CPU fallback on accelerator (3) fusions fired "
                 "(4) outputs match (5) same precision"]
    for tid, items in report["checklist"]["targets"].items():
        lines.append(f"{tid:24} " + "  ".join(f"({i['id']}) {marks[i['verdict']]:4}" for i in items))
        for i in items:
            if i["verdict"] in ("fail", "warn"):
                lines.append(f"{'':24} ({i['id']}) {i['detail']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
