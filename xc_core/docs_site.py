"""`xc docs`: the documentation site — the repository's docs/ folder, configured by mkdocs.yml beside it — built with
MkDocs' own Python API and served on this machine's loopback address, or written as static files for publishing.

The build is strict by default: a broken link or anchor, or a page left out of the navigation, fails it (mkdocs.yml's
`validation:` makes each of those a warning, and strict mode makes a warning fatal), with one line per problem.
"""
from __future__ import annotations

import argparse
import functools
import logging
import os
import shutil
import signal
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

from .errors import XcInputError, printable_line

LOOPBACK = "127.0.0.1"
CONFIG_NAME = "mkdocs.yml"
# A folder holding these was written by a build before: --out may replace it (MkDocs empties its site folder first).
_SITE_MARKERS = ("sitemap.xml", os.path.join("search", "search_index.json"))


class DocsBuildError(Exception):
    """The site did not build; `problems` holds one line per warning or error MkDocs reported."""

    def __init__(self, problems: list[str], *, only_strict: bool = False):
        super().__init__(f"{len(problems)} problem(s) building the documentation")
        self.problems = problems
        self.only_strict = only_strict      # warnings that failed the build only because it was strict


def add_parser(sub) -> None:
    d = sub.add_parser(
        "docs", help="this documentation as a site: served on 127.0.0.1, or written with --out DIR",
        description="Build the documentation site (the repository's docs/ with mkdocs.yml) and serve it on "
                    f"{LOOPBACK} until Ctrl-C, or write it as static files with --out DIR.")
    d.add_argument("--out", metavar="DIR",
                   help="write the static site into DIR and exit (DIR is created; an existing one must be empty or "
                        "hold a site written before, which is replaced)")
    d.add_argument("--port", type=int, default=0,
                   help=f"serve on this port of {LOOPBACK} (default: a free one; the address is printed)")
    d.add_argument("--strict", action=argparse.BooleanOptionalAction, default=True,
                   help="fail on a broken link or anchor, or a page missing from the navigation (default: on)")


def run(args) -> int:
    config_file = config_path()
    if args.out:
        site_dir = _checked_out_dir(args.out)
        if not _build_or_report(site_dir, config_file, args.strict):
            return 1
        print(f"xc docs: the site is in {printable_line(site_dir)} (open index.html)")
        return 0
    return _serve(config_file, args.port, args.strict)


def config_path() -> str:
    """mkdocs.yml at the root of the checkout this package runs from (an editable install). An installed wheel has no
    docs beside it: that is one line saying where they are."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    config_file = os.path.join(root, CONFIG_NAME)
    if not (os.path.isfile(config_file) and os.path.isdir(os.path.join(root, "docs"))):
        raise XcInputError("this copy of xc was installed without its documentation (no mkdocs.yml and docs/ "
                           "beside the package) — read the docs/ folder of xc's repository, or run `xc docs` from a "
                           "checkout installed with `pip install -e .`")
    return config_file


def build_site(site_dir: str, *, config_file: str | None = None, strict: bool = True) -> list[str]:
    """Build the site into `site_dir` (emptied first) with MkDocs' API. Returns the warnings of a non-strict build;
    raises DocsBuildError (one line per problem) when the build fails — in strict mode, at any warning."""
    from mkdocs.commands.build import build
    from mkdocs.config import load_config
    from mkdocs.exceptions import Abort, MkDocsException

    collected = _Collector()
    logger = logging.getLogger("mkdocs")
    saved = logger.level, logger.propagate
    # MkDocs narrates every build at INFO; only what is wrong is worth a line here, and it is said by us, once.
    logger.addHandler(collected)
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    try:
        config = load_config(config_file=config_file or config_path(), site_dir=os.path.abspath(site_dir),
                             strict=strict)
        build(config)
    except MkDocsException as e:
        only_strict = isinstance(e, Abort) and "strict mode" in str(e)
        raise DocsBuildError(collected.lines or [_one_line(str(e))], only_strict=only_strict) from None
    finally:
        logger.removeHandler(collected)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
    return collected.lines


class _Collector(logging.Handler):
    """MkDocs' warnings and errors, each as one line."""

    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(_one_line(record.getMessage()))


def _one_line(text: str) -> str:
    return printable_line(" ".join(text.split()))


def _build_or_report(site_dir: str, config_file: str, strict: bool) -> bool:
    try:
        warnings = build_site(site_dir, config_file=config_file, strict=strict)
    except DocsBuildError as e:
        for line in e.problems:
            print(f"xc docs: {line}", file=sys.stderr)
        print(f"xc docs: the documentation did not build ({len(e.problems)} problem(s)"
              f"{' in strict mode; --no-strict builds it anyway' if e.only_strict else ''})", file=sys.stderr)
        return False
    for line in warnings:
        print(f"xc docs: warning: {line}", file=sys.stderr)
    return True


def _checked_out_dir(out: str) -> str:
    """--out as a folder MkDocs may empty and fill: a new one, an empty one, or a site written before — never a
    folder of other files, which the build would delete."""
    path = os.path.abspath(out)
    if os.path.exists(path) and not os.path.isdir(path):
        raise XcInputError(f"--out {printable_line(out)}: a file, not a folder — give a new or empty folder for the site")
    if os.path.isdir(path) and os.listdir(path) and not all(
            os.path.exists(os.path.join(path, marker)) for marker in _SITE_MARKERS):
        raise XcInputError(f"--out {printable_line(out)}: the folder holds other files, which building the site would "
                           "delete — give a new or empty folder, or one `xc docs --out` wrote before")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise XcInputError(f"--out {printable_line(out)}: cannot create the folder ({e.strerror})") from None
    return path


class _Stopped(Exception):
    """SIGTERM while serving."""


def _serve(config_file: str, port: int, strict: bool) -> int:
    if not 0 <= port <= 65535:
        raise XcInputError(f"--port {port}: not a port (0 to 65535; 0 or no --port picks a free one)")
    from .paths import scratch_dir
    site_dir = scratch_dir("docs")       # under $XC_HOME/work: removed below, or swept if this process is killed
    previous = None
    try:
        if not _build_or_report(site_dir, config_file, strict):
            return 1
        try:
            server = ThreadingHTTPServer((LOOPBACK, port), functools.partial(_QuietHandler, directory=site_dir))
        except OSError as e:
            raise XcInputError(f"--port {port}: cannot listen on {LOOPBACK} ({e.strerror}) — give another port, or "
                               "leave --port out for a free one") from None
        server.daemon_threads = True
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, _raise_stopped)
        with server:
            print(f"xc docs: serving the documentation at http://{LOOPBACK}:{server.server_address[1]}/ "
                  "(Ctrl-C stops it)", flush=True)
            try:
                server.serve_forever()
            except KeyboardInterrupt:
                print("xc docs: stopped", file=sys.stderr)
                return 0
            except _Stopped:
                return 143
        return 0
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        shutil.rmtree(site_dir, ignore_errors=True)


def _raise_stopped(signum, frame):
    raise _Stopped()


class _QuietHandler(SimpleHTTPRequestHandler):
    """The built site's files, without a log line per request on the terminal."""

    def log_message(self, format, *args):  # noqa: A002 — the base class's signature
        pass
