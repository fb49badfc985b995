"""`xc mcp`: xc's analyses as tools an assistant calls through the Model Context Protocol — the same sentences the
dashboard shows (docs/mcp.md).

    xc mcp                          stdio: what an assistant's config launches ({"command": "xc", "args": ["mcp"]})
    xc mcp --http [--port N]        streamable HTTP on 127.0.0.1 (loopback only), its URL on stderr
    --root DIR (repeatable)         the folders whose files the tools may read (default: the working folder)
    --allow-write                   analyze keeps its runs in xc's run store (default: a private scratch store)

The SDK is imported only when the server starts, so `xc --help` and every other command stay as fast as before.
"""
from __future__ import annotations

import sys

DEFAULT_PORT = 8765


def add_parser(sub) -> None:
    m = sub.add_parser("mcp", help="serve xc's analyses to an assistant over the Model Context Protocol (stdio, or "
                                   "streamable HTTP on loopback)",
                       description="An MCP server whose tools list targets and runs, analyse a model, explain a "
                                   "target's fallbacks and drift, diff two runs with the CI gate and hand out a "
                                   "culprit's repro bundle. Read-only unless --allow-write.")
    m.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    m.add_argument("--host", default="127.0.0.1",
                   help="with --http: 127.0.0.1 (default), ::1 or localhost; any other address is refused")
    m.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"with --http (default {DEFAULT_PORT})")
    m.add_argument("--root", action="append", metavar="DIR",
                   help="a folder whose model files and runs the tools may read, repeatable (default: the "
                        "working folder); paths are resolved (symlinks too) before the check")
    m.add_argument("--allow-write", action="store_true",
                   help="analyze keeps its runs in xc's run store ($XC_HOME), as xc analyze does (default: a "
                        "private scratch store, removed when the server stops)")


def run(args) -> int:
    from ..errors import XcInputError
    from .server import Workspace, build, check_http, serve_http, serve_stdio
    if not args.http and (args.host != "127.0.0.1" or args.port != DEFAULT_PORT):
        raise XcInputError("--host and --port go with --http (stdio needs neither)")
    bind = check_http(args.host, args.port) if args.http else None
    import signal

    def stop(signum, frame):    # an assistant ends its stdio server with SIGTERM: unwind, so the scratch goes
        raise SystemExit(128 + signum)
    ws = Workspace(args.root or [], allow_write=args.allow_write)
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        server = build(ws, host=bind or "127.0.0.1", port=args.port)
        if args.http:
            serve_http(server, bind, args.port)
        else:
            serve_stdio(server)
    except KeyboardInterrupt:
        print("xc mcp: stopped", file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous)
        ws.close()
    return 0
