"""Ctrl-C before the CLI's own handlers: one line, never a traceback.

`xc_core.cli` imports this first. A KeyboardInterrupt that reaches the top outside `cli.main()`'s handlers — while
the CLI's modules import or its flags parse, or a second Ctrl-C while the first one is handled — is said in one line
instead of a traceback; Python then ends the process by SIGINT, which a shell reports as status 130. Installed only
in the xc command itself (`xc`, `python -m xc_core`): a program that imports xc keeps its own hook.
"""
from __future__ import annotations

import os
import sys


def _one_line_on_interrupt(kind, value, tb, _previous=sys.excepthook) -> None:
    if issubclass(kind, KeyboardInterrupt):
        print("xc: interrupted", file=sys.stderr)
    else:
        _previous(kind, value, tb)


def _is_the_xc_command() -> bool:
    program = sys.argv[0] if sys.argv else ""
    return os.path.basename(program) == "xc" or program.endswith(os.path.join("xc_core", "__main__.py"))


if _is_the_xc_command():
    sys.excepthook = _one_line_on_interrupt
