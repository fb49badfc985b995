"""`xc ...` (also `python -m xc_core ...`): the same analysis as the dashboard, for CI and pull-request review.

Exit codes: 0 success; 2 bad input or usage (one line on stderr, no traceback); 1 an internal error (one line;
XC_DEBUG=1 shows the traceback). `diff --gate`: 0 nothing regressed, 1 something did, 2 bad input, 3 an internal
error (so a CI job never reads a crash as a regression, or as a pass). Interrupted: 130 by Ctrl-C, 143 by SIGTERM
(one line saying what was kept; workers stopped, scratch removed).

Everything printed that can hold text xc did not write (model, node, file and manifest names, libraries' messages)
goes through `errors.visible` / `errors.printable_line`: an escape sequence or a right-to-left override in a model
shows as `\\x1b` / `\\u202e` and never drives the terminal.

`analyze` without `--out` writes to a new folder ./xc-out/<model>-<date>-<time>/ (a suffix -2, -3… if that
exists: an earlier run is never overwritten) and says where in its last line. `diff` of two different models (not
the same file, not the same file name, and fewer than half of the source ops line up) says so in its first line;
with `--gate` that is bad input — exit 2 with that line, since gating one model against another is almost always
a wrong baseline — unless `--allow-different-models` is given.

`comment` posts Markdown as one sticky pull-request comment (created once, then edited in place); `--step-summary`
on `diff` and `report` appends their Markdown to the GitHub Actions job summary.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

from . import _cli_interrupt  # noqa: F401 — first: a Ctrl-C while the rest imports is one line, not a traceback
from .errors import XcInputError, printable_line, visible
from .memory_guard import install as install_memory_guard
from .views.progress import cli_line

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE = 0, 1, 2
EXIT_REGRESSED, EXIT_DIFF_INTERNAL = 1, 3
EXIT_INTERRUPTED = 130          # 128 + SIGINT, as a shell reports a command Ctrl-C ended
DEFAULT_OUT_ROOT = "xc-out"


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse prints usage + message and exits 2; keep it to one line
        # A subcommand's parser is named "xc analyze"; unknown flags are reported by the top parser, named "xc".
        print(f"xc: {printable_line(message)} (see {self.prog} --help)", file=sys.stderr)    # it quotes the flags
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    p = _Parser(prog="xc", description="Compile one model for several runtimes and compare what each did.")
    p.add_argument("--version", action="version", version=f"xc {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    a = sub.add_parser("analyze", help="compile SOURCE for each target and write report.json")
    a.add_argument("source", help="a model file (ExportedProgram .pt2, TorchScript, state_dict .pt or "
                   ".safetensors, .onnx, .mlmodel, zipped .mlpackage or OpenVINO IR; recognised by content) or "
                   "sample:NAME")
    a.add_argument("--targets", default=None, help="comma-separated target ids and variants (a target with "
                   "options, e.g. ort-cpu[level=basic]), or all: every target, the deprecated ones too (default: "
                   "every target but those `xc targets` marks deprecated)")
    a.add_argument("--inputs", metavar="FILE.npz", help="input arrays by input name (default: seeded random)")
    from .inputs.dataset import dataset_flags
    dataset_flags(a)        # --data, --preprocess, --task, --metric, --top-k: task accuracy on your samples
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
    a.add_argument("--out", metavar="DIR", help="writes DIR/report.json and DIR/artifacts/ (default: a new folder "
                   f"./{DEFAULT_OUT_ROOT}/MODEL-DATE-TIME/, never an earlier run's)")
    a.add_argument("--quiet", action="store_true", help="print nothing but errors")
    a.add_argument("--md", metavar="FILE", help="also write the report as Markdown for a pull-request comment")
    a.add_argument("--md-full", action="store_true",
                   help="with --md: every table whole (up to GitHub's 65,536-character cap), not the ~20 KB "
                        "summary whose long tables are left to --html")
    a.add_argument("--html", metavar="FILE", help="also write the report as one self-contained HTML file")
    a.add_argument("--reuse", action="store_true",
                   help="when the run store holds a run of the same source, inputs, targets, options and limits "
                        "made by this xc version — here, in the dashboard or by xc batch — write that run to --out "
                        "instead of compiling again (a CI baseline that did not change)")
    _isolation_flags(a)
    _worker_flags(a, "targets compiled at once (default: the machine's cores)")
    a.add_argument("--no-store", action="store_true",
                   help="do not record the run in xc's run store ($XC_HOME, default the user data dir)")
    _limit_flags(a)
    r = sub.add_parser("report", help="render a run as Markdown, HTML or JSON, or export it to Model Explorer")
    r.add_argument("run", help="a run id (see runs), a run folder (analyze --out) or a report.json")
    r.add_argument("--format", choices=("md", "html", "json", "model-explorer"), default="md",
                   help="model-explorer: Google Model Explorer's graph, overlay and sync files (--out DIR, or "
                        "--out FILE.zip)")
    r.add_argument("--out", metavar="FILE", help="write here instead of stdout")
    r.add_argument("--full", action="store_true",
                   help="with --format md: every table whole (up to GitHub's 65,536-character cap), not the ~20 KB "
                        "summary whose long tables are left to the HTML report")
    _step_summary_flag(r)
    rp = sub.add_parser("repro", help="a target's culprit as a repro bundle its toolchain's maintainers can run "
                        "without xc (runs isolation and culprit search first when the run has none)")
    rp.add_argument("run", help="a run id (see runs) or a run folder (analyze --out)")
    rp.add_argument("--target", required=True, help="the target (id or variant, as the run names it)")
    rp.add_argument("--out", metavar="DIR", help="copy the bundle here (default: ./xc-repro-TARGET/)")
    rp.add_argument("--gate", action="append", metavar="NAME=VALUE", help=GATE_HELP)
    _worker_flags(rp, "unused: one target")
    d = sub.add_parser("diff", help="what changed in the model and in the compilers' decisions between two runs; "
                                 "--gate for CI")
    d.add_argument("base", help="the baseline: a run id, a run folder or a report.json")
    d.add_argument("new", help="the run to check, same forms")
    d.add_argument("--format", choices=("text", "md", "json", "html"), default="text",
                   help="html: one self-contained page (two runs only)")
    d.add_argument("--out", metavar="FILE", help="write here instead of stdout")
    _step_summary_flag(d)
    d.add_argument("--model-only", action="store_true",
                   help="only what changed in the model itself (blocks, ops, attributes, shapes, dtypes, weights), "
                        "not the compilers' decisions; exit 0 (not with --gate)")
    d.add_argument("--model-fields", metavar="FIELDS",
                   help=f"what the model diff compares, comma-separated: {', '.join(MODEL_FIELDS)} (default all)")
    d.add_argument("--weight-rtol", metavar="X",
                   help="a weight whose change has a relative L2 at most X is unchanged (default 0: any change)")
    d.add_argument("--attribute-rtol", metavar="X",
                   help="numeric attributes closer than X relatively are equal (default 0)")
    d.add_argument("--gate", action="store_true",
                   help="exit 1 when something regressed (each regression listed), 0 when nothing did; 2 when base "
                        "and new are different models (see --allow-different-models)")
    d.add_argument("--allow-different-models", action="store_true",
                   help="gate even when base and new are different models (not the same file or file name, and "
                        "fewer than half of their source ops line up): targets are compared, not the same ops")
    from .review.gate import CONFIG_FILE, GateRules
    g = d.add_argument_group("gate rules", f"defaults, then {CONFIG_FILE} in the current folder (or --config), "
                                           "then these flags; -1 turns a count rule off")
    g.add_argument("--config", metavar="FILE", help=f"gate rules in TOML (default: ./{CONFIG_FILE} if present)")
    defaults = GateRules()
    for name, what in (("max_new_fallbacks", "CPU fallbacks a target may gain"),
                       ("max_to_cpu", "source ops that may move from an accelerator to the CPU"),
                       ("max_lost_fusions", "fusion instances a target may lose"),
                       ("max_op_increase", "compiled ops a target may gain"),
                       ("max_precision_changes", "source ops that may change precision"),
                       ("max_slower_nodes", "compiled nodes that may get 1.5× slower, measured on the same CPU")):
        g.add_argument("--" + name.replace("_", "-"), type=int, default=None, metavar="N",
                       help=f"{what} (default {getattr(defaults, name)})")
    g.add_argument("--max-share-loss", type=float, default=None, metavar="PTS",
                   help=f"fleet matrices: accelerated-share points a cell may lose (default {defaults.max_share_loss:g})")
    g.add_argument("--max-time-ratio", type=float, default=None, metavar="R",
                   help="fleet matrices: a cell's measured time new / base, same CPU (default off)")
    g.add_argument("--max-drift-ratio", type=float, default=None, metavar="R",
                   help=f"new / base rel L2 per output (default {defaults.max_drift_ratio:g})")
    g.add_argument("--drift-floor", type=float, default=None, metavar="X",
                   help=f"rel L2 below which drift is never a regression (default {defaults.drift_floor:g})")
    g.add_argument("--allow-checklist-worse", action="store_true", help="do not gate on checklist verdicts")
    g.add_argument("--gate-targets", metavar="IDS", help="gate only these comma-separated targets")
    _batch_parsers(sub)
    rs = sub.add_parser("runs", help="list the runs in the store ($XC_HOME)")
    rs.add_argument("--limit", type=int, default=30, metavar="N", help="newest N (default 30)")
    sub.add_parser("targets", help="list targets and whether each is available on this host")
    sub.add_parser("samples", help="list bundled sample models")
    from .review import COMMENT_MARKER as DEFAULT_MARKER
    c = sub.add_parser("comment", help="post Markdown as one pull-request comment, edited in place on later calls")
    c.add_argument("file", help="a Markdown file (- for standard input), or a run id, run folder or report.json "
                                "(posted as the report's Markdown)")
    c.add_argument("--pr", type=int, metavar="N", help="the pull request's number (default: the pull request of "
                   "the GitHub Actions event, from GITHUB_EVENT_PATH)")
    c.add_argument("--marker", default=DEFAULT_MARKER, metavar="'<!-- NAME -->'",
                   help=f"the hidden HTML comment that marks xc's comment (default {DEFAULT_MARKER}); another marker "
                        "keeps another comment, e.g. one per model")
    c.add_argument("--strict", action="store_true",
                   help="fail (exit 2) when the token may not write the comment; by default that is a warning and "
                        "exit 0, as for a pull request from a fork")
    # Where users meet xc outside the dashboard: the docs site, an assistant (MCP) and Google's Model Explorer.
    from . import docs_site, explorer, mcp_server
    for surface in (docs_site, mcp_server, explorer):
        surface.add_parser(sub)
    return p


def _limit_flags(parser: argparse.ArgumentParser) -> None:
    from .limits import LIMITS
    lim = parser.add_argument_group("limits", "bounds checked before a file is read or unpacked, or inputs "
                                              "allocated; each also has an environment variable")
    for key, spec in LIMITS.items():
        lim.add_argument(spec.flag, dest=key, type=int if spec.unit == "" else float, default=None,
                         metavar="N", help=f"{spec.what} (default {spec.default:g}{' ' + spec.unit if spec.unit else ''};"
                                           f" env {spec.env})")


def _worker_flags(parser: argparse.ArgumentParser, jobs_help: str) -> None:
    from .worker import DEFAULT_MEMORY_GIB, DEFAULT_TIMEOUT_S
    w = parser.add_argument_group("workers", "loading + capture, the reference and every target run in isolated "
                                             "worker processes; a crash, a hang or runaway memory becomes that "
                                             "target's error")
    w.add_argument("--jobs", type=int, default=None, metavar="N", help=jobs_help)
    w.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help=f"wall time per worker (default {DEFAULT_TIMEOUT_S:g}; env XC_TIMEOUT_S)")
    w.add_argument("--memory", type=float, default=None, metavar="GIB",
                   help=f"resident memory per worker (default {DEFAULT_MEMORY_GIB:g}; env XC_MEMORY_GIB)")


def _batch_parsers(sub) -> None:
    b = sub.add_parser("batch", help="analyse every model of a manifest for every target as one matrix "
                                     "(matrix.json, .md, .html); xc batch merge DIR... joins CI shards",
                       description="Every model of MANIFEST analysed for every target: DIR/matrix.json (one cell per "
                                   "model × target), matrix.md, matrix.html, and each model's report in DIR/runs/; "
                                   "every run is kept in the run store, and a model whose run is already there "
                                   "(same source, inputs, targets, options, limits and toolchain versions) is not "
                                   "compiled again (its cells say cached). `xc batch merge DIR... --out DIR` joins "
                                   "the outputs of --shard runs into one matrix.")
    b.add_argument("manifest", help="a text file of sources (one a line; # comments), a folder of model files, or "
                                    "a YAML file: models: [{source, name, inputs, shape, dim, value, range, "
                                    "options}], targets: [...]")
    b.add_argument("--targets", default=None, help="comma-separated target ids and variants, or all: every target, "
                                                   "the deprecated ones too (default: the YAML manifest's targets:, "
                                                   "else every target but those `xc targets` marks deprecated)")
    b.add_argument("--option", action="append", metavar="TARGET.KEY=VALUE",
                   help="a target option for every model, repeatable (a YAML model's own options win)")
    b.add_argument("--out", required=True, metavar="DIR", help="writes DIR/matrix.json, matrix.md, matrix.html and "
                                                               "DIR/runs/MODEL/report.json")
    b.add_argument("--shard", metavar="I/N", help="only the I-th of N deterministic slices of the manifest (every "
                                                  "N-th model from the I-th; the N shards cover it once)")
    b.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local: this machine's worker pool across models (default); ray: each model's analysis a "
                        "Ray task (--ray-address, or a Ray started here for the run)")
    b.add_argument("--ray-address", metavar="HOST:PORT", help="join this Ray cluster (default: start one here)")
    b.add_argument("--ray-cpus", type=float, default=1.0, metavar="N",
                   help="CPUs each model's task asks Ray for, and its worker processes at once (default 1)")
    b.add_argument("--ray-memory", type=float, default=2.0, metavar="GIB",
                   help="memory each model's task asks Ray for (default 2; the workers' --memory still bounds each "
                        "process)")
    b.add_argument("--no-cache", action="store_true", help="analyse every model again, even with a matching run "
                                                           "in the store")
    b.add_argument("--no-store", action="store_true", help="do not keep the runs in the store (nor reuse any)")
    b.add_argument("--quiet", action="store_true", help="no progress bar; print nothing but errors")
    _step_summary_flag(b)
    _worker_flags(b, "worker processes at once, across models (default: the machine's cores)")
    _limit_flags(b)
    m = sub.add_parser("batch-merge", prog="xc batch merge",
                       help="(as `xc batch merge DIR... --out DIR`) join the outputs of xc batch --shard runs")
    m.add_argument("dirs", nargs="+", metavar="DIR", help="xc batch --out folders (or their matrix.json)")
    m.add_argument("--out", required=True, metavar="DIR", help="writes DIR/matrix.json, matrix.md, matrix.html "
                                                               "and the shards' runs/")


def _step_summary_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--step-summary", action="store_true",
                        help="also append the Markdown to the GitHub Actions job summary ($GITHUB_STEP_SUMMARY), "
                             "whatever --format is")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["batch", "merge"]:      # `xc batch merge DIR...`: a manifest named merge is ./merge
        argv = ["batch-merge", *argv[2:]]
    args = build_parser().parse_args(argv)
    try:
        install_memory_guard()
        if args.command == "targets":
            return _targets()
        if args.command == "samples":
            return _samples()
        if args.command == "report":
            return _report(args)
        if args.command == "diff":
            return _diff(args)
        if args.command == "runs":
            return _runs(args)
        if args.command == "comment":
            return _comment(args)
        if args.command == "batch":
            return _batch(args)
        if args.command == "batch-merge":
            return _batch_merge(args)
        if args.command == "repro":
            return _repro(args)
        if args.command in ("docs", "mcp", "explorer"):
            from . import docs_site, explorer, mcp_server
            return {"docs": docs_site, "mcp": mcp_server, "explorer": explorer}[args.command].run(args)
        return _analyze(args)
    except XcInputError as e:
        print(f"xc: {printable_line(e.for_cli())}", file=sys.stderr)     # it may quote a file's or model's names
        return EXIT_USAGE
    except KeyboardInterrupt:
        # Ctrl-C anywhere else (while torch imports, reading a run, writing a report): what ran has unwound —
        # workers killed, scratch removed — on the way here.
        print("xc: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # noqa: BLE001 — a bug in xc: one line, the traceback on request
        environment = _environment_error(e, getattr(args, "out", None))
        if environment:      # a full disk, a read-only folder: the machine's to fix, not a bug in xc
            print(f"xc: {printable_line(environment)}", file=sys.stderr)
            return EXIT_USAGE
        if os.environ.get("XC_DEBUG"):
            raise
        from .errors import hide_paths
        text = hide_paths(str(e)).strip().splitlines()
        print(f"xc: internal error: {type(e).__name__}: {printable_line(text[0][:300]) if text else ''} (set "
              "XC_DEBUG=1 for the traceback)", file=sys.stderr)
        return EXIT_DIFF_INTERNAL if args.command == "diff" else EXIT_INTERNAL


# The machine's errors, not xc's: no space, a quota, a read-only or failing disk, no permission.
_ENVIRONMENT_ERRNOS = {"ENOSPC", "EDQUOT", "EROFS", "EFBIG", "EIO", "EACCES", "EPERM"}
_FULL_ERRNOS = {"ENOSPC", "EDQUOT", "EFBIG"}
# A full disk as the text of an error (a worker's arrives as text). torch's zip writer (torch.save, the capture's
# torch.export.save) checks its position after each record, so a write the full disk cut short reads only
# "[enforce fail at inline_container.cc:…] unexpected pos 8448 vs 8336".
_FULL_TEXT = re.compile(r"No space left on device|Disk quota exceeded|File too large|unexpected pos \d+ vs \d+|"
                        r"PytorchStreamWriter failed writing")
_READ_ONLY_TEXT = "Read-only file system"


def _environment_error(e: Exception, out: str | None = None) -> str | None:
    """One line for an error of the machine xc runs on (also when a worker met it: its error arrives as text), or
    None for anything else. A full disk names the folder that is full: the error's file when it has one, else the
    fuller of --out (`out`) and xc's data folder."""
    import errno

    from .errors import hide_paths
    from .paths import home
    elsewhere = "or write elsewhere (--out; XC_HOME for the run store and scratch), then run again"
    code = errno.errorcode.get(e.errno) if isinstance(e, OSError) else None
    if code in _ENVIRONMENT_ERRNOS:
        where = e.filename if isinstance(e.filename, str) and e.filename else ""
        # The user's own paths (--out, --md) are theirs to see; the scratch folders in xc's home are not.
        if where and os.path.abspath(where).startswith(home() + os.sep):
            where = f"{os.path.basename(where)} in xc's scratch folder"
        full = code in _FULL_ERRNOS
        if full and not where:
            where = _fullest_folder(out)
        return (f"{e.strerror or code}{f' ({where})' if where else ''} — "
                + ("free space " if full else "check the folder's permissions ") + elsewhere)
    text = hide_paths(str(e)).strip()
    if _FULL_TEXT.search(text):
        where = _fullest_folder(out)
        return f"No space left on device{f' ({where})' if where else ''} — free space {elsewhere}"
    if _READ_ONLY_TEXT in text:
        return f"{text.splitlines()[0][:240]} — check the folder's permissions {elsewhere}"
    return None


def _fullest_folder(out: str | None) -> str:
    """"FOLDER has N free" for whichever of --out (a folder, or a file's folder) and xc's data folder has the least
    space left — the one a write that found no space was most likely in; "" when neither can be measured."""
    import shutil

    from .paths import home
    measured = []
    for folder, named in ((out, None), (home(), "xc's data folder")):
        if not folder:
            continue
        probe = os.path.abspath(folder)
        while not os.path.isdir(probe) and os.path.dirname(probe) != probe:     # not created yet: its disk
            probe = os.path.dirname(probe)
        try:
            free = shutil.disk_usage(probe).free
        except OSError:
            continue
        measured.append((free, f"{named} {folder}" if named else folder))
    if not measured:
        return ""
    free, folder = min(measured, key=lambda m: m[0])      # --out first among equals: the user's own folder
    return f"{folder} has {_size(free)} free"


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def render(report: dict, fmt: str, full: bool = False) -> str:
    """The report as md (a PR comment; `full`: every table whole), html (one offline file) or json (as written by
    analyze)."""
    if fmt == "md":
        from .review.markdown import report_markdown
        return report_markdown(report, full=full)
    if fmt == "html":
        from .review.html import report_html
        return report_html(report)
    return json.dumps(report, indent=1) + "\n"


def _write(text: str, out: str | None) -> None:
    if not out:
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:     # the reader went away (`| head`): nothing is wrong, and nothing more to say
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError as e:
            raise XcInputError(f"cannot write to standard output ({e.strerror})") from None
        return
    try:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise XcInputError(f"{out}: cannot write ({e.strerror})") from None


def _model_explorer(report: dict, out: str | None) -> None:
    """The Model Explorer export into a folder, or a .zip; its README.txt says how to open it."""
    from .export.model_explorer import model_explorer_zip, write_model_explorer
    if not out or out == "-":
        raise XcInputError("--format model-explorer writes several files: give --out DIR (a folder, created) or "
                           "--out FILE.zip")
    try:
        if out.lower().endswith(".zip"):
            with open(out, "wb") as f:
                f.write(model_explorer_zip(report))
            written = out
        else:
            paths = write_model_explorer(report, out)
            written = f"{len(paths)} files in {out}"
    except OSError as e:
        raise XcInputError(f"{out}: cannot write ({e.strerror})") from None
    print(f"Model Explorer export: {printable_line(written)} (README.txt says how to open it)", file=sys.stderr)


def _report(args) -> int:
    from .review.runs import load_run
    report = load_run(args.run).report
    if args.format == "model-explorer":
        _model_explorer(report, args.out)
    else:
        _write(render(report, args.format, full=args.full), args.out)
    if args.step_summary:
        _append_step_summary(render(report, "md"))
    return EXIT_OK


def _append_step_summary(markdown: str) -> None:
    """Append to the GitHub Actions job summary. Outside Actions (no $GITHUB_STEP_SUMMARY) one line says so and
    nothing else changes."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        print("xc: --step-summary: GITHUB_STEP_SUMMARY is not set (not in a GitHub Actions job); no summary written",
              file=sys.stderr)
        return
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(markdown.rstrip("\n") + "\n\n")
    except OSError as e:
        raise XcInputError(f"GITHUB_STEP_SUMMARY: cannot append to {os.path.basename(path)} ({e.strerror})") from None


def _comment(args) -> int:
    from .review.github import CommentError, post_sticky_comment
    markdown = _comment_markdown(args.file)
    pr = args.pr if args.pr is not None else _event_pr_number()
    try:
        outcome = post_sticky_comment(markdown, pr, marker=args.marker, strict=args.strict)
    except CommentError as e:
        raise XcInputError(str(e)) from None
    print(f"xc: {printable_line(outcome.message)}", file=sys.stderr)
    return EXIT_OK


# What `xc comment` reads of a Markdown file: far more than a comment holds (it is cut to GitHub's 65,536
# characters), far less than a mistaken path to a disk image.
MAX_COMMENT_SOURCE_BYTES = 16 << 20


def _comment_markdown(ref: str) -> str:
    """The comment's text: a Markdown file as it is, or a run rendered as the report's Markdown."""
    if ref == "-":
        return sys.stdin.read(MAX_COMMENT_SOURCE_BYTES + 1)[:MAX_COMMENT_SOURCE_BYTES]
    if os.path.lexists(ref) and not os.path.isdir(ref) and not ref.endswith(".json"):
        # Read as any file xc is handed: a regular file inside its folder, bounded — a report.md that is a symlink
        # to /proc/self/environ must not post the job's environment (its token) as a comment.
        from .safe_files import read_regular
        data = read_regular(ref, root=os.path.dirname(os.path.abspath(ref)), max_bytes=MAX_COMMENT_SOURCE_BYTES)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise XcInputError(f"{printable_line(os.path.basename(ref))}: not UTF-8 text (accepted: a Markdown file, "
                               "or a run id, run folder or report.json)") from None
    from .review.runs import load_run
    return render(load_run(ref).report, "md")


def _event_pr_number() -> int:
    """The pull request a GitHub Actions job runs for (GITHUB_EVENT_PATH's pull_request.number)."""
    from .review.github import CommentError, pull_request_number
    accepted = "give --pr N, or run in a GitHub Actions job triggered by a pull request"
    path = os.environ.get("GITHUB_EVENT_PATH")
    if not path:
        raise XcInputError(f"comment: no pull request number — {accepted}")
    try:
        number = pull_request_number(path)
    except CommentError as e:
        raise XcInputError(f"comment: {e} — {accepted}") from None
    if number is None:
        raise XcInputError(f"comment: the Actions event is not a pull request's — {accepted}")
    return number


# What `--model-fields` accepts (review/model_diff.py's ModelDiffOptions.fields).
MODEL_FIELDS = ("ops", "attributes", "shapes", "dtypes", "weights")


def _diff(args) -> int:
    from .fleet.diff import check_matrix_pair, looks_like_matrix
    from .review.diff import diff_markdown, diff_reports, diff_text, different_models
    from .review.gate import regressions
    from .review.runs import load_run
    check_matrix_pair(args.base, args.new)
    model_flags = [flag for flag, value in (("--model-only", args.model_only), ("--model-fields", args.model_fields),
                                            ("--weight-rtol", args.weight_rtol),
                                            ("--attribute-rtol", args.attribute_rtol),
                                            ("--format html", args.format == "html")) if value]
    if looks_like_matrix(args.base):
        if model_flags:
            raise XcInputError(f"{model_flags[0]}: for a diff of two runs, not of two fleet matrices (accepted "
                               "there: --format text, md or json and the gate flags)")
        return _fleet_diff(args, _gate_rules(args))
    if args.model_only and args.gate:
        raise XcInputError("--model-only with --gate: the gate judges the compilers' decisions, --model-only leaves "
                           "them out — drop one of the two")
    options = _model_diff_options(args)
    base, new = load_run(args.base), load_run(args.new)
    from .review.model_diff import model_diff_of_runs
    model = model_diff_of_runs(base, new, options)
    if args.model_only:
        _emit_model_diff(args, model, base.label, new.label)
        return EXIT_OK
    rules, per_target = _gate_rules(args)
    d = diff_reports(base.report, new.report, model=model)
    d["base"]["label"], d["new"]["label"] = base.label, new.label
    if args.gate and different_models(d) and not args.allow_different_models:
        raise XcInputError(f"{different_models(d)}; not gating one model against another (a wrong baseline?) — "
                           "pass --allow-different-models to gate anyway")
    regs = regressions(d, rules, per_target) if args.gate else None
    _emit_diff(args, d, regs, diff_markdown, diff_text, lambda r: r["target"], to_html=_diff_html)
    return EXIT_REGRESSED if regs else EXIT_OK


def _diff_html(d: dict, regs: list | None) -> str:
    from .review.diff_html import diff_html     # only when asked: it loads the HTML report's helpers (plotly)
    return diff_html(d, regs)


def _model_diff_options(args):
    """ModelDiffOptions from --model-fields, --weight-rtol and --attribute-rtol; a bad value is one line naming
    what is accepted."""
    import math

    from .review.model_diff import ModelDiffOptions
    kwargs = {}
    if args.model_fields is not None:
        fields = [f.strip().lower() for f in args.model_fields.split(",") if f.strip()]
        unknown = [f for f in fields if f not in MODEL_FIELDS]
        if unknown or not fields:
            raise XcInputError(f"--model-fields {args.model_fields!r}: "
                               + (f"{unknown[0]!r} is not a field" if unknown else "no field given")
                               + f" (accepted: a comma-separated subset of {','.join(MODEL_FIELDS)})")
        kwargs["fields"] = tuple(dict.fromkeys(fields))
    for flag, key in (("--weight-rtol", "weight_rtol"), ("--attribute-rtol", "attribute_rtol")):
        raw = getattr(args, key)
        if raw is None:
            continue
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0:
            raise XcInputError(f"{flag} {raw!r}: not accepted (a number ≥ 0, a relative tolerance, e.g. 1e-6)")
        kwargs[key] = value
    return ModelDiffOptions(**kwargs)


def _emit_model_diff(args, model: dict, base_label: str, new_label: str) -> None:
    """`diff --model-only`: the model diff alone, as --format asks (and to the job summary)."""
    from .review.model_diff_text import model_changes_markdown, model_changes_text
    if args.format == "json":
        _write(json.dumps(model, indent=1) + "\n", args.out)
    elif args.format == "html":
        from .review.diff_html import model_diff_html
        _write(model_diff_html(model, base_label, new_label), args.out)
    else:
        _write((model_changes_markdown if args.format == "md" else model_changes_text)(model), args.out)
    if args.step_summary:
        _append_step_summary(model_changes_markdown(model))


def _batch(args) -> int:
    import signal
    import threading
    import time

    from .fleet.batch import BatchSettings, run_batch
    from .fleet.manifest import parse_shard, read_manifest, shard
    from .limits import LIMITS, Limits
    from .targets import parse_target_options
    from .worker import WorkerLimits
    manifest = read_manifest(args.manifest)
    targets = requested_targets(args.targets, manifest.targets)
    parse_target_options(args.option, targets)          # a bad --option is said now, not once per model
    if args.jobs is not None and args.jobs < 1:
        raise XcInputError(f"--jobs {args.jobs}: must be at least 1")
    if args.ray_cpus <= 0 or args.ray_memory <= 0:
        raise XcInputError("--ray-cpus and --ray-memory must be more than 0")
    if args.backend == "local" and args.ray_address:
        raise XcInputError("--ray-address is for --backend ray")
    part = parse_shard(args.shard) if args.shard else None
    models = shard(manifest.models, *part) if part else manifest.models
    settings = BatchSettings(
        targets=targets, out_dir=args.out, options=list(args.option or []), backend=args.backend, jobs=args.jobs,
        limits=Limits.from_env(**{k: getattr(args, k) for k in LIMITS}),
        worker_limits=WorkerLimits.from_env(args.timeout, args.memory), reuse=not (args.no_cache or args.no_store),
        record=not args.no_store, ray_address=args.ray_address, ray_cpus=args.ray_cpus,
        ray_memory_gib=args.ray_memory)
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        raise XcInputError(f"--out {args.out}: cannot create the directory ({e.strerror})") from None
    if args.backend == "local":
        from .targets import worker_modules
        from .worker import preload_only
        preload_only(worker_modules(targets))
    if args.backend == "ray" and args.ray_address:
        from .fleet.ray_backend import check_reachable
        check_reachable(args.ray_address)              # before any model is planned: one line, at once
    total = len(models) * len(targets)
    bar = _batch_bar(total, args.quiet)
    started, counted = time.monotonic(), {"cells": 0, "compiled": 0}

    def on_model(row, cells):
        bar.update(len(cells))
        counted["cells"] += len(cells)
        reused = sum(1 for c in cells if c["cached"])
        counted["compiled"] += len(cells) - reused
        if args.quiet:
            return
        ok = sum(c["status"] == "ok" for c in cells)
        where = f" on {row['node']}" if row.get("node") else ""
        what = "cached" if row["cached"] else f"{row['seconds']:.1f} s{where}" + (f", {reused} cached" if reused
                                                                                   else "")
        # The ETA from the cells compiled so far (cached ones take no time); the bar shows it on a terminal.
        elapsed = time.monotonic() - started
        left = total - counted["cells"]
        eta = f", about {_duration(elapsed / counted['compiled'] * left)} left" if counted["compiled"] and left \
            else ""
        name = printable_line(row["name"])
        bar.write(f"[{counted['cells']}/{total} cells{eta}] {name}: {ok}/{len(cells)} ok ({what})"
                  + (f" — {printable_line(row['error'])}" if row["error"] else ""), file=sys.stderr)

    class _Stopped(BaseException):
        pass

    def _stop(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise _Stopped
    on_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stop) if on_main else None
    try:
        matrix = run_batch(manifest, models, settings, shard=part, on_model=on_model)
    except XcInputError:
        bar.close()
        raise
    except (_Stopped, KeyboardInterrupt) as e:
        bar.close()
        print(f"xc: batch stopped; the models that finished are in {os.path.join(args.out, 'matrix.json')} and "
              "the run store — run the same command again to go on from there", file=sys.stderr)
        return 128 + (signal.SIGTERM if isinstance(e, _Stopped) else signal.SIGINT)
    finally:
        if on_main:
            signal.signal(signal.SIGTERM, previous)
    bar.close()
    return _write_matrix_files(matrix, args.out, args.quiet, args.step_summary)


def _batch_bar(total: int, quiet: bool):
    """A progress bar over the matrix's cells, with an ETA, on a terminal's stderr; none in a CI log (each model's
    line says how far the batch is)."""
    from tqdm import tqdm
    return tqdm(total=total, unit="cell", disable=quiet or not sys.stderr.isatty(), file=sys.stderr, leave=False,
                mininterval=1.0, smoothing=0.1, bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} cells "
                                                           "[{elapsed}<{remaining}]")


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60}:{seconds % 60:02d}"


def _write_matrix_files(matrix: dict, out: str, quiet: bool, step_summary: bool) -> int:
    from .fleet.matrix import write_matrix
    from .fleet.render import matrix_html, matrix_markdown, summary_line
    write_matrix(matrix, out)
    markdown = matrix_markdown(matrix)
    _write(markdown, os.path.join(out, "matrix.md"))
    _write(matrix_html(matrix), os.path.join(out, "matrix.html"))
    if step_summary:
        _append_step_summary(markdown)
    if not quiet:
        print(summary_line(matrix))
        print(f"wrote {printable_line(os.path.join(out, 'matrix.json'))}, matrix.md and matrix.html")
    return EXIT_OK


def _batch_merge(args) -> int:
    from .fleet.merge import merge_batches
    matrix = merge_batches(args.dirs, args.out)
    return _write_matrix_files(matrix, args.out, False, False)


def _gate_rules(args):
    from .review.gate import load_rules
    overrides = {k: getattr(args, k) for k in ("max_new_fallbacks", "max_to_cpu", "max_lost_fusions",
                                               "max_op_increase", "max_precision_changes", "max_slower_nodes",
                                               "max_drift_ratio", "drift_floor", "max_share_loss", "max_time_ratio")}
    if args.allow_checklist_worse:
        overrides["checklist_worse"] = False
    if args.gate_targets:
        overrides["targets"] = [t.strip() for t in args.gate_targets.split(",") if t.strip()]
    return load_rules(args.config, overrides)


def _fleet_diff(args, rules) -> int:
    """`xc diff` of two batch outputs: per cell what changed; with --gate what regressed."""
    from .fleet.diff import diff_markdown, diff_matrices, diff_text, fleet_regressions
    from .fleet.matrix import read_matrix
    d = diff_matrices(read_matrix(args.base), read_matrix(args.new))
    regs = fleet_regressions(d, *rules) if args.gate else None
    _emit_diff(args, d, regs, diff_markdown, diff_text, lambda r: f"{r['model']} × {r['target']}")
    return EXIT_REGRESSED if regs else EXIT_OK


def _emit_diff(args, d: dict, regs: list | None, to_markdown, to_text, where, to_html=None) -> None:
    """A diff (of two runs or two matrices) as asked: --format to --out or stdout, the job summary, and the
    regressions in one line on stderr."""
    if args.format == "json":
        _write(json.dumps({**d, "regressions": regs}, indent=1) + "\n", args.out)
    elif args.format == "html":         # two runs only: _diff refuses it for fleet matrices
        _write(to_html(d, regs), args.out)
    else:
        _write((to_markdown if args.format == "md" else to_text)(d, regs), args.out)
    if args.step_summary:
        _append_step_summary(to_markdown(d, regs))
    if regs:
        print(f"xc: {len(regs)} regression(s): "
              + printable_line("; ".join(f"{where(r)}: {r['what']}" for r in regs))[:2000], file=sys.stderr)


def _runs(args) -> int:
    import datetime

    from .store import RunStore
    store = RunStore()
    rows = store.runs()[:max(0, args.limit)]
    if not rows:
        print(f"no runs in {printable_line(store.root)}")
    for r in rows:
        when = datetime.datetime.fromtimestamp(r["created"]).strftime("%Y-%m-%d %H:%M")
        s = r["summary"]
        # Runs stored before run summaries existed have none: their columns read "—".
        verdicts = " ".join(f"{s['verdicts'].get(v, 0)} {v}" for v in ("fail", "warn", "pass")) if s else "—"
        status = f"{s['ok']} ok / {s['error']} failed" if s else "—"
        name = printable_line(r["source_name"] or "?")[:32]      # a model's file name: it may hold an escape
        print(f"{printable_line(r['key'][:12])}  {when}  {name:32}  {printable_line(s.get('origin', '—')):9}  "
              f"{status:18}  {verdicts:22}  {printable_line(r['targets'])}")
    return EXIT_OK


def requested_targets(flag: str | None, manifest_targets: list[str] | None = None) -> list[str]:
    """The targets a run compiles: --targets as given (all: every registered target), else a manifest's
    targets:, else the default set (every target but the deprecated ones)."""
    from .targets import default_target_ids, parse_target_list
    if flag is not None:
        return parse_target_list(flag)
    if manifest_targets:
        return parse_target_list(",".join(manifest_targets))
    return default_target_ids()


def _targets() -> int:
    from .targets import REGISTRY, target_ids
    for tid in target_ids():
        cls = REGISTRY[tid]
        ok, why = cls.available()
        print(f"{tid:16} {'available' if ok else 'unavailable: ' + printable_line(why):40} {cls.description}")
        if cls.deprecated:
            print(f"{'':18}deprecated: {cls.deprecated} (not in the default set; runs when named, or with "
                  "--targets all)")
        for opt in cls.option_specs():      # read off the target's Options dataclass
            also = f" (also {', '.join(opt.aliases)})" if opt.aliases else ""
            print(f"{'':18}[{opt.name}=…]{also}  {opt.help}")
    print("\nA target listed with options is a variant with its own column, e.g.\n"
          "  --targets \"ort-cpu,ort-cpu[level=basic],openvino-cpu[precision=f32],coreml-ane[precision=fp32]\"")
    return EXIT_OK


def _samples() -> int:
    from .sources.samples import DEFAULT_SAMPLE, SAMPLES
    for name, s in SAMPLES.items():
        ins = ", ".join(f"{i.name} {i.dtype}{list(i.shape)}" for i in s.inputs)
        print(f"sample:{name:18} {s.description} (inputs: {ins}){' [default]' if name == DEFAULT_SAMPLE else ''}")
    return EXIT_OK


GATE_HELP = ("a per-op gate, repeatable: rel_l2, max_abs, mse (at most) or cosine, snr_db, psnr_db, pearson (at "
             "least) = a number, or NAME=off (default: rel_l2=0.01, cosine=0.999; int8 targets rel_l2=0.1, "
             "cosine=0.99)")


def _isolation_flags(a) -> None:
    a.add_argument("--isolate", action="store_true",
                   help="also compile every op on its own with the reference's inputs (its local error) and, where "
                        "a target's output drift is above the gate, find the smallest range of ops that reproduces "
                        "it, with a repro bundle (artifacts/TARGET/repro/); one extra compile per target, about "
                        "2·log2(ops) more where it searches")
    a.add_argument("--isolate-targets", metavar="LIST", help="with --isolate: only these targets (default: every "
                   "target that ran numbers)")
    a.add_argument("--gate", action="append", metavar="NAME=VALUE", help=GATE_HELP)


def _repro(args) -> int:
    """xc repro RUN --target T: the culprit's bundle copied to --out; isolation runs first where the run has none
    for T (a stored run is put back with it; a run folder's report.json is rewritten)."""
    import shutil

    from .culprit.metrics import parse_gates
    from .culprit.run import isolate_report, isolate_stored
    from .report.sidecar import write as write_report
    from .review.runs import load_run
    gates = parse_gates(args.gate) if args.gate else None
    run = load_run(args.run)
    target = _run_target(run.report, args.target)
    if not (target.get("isolation") or {}).get("culprit") or args.gate:
        print(f"isolating ops on {target.get('identity') or target['id']} …", file=sys.stderr)
        if run.key:
            report = isolate_stored(run.key, [args.target], gates)
            run = load_run(run.key)
        elif os.path.isdir(args.run):
            report = isolate_report(run.report, args.run, [args.target], gates)
            write_report(report, args.run)
            run = load_run(args.run)
        else:
            raise XcInputError(f"{args.run}: a report.json alone has no captured program to isolate (accepted: "
                               f"a run id or a run folder)")
        target = _run_target(run.report, args.target)
    culprit = (target.get("isolation") or {}).get("culprit") or {}
    if culprit.get("status") != "found":
        print(f"xc: {printable_line(target.get('identity') or target['id'])}: no culprit: "
              f"{printable_line(culprit.get('why') or (target.get('isolation') or {}).get('error') or 'none found')}",
              file=sys.stderr)
        return 1
    repro = culprit.get("repro") or {}
    out = args.out or f"xc-repro-{(target.get('identity') or target['id']).replace('[', '-').replace(']', '')}"
    prefix = (repro.get("folder") or "").rstrip("/") + "/"
    files = {rel[len(prefix):]: path for rel, path in run.files.items() if rel.startswith(prefix)}
    if not files:
        raise XcInputError(f"{args.run}: the repro bundle of {args.target} is not among the run's files")
    for rel, path in files.items():
        dest = os.path.join(out, rel)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(path, dest)
    print(printable_line(culprit.get("sentence") or ""))
    how = f"cd {out} && python {repro['script']}" if repro.get("script") else (repro.get("no_script") or "")
    print(f"wrote {len(files)} file(s) to {printable_line(out)}; {printable_line(how)}")
    if repro.get("tracker"):
        print(f"file it at {printable_line(repro['tracker'])} (BUG_REPORT.md)")
    return 0


def _run_target(report: dict, name: str) -> dict:
    targets = report.get("targets") or {}
    for key, t in targets.items():
        if name in (key, t.get("identity"), t.get("id")):
            return {**t, "identity": t.get("identity") or key}
    raise XcInputError(f"--target {printable_line(name)}: not a target of this run; it has {', '.join(targets)}")


def _analyze(args) -> int:
    from .api import analyze
    from .inputs.values import (
        parse_dim_flags,
        parse_range_flags,
        parse_shape_flags,
        parse_value_flags,
    )
    from .limits import LIMITS, Limits
    from .targets import parse_target_options
    targets = requested_targets(args.targets)
    options = parse_target_options(args.option, targets)
    shapes = parse_shape_flags(args.shape)
    limits = Limits.from_env(**{k: getattr(args, k) for k in LIMITS})
    from .worker import WorkerLimits
    worker_limits = WorkerLimits.from_env(args.timeout, args.memory)
    if args.jobs is not None and args.jobs < 1:
        raise XcInputError(f"--jobs {args.jobs}: must be at least 1")
    if args.inputs and not os.path.isfile(args.inputs):
        raise XcInputError(f"--inputs {args.inputs}: no such file (accepted: an .npz written by numpy.savez)")
    culprits = None
    if args.isolate or args.isolate_targets or args.gate:
        from .culprit.metrics import parse_gates
        from .targets import split_target_list
        if not args.isolate:
            raise XcInputError("--isolate-targets and --gate go with --isolate")
        culprits = {"targets": split_target_list(args.isolate_targets) if args.isolate_targets else None,
                    "gates": parse_gates(args.gate) if args.gate else None}
    made_out = args.out is None
    if made_out:
        args.out = new_out_dir(args.source)
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        raise XcInputError(f"--out {args.out}: cannot create the directory ({e.strerror})") from None
    from .paths import sweep_stale_work
    sweep_stale_work(args.out)      # workers' job folders a killed run left (kill -9: its cleanup never ran)

    def progress(ev):
        line = None if args.quiet else cli_line(ev)
        if line:
            print(visible(line), file=sys.stderr)     # a target's error quotes the model's names

    # SIGTERM (a cancelled CI job, `kill`) and Ctrl-C unwind alike: the workers' process groups are killed and the
    # scratch folders removed on the way out; then one line, and exit 143 or 130 (128 + the signal, as a shell
    # reports it).
    import signal
    import threading

    class _Stopped(BaseException):
        pass

    def _stop(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)     # a second SIGTERM must not cut the cleanup short
        raise _Stopped
    on_main = threading.current_thread() is threading.main_thread()    # handlers only go there
    previous = signal.signal(signal.SIGTERM, _stop) if on_main else None
    report = reused = stopped = None
    try:
        reused = report = _stored_run(args, targets, options, shapes, limits) if args.reuse else None
        if report is None:
            # This process runs one analysis: its workers' forkserver imports only what the requested targets need.
            from .targets import worker_modules
            from .worker import preload_only
            preload_only(worker_modules(targets))
            report = analyze(args.source, targets, inputs_npz=args.inputs, shapes=shapes,
                             dims=parse_dim_flags(args.dim), values=parse_value_flags(args.value),
                             ranges=parse_range_flags(args.range), out_dir=args.out, target_options=options,
                             progress=progress, limits=limits, worker_limits=worker_limits, jobs=args.jobs,
                             culprits=culprits, data=args.data, preprocess=args.preprocess, task=args.task,
                             metric=args.metric, top_k=args.top_k)
    except (_Stopped, KeyboardInterrupt) as e:
        stopped = e
    finally:
        if on_main:
            signal.signal(signal.SIGTERM, previous)
        if made_out and report is None:     # a refused source leaves no empty folder of ours behind
            for empty in (args.out, DEFAULT_OUT_ROOT):
                try:
                    os.rmdir(empty)
                except OSError:             # not empty (written to, or other runs' folders): keep it
                    break
    if isinstance(stopped, _Stopped):
        print("xc: stopped by SIGTERM; workers stopped, scratch removed", file=sys.stderr)
        return 128 + signal.SIGTERM
    if stopped is not None:
        kept = (f"; {printable_line(args.out)} keeps the files written so far (no new report.json)"
                if os.path.isdir(args.out) and os.listdir(args.out) else ", nothing written")
        print(f"xc: interrupted; workers stopped, scratch removed{kept}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if reused is None and not args.no_store:
        _record(args, report, targets, options, shapes, limits)
    return _finish(args, report, made_out)


def _finish(args, report: dict, made_out: bool) -> int:
    """What every analysis ends with: the reviewer's files, then the tables (unless --quiet)."""
    for fmt, path in (("md", args.md), ("html", args.html)):
        if path:
            _write(render(report, fmt, full=getattr(args, "md_full", False)), path)
    if not args.quiet:
        print(inputs_table(report))
        print(summary_table(report))
        print(time_lines(report))
        from .views.cost import cost_text
        for line in cost_text(report).splitlines():     # memory, size, compile / load / inference time on this host
            print(visible(line))
        print(checklist_table(report))
        from .views.accuracy import accuracy_lines
        for tid, sentence, evidence in accuracy_lines(report):      # --data: one line per target
            print(f"accuracy: {printable_line(tid)}: {visible(sentence)}" + (f" ({evidence})" if evidence != "—" else ""))
        from .views.isolation import culprit_lines
        for line in culprit_lines(report):
            print(f"culprit: {visible(line)}")
        if (report.get("run") or {}).get("isolation_error"):
            print(f"no isolation: {visible(report['run']['isolation_error'])}")
        # Said at the end, once: a source refused on the way has one line of its own, and no folder is left.
        print(f"wrote {printable_line(os.path.join(args.out, 'report.json'))}"
              + (f" (no --out given: a new folder in ./{DEFAULT_OUT_ROOT})" if made_out else ""))
    return EXIT_OK


def new_out_dir(source: str, root: str = DEFAULT_OUT_ROOT, now: float | None = None) -> str:
    """Create and return root/<model>-<YYYYmmdd-HHMMSS>[-N]: named after the model so `ls` tells runs apart, dated
    so they sort, and created here (exist_ok=False), so two runs in one second, or in parallel, get two folders."""
    import re
    import time
    stem = source.split(":", 1)[1] if source.startswith("sample:") else os.path.basename(source.rstrip("/\\"))
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.splitext(stem)[0]).strip("._-")[:48] or "model"
    base = os.path.join(root, f"{stem}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}")
    try:
        os.makedirs(root, exist_ok=True)
        for n in range(1, 1000):
            path = base if n == 1 else f"{base}-{n}"
            try:
                os.mkdir(path)
                return path
            except FileExistsError:
                continue
    except OSError as e:
        raise XcInputError(f"cannot create an output folder in ./{root} ({e.strerror}); give one with --out") from None
    raise XcInputError(f"./{root}: every folder name for {os.path.basename(base)} is taken; give one with --out")


def _run_keys(args, source_sha: str, targets, options, shapes, limits) -> tuple[dict[str, str], str]:
    """This analysis's cell keys (target identity → key) and run key, by the recipe the dashboard and `xc batch`
    use too (xc_core/run_keys.py), so a run any of them stored is found here."""
    from .inputs.values import parse_dim_flags, parse_range_flags, parse_value_flags
    from .run_keys import cell_keys, inputs_digest, request_parts, run_key_of
    from .worker import WorkerLimits
    from .inputs.dataset import dataset_key
    parts = request_parts(source_sha, inputs_digest(args.inputs), shapes=shapes, dims=parse_dim_flags(args.dim),
                          values=parse_value_flags(args.value), ranges=parse_range_flags(args.range), limits=limits,
                          dataset=dataset_key(getattr(args, "data", None), getattr(args, "preprocess", None),
                                              getattr(args, "task", None), getattr(args, "metric", None),
                                              getattr(args, "top_k", None)))
    cells = cell_keys(parts, targets, options)
    return cells, run_key_of(cells, WorkerLimits.from_env(args.timeout, args.memory))


def _stored_run(args, targets, options, shapes, limits) -> dict | None:
    """--reuse: the stored run this analysis would make again, written to --out; None when there is none (or the
    store cannot be read), and the analysis runs. Found by its run key (the same request under the same worker
    limits, made here, in the dashboard or by `xc batch`), else by its cells (the same targets, made under other
    worker limits, none of them stopped by one)."""
    from .run_keys import source_digest
    from .store import RunStore
    try:
        source_sha = source_digest(args.source)
    except XcInputError:
        return None         # not a file: the analysis says why
    cells, key = _run_keys(args, source_sha, targets, options, shapes, limits)
    try:
        store = RunStore()
        report = store.get(key) if store.available else None
        if report is None and store.available:
            found = store.run_with_cells(cells)
            report = store.get(found) if found else None
            key = found or key
        if report is None:
            return None
        store.materialize(key, args.out)
    except OSError as e:
        print(f"xc: warning: --reuse: the run store could not be read ({printable_line(e)}); analysing",
              file=sys.stderr)
        return None
    if not args.quiet:
        print(f"reused run {key[:12]} from the store (--reuse: same source, inputs, targets, options, limits and xc "
              "version, whoever made it); nothing compiled", file=sys.stderr)
    return report


def _record(args, report: dict, targets, options, shapes, limits) -> None:
    """Keep the run in the store (history, re-opening in the dashboard). A store that cannot be written is a
    warning, not a failed analysis."""
    from .report.sidecar import write as write_report
    from .store import RunStore
    try:
        from .run_keys import source_digest
        cells, key = _run_keys(args, source_digest(args.source), targets, options, shapes, limits)
        report.setdefault("run", {})["key"] = key      # report.json names its run: `report ID`, `?run=ID`
        report["run"]["cell_keys"] = cells              # each target alone: a batch or the dashboard reuses it
        write_report(report, args.out)
        RunStore().put(key, report, args.out, origin="cli")
        if not args.quiet:
            print(f"recorded as run {key[:12]} (xc report {key[:12]}; dashboard ?run={key[:12]})",
                  file=sys.stderr)
    except (OSError, ValueError) as e:      # XcInputError too (a ValueError)
        print(f"xc: warning: the run was not recorded in the store ({printable_line(e)})", file=sys.stderr)


def inputs_table(report: dict) -> str:
    from .views.rows import input_rows, probe_rows
    lines = ["inputs:"]
    for r in input_rows(report):
        lines.append(f"  {r['input']} {r['shape']} {r['dtype']} — shape from {r['shape from']}, values from "
                     f"{r['values from']}" + (f"; {r['note']}" if r["note"] else ""))
    for p in probe_rows(report):
        if not p["result"].startswith("ran"):
            lines.append(f"  tried {p['tried']}: {p['result']}")
    from .sources.facts import source_fact_lines
    lines += [f"  {line}" for line in source_fact_lines(report)]      # a .tflite's labels, a Core ML spec's facts
    ref = report.get("reference") or {}
    if ref.get("status") == "error":
        from .analysis.common_cause import causes, set_inputs_advised
        # Its error is said once, as the run's common cause under the table; the flags only when the failure is
        # about the inputs.
        said_below = any(c.get("reference_failed") for c in causes(report))
        lines.append("  the reference failed with these inputs"
                     + (" (why: under the table)" if said_below else f": {ref.get('error')}")
                     + (" — set them with --shape, --dim, --value or --inputs" if set_inputs_advised(report) else ""))
    return "\n".join(visible(line) for line in lines) + "\n"      # input names, notes, errors: the model's text


def summary_table(report: dict) -> str:
    """The targets as an aligned table, after what its drift column cannot tell: the ONNX → PyTorch route's own
    error (xc's, said once) and a reference or figure that cannot tell targets apart."""
    from .views.rows import drift_flags, overview_rows, route_headline
    first = [f"ONNX → PyTorch route (measured): {route_headline(report)}"] if route_headline(report) else []
    first += [f"warning: {flag}" for flag in drift_flags(report)]
    from .views.compute_share import WEIGHTED_COLUMN
    from .views.target_counts import SPLIT_COLUMN, count_findings
    rows = overview_rows(report)
    cols = ["target", "status", "ops", "fused groups", "precision", "worst drift (rel L2)"]
    # An accelerated target's split of its compiled ops, in the words of the dashboard and the Markdown.
    extra = [SPLIT_COLUMN, WEIGHTED_COLUMN, "partitions", "ORT verdict", "latency cliff (est.)", "Core ML units", "casts", "MIL ops"]
    cols += [c for c in extra if any(c in r for r in rows)] + ["evidence"]
    # A terminal table, aligned; Markdown for a PR comment is `--md FILE` / `report RUN --format md`.
    cells = [cols] + [[printable_line(r.get(c, "—")) for c in cols] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(cols))]
    lines = [printable_line(line) for line in first]
    lines += ["  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in cells]
    # A runtime's own count that xc's placement does not match: one labelled finding per target, under the table.
    lines += [f"{printable_line(tid)}: {printable_line(finding)}" for tid, finding in count_findings(report)]
    from .analysis.advice import advice_line
    from .analysis.common_cause import NOT_RUN, cause_line, causes, covered_targets
    # A cause several targets share is said once; the targets it stopped say "not run: see above".
    lines += [f"error: {printable_line(cause_line(c))}" for c in causes(report)]
    covered = covered_targets(report)
    for r in rows:
        if r["target"] in covered:
            lines.append(f"{printable_line(r['target'])}: {NOT_RUN}")
        elif r.get("error"):
            lines.append(f"{printable_line(r['target'])}: {printable_line(r['error'])}")
            advice = advice_line((report["targets"].get(r["target"]) or {}).get("advice"))
            if advice:
                lines.append(f"  ↳ {printable_line(advice)}")
    return "\n".join(lines)


def time_lines(report: dict) -> str:
    """Where the time goes, a line per target that timed its nodes (the Overview's table, for the terminal)."""
    from .views.rows import time_rows
    from .views.time_evidence import is_estimated
    rows = time_rows(report)
    if not rows:
        return ""
    node_times = {tid: t.get("node_times") or {} for tid, t in report["targets"].items()}
    # Measured targets under one heading; a compiler's estimates (Vela for Ethos-U) under their own, one per
    # modelled device: an estimate is never listed as if it were measured on this host.
    measured = [r for r in rows if not is_estimated(node_times[r["target"]])]
    estimated: dict[str, list[dict]] = {}
    for r in rows:
        if is_estimated(node_times[r["target"]]):
            estimated.setdefault(node_times[r["target"]].get("host_cpu") or "its device", []).append(r)
    width = max(len(r["target"]) for r in rows) + 1
    lines = []
    if measured:
        cpus = sorted({node_times[r["target"]].get("host_cpu") for r in measured} - {None, ""})
        lines += ["", f"time per node (measured on {', '.join(cpus)}; medians of the profiled runs, and the "
                      "interquartile range of the runs' totals):"]
        for r in measured:
            total, _, spread = r["timed µs"].partition(" (")
            lines.append(f"  {r['target']:{width}} {total} µs ({spread} over {r['nodes timed']} · costliest: "
                         f"{r['costliest nodes']}")
    for device, group in estimated.items():
        lines += ["", f"time per node (estimated-compiler: estimated by the compiler for {device}; nothing ran, "
                      "not comparable with a measured time):"]
        for r in group:
            total = r["timed µs"].partition(" (")[0]
            lines.append(f"  {r['target']:{width}} {total} µs estimated over {r['nodes timed']} · costliest: "
                         f"{r['costliest nodes']}")
    return "\n".join(visible(line) for line in lines)        # node names and the CPU's name: not xc's text


def checklist_table(report: dict) -> str:
    marks = {"pass": "PASS", "warn": "WARN", "fail": "FAIL", "not applicable": "n/a"}
    lines = ["", "checklist: (1) report read (2) CPU fallback on accelerator (3) fusions fired "
                 "(4) outputs match (5) same precision"]
    width = max([24] + [len(t) + 1 for t in report["checklist"]["targets"]])
    for tid, items in report["checklist"]["targets"].items():
        lines.append(f"{tid:{width}} " + "  ".join(f"({i['id']}) {marks[i['verdict']]:4}" for i in items))
        for i in items:
            if i["verdict"] in ("fail", "warn"):
                lines.append(f"{'':{width}} ({i['id']}) {i['detail']}")
    return "\n".join(visible(line) for line in lines)        # details quote node and output names


if __name__ == "__main__":
    sys.exit(main())
