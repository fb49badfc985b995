"""Errors that are the user's to fix. They carry one line meant to be shown as is (CLI stderr, dashboard)."""


class XcInputError(ValueError):
    """Bad input (file, flag, sample name): the message names the problem and what is accepted.

    `fix` names the remedy when it depends on where the message is shown (a CLI flag, a dashboard panel):
    `for_cli` / `for_dashboard` append it in that place's words. `inputs` lists the inputs it concerns.
    """

    def __init__(self, message: str, *, fix: str | None = None, inputs: list[str] | None = None,
                 dashboard: str | None = None):
        super().__init__(message)
        self.fix = fix
        self.inputs = list(inputs or [])
        self.dashboard = dashboard      # the whole message in the dashboard's words, where they differ

    def for_cli(self) -> str:
        hint = _FIX_HINTS.get(self.fix, (None, None))[0]
        return f"{self} — {hint}" if hint else str(self)

    def for_dashboard(self) -> str:
        if self.dashboard:
            return self.dashboard
        hint = _FIX_HINTS.get(self.fix, (None, None))[1]
        return f"{self} — {hint}" if hint else str(self)


# remedy -> (in the CLI's words, in the dashboard's words)
_FIX_HINTS = {
    "shapes": ("pass --shape NAME=DxDx…[:dtype] (or --dim NAME=V) or --inputs FILE.npz",
               "set them in the Inputs panel in the sidebar, or upload an .npz of inputs"),
    "limits": ("raise the limit with --timeout / --memory, or set the inputs with --shape, --dim or --inputs",
               "raise the limit under Worker limits in the sidebar, or set the inputs in the Inputs panel"),
}


class TargetError(RuntimeError):
    """A target could not compile, inspect or run. Caught per target and stored in the report as a value."""


# --- turning a runtime's exception into a line a user can act on ------------------------------------------------
import re as _re

# ONNX Runtime: "... Non-zero status code returned while running Concat node. Name:'/m/Concat' Status Message:
# concatbase.h:135 PrepareForComputeImpl <cause>"
_ORT_NODE = _re.compile(r"running (\S+) node\. Name:'([^']*)' Status Message: (.*)", _re.S)
_ORT_PREFIX = _re.compile(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ")
_CXX_LOCATION = _re.compile(r"^(?:/\S+/)?\S+\.(?:cc|h|cpp|hpp):\d+ \S+ ")
# OpenVINO: "Exception from src/inference/src/cpp/infer_request.cpp:224:" lines, and " Check 'cond' failed at
# src/...:43:" suffixes, say where in OpenVINO the error was raised; the cause is on the other lines.
_OV_LOCATION_LINE = _re.compile(r"^Exception from \S+:\d+:?$")
_OV_CHECK_SUFFIX = _re.compile(r"\s*Check '.*' failed at \S+:\d+:?\s*$")
_NOISE = _re.compile(r"^(Summary:|-- Conversion is failed for|Traceback|For more information, run with)")
_NODE_HINTS = (_re.compile(r"ONNX node"), _re.compile(r"node with name", _re.I), _re.compile(r"validating node"))
_ANSI = _re.compile(r"\x1b\[[0-9;]*m")
# torch.onnx's exporter opens with paragraphs of advice; the cause is the first line under "## Exception summary",
# as "<class 'torch.onnx._internal.exporter._errors.DispatchError'>: No ONNX function found for …".
_TORCH_ONNX_SUMMARY = _re.compile(r"^## Exception summary\s*$(.*)", _re.S | _re.M)
_CLASS_PREFIX = _re.compile(r"^<class '(?:[\w.]+\.)?(\w+)'>:\s*")


# An absolute path of two or more parts; group 1 is its last part. Not after a word, a dot, a colon or a slash, so
# URLs ("https://host/a/b") and relative paths ("src/a/b.cpp") are left alone.
_ABS_PATH = _re.compile(r"(?<![\w.:/~-])/(?:[^\s/'\"`()<>,;:|]+/)+([^\s/'\"`()<>,;:|]+)")


def hide_paths(text: str) -> str:
    """Absolute paths in a library's message cut to their base name: they name the server's scratch folders and
    installation (nobody's business, and noise), while the base name is what the user recognises (model.xml)."""
    return _ABS_PATH.sub(r"\1", text)


def summarize_error(text: str, limit: int = 400) -> str:
    """The part of a runtime's error message that names the node and the cause, on one line.

    A bare source location ("Exception from src/inference/src/cpp/infer_request.cpp:224:") is never the summary;
    ORT's "Status Message" is kept without its C++ location; long texts are cut at a word, never mid-word;
    absolute paths are cut to their base name (`hide_paths`).
    """
    text = hide_paths(_ANSI.sub("", text or "").strip())
    m = _TORCH_ONNX_SUMMARY.search(text)
    if m:
        cause = next((ln.strip() for ln in m.group(1).splitlines() if ln.strip()), "")
        if cause:
            return _cut(_CLASS_PREFIX.sub(r"\1: ", cause), limit)
    m = _ORT_NODE.search(text)
    if m:
        status = _CXX_LOCATION.sub("", m.group(3).strip().splitlines()[0])
        return _cut(f"{m.group(1)} node '{m.group(2)}': {status}", limit)
    lines = []
    for raw in text.splitlines():
        line = _ORT_PREFIX.sub("", raw.strip())
        if not line or _OV_LOCATION_LINE.match(line) or _NOISE.match(line):
            continue
        line = _CXX_LOCATION.sub("", _OV_CHECK_SUFFIX.sub("", line)).rstrip(":").strip()
        if line:
            lines.append(line)
    if not lines:
        return _cut(text.splitlines()[0] if text else "", limit)
    node = next((ln for hint in _NODE_HINTS for ln in lines if hint.search(ln)), None)
    if node is None:
        # A first line that ends in ":" announces the next one ("Failed to convert:" / "<the reason>").
        announces = text.splitlines()[0].rstrip().endswith(":") and len(lines) > 1
        return _cut(lines[0] + (": " + lines[1] if announces else ""), limit)
    cause = next((ln for ln in reversed(lines) if ln != node and not _NODE_HINTS[2].search(ln)
                  and not ln.startswith("Shape inference input shapes")), None)
    shapes = next((ln for ln in lines if ln.startswith("Shape inference input shapes")), None)
    out = node + (f": {cause}" if cause else "")
    if shapes:
        out += f" ({shapes[len('Shape inference '):]})"
    return _cut(out, limit)


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut.rstrip(",;:") + " …"


def with_kind(e: BaseException, text: str, generic: frozenset | set) -> str:
    """`text` (what `e` says) behind its exception class's name, unless the class is one of `generic`, whose
    name adds nothing (RuntimeError); the class's name alone when `text` is empty."""
    kind = type(e).__name__
    if not text:
        return kind
    return text if kind in generic else f"{kind}: {text}"


def first_line(e: BaseException, limit: int = 200) -> str:
    """An exception's first non-empty line, cut to `limit` characters; its type's name when it says nothing."""
    for line in str(e).strip().splitlines():
        if line.strip():
            return line.strip()[:limit]
    return type(e).__name__


# --- showing text xc did not write --------------------------------------------------------------------------------
import unicodedata as _unicodedata

# Characters that act instead of showing: C0 and C1 controls and DEL (Cc: an ESC starts a terminal sequence that
# clears the screen or sets the window title, BEL rings, CR overwrites the line, NUL ends Graphviz's input), format
# characters (Cf: a right-to-left override reorders what follows, zero-width spaces and joiners hide), lone
# surrogates (Cs) and the line and paragraph separators (Zl, Zp) that editors and some terminals break lines at.
_UNSEEN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def visible(text) -> str:
    """Text from a model, a file, a manifest or a library (names, messages) as it reads: every character that would
    act rather than show is written as its Python escape (\\x1b, \\x07, \\n, \\u202e), so what reaches a terminal, a
    Markdown or HTML report or a drawing is only text. The one rule for all of them: the CLI, report.md/.html,
    matrix.md/.html, the diffs and the topology drawings call this."""
    text = str(text)
    if text.isascii() and text.isprintable():      # the usual case, at no cost
        return text
    return "".join(repr(c)[1:-1] if _unicodedata.category(c) in _UNSEEN else c for c in text)


def printable_line(text) -> str:
    """`text` (a model's or file's name, an error) as one printable line: whitespace runs (newlines, tabs) become one
    space and every other character that would act is shown as an escape (`visible`), so a name can neither break
    a log line nor drive the terminal."""
    return visible(" ".join(str(text).split()))


# --- a message that names a stage but not why it failed -----------------------------------------------------------
# torch.fx's PassManager (ExecuTorch's to_edge / to_backend passes) raises "An error occurred when running the
# 'FuseBatchNormPass' pass after the following passes: [...]" *from* the pass's own exception: the reason is only in
# the chained exception, i.e. in the traceback (or after the first line of the whole message).
_STAGE_WITHOUT_REASON = _re.compile(r"An error occurred when running the '[^']+' pass after the following passes: "
                                    r"\[[^\]]*\]\s*$")
_CHAIN = ("The above exception was the direct cause of the following exception:",
          "During handling of the above exception, another exception occurred:")
_EXCEPTION_LINE = _re.compile(r"^([\w.]+(?:Error|Exception|Warning|Exit|Interrupt)|[\w.]*Error\w*): ?(.*)$")


def kept_cause(error: str | None, detail: str | None = None, traceback: str | None = None,
               limit: int = 300) -> str | None:
    """`error` with the first line of its cause appended when it names a pass or stage without saying why ("… the
    'FuseBatchNormPass' pass after the following passes: []: <cause>"); any other error as it is. The cause is
    the chained exception's line in `traceback`, else the first further line of `detail`."""
    if not error or not _STAGE_WITHOUT_REASON.search(error.strip()):
        return error
    cause = _chained_cause(traceback) or next(
        (ln.strip() for ln in (detail or "").splitlines()[1:] if ln.strip()), None)
    return f"{error.rstrip()}: {_cut(hide_paths(cause), limit)}" if cause else error


def _chained_cause(traceback: str | None) -> str | None:
    """The last exception line before Python's "direct cause" marker: what the outer exception was raised from."""
    if not traceback:
        return None
    lines = traceback.splitlines()
    at = next((i for i, ln in enumerate(lines) if ln.strip() in _CHAIN), None)
    if at is None:
        return None
    for ln in reversed(lines[:at]):
        m = _EXCEPTION_LINE.match(ln.strip())
        if m:
            kind = m.group(1).rsplit(".", 1)[-1]
            return f"{kind}: {m.group(2)}" if m.group(2) else kind
    return None


# LiteRT logs "ERROR: [./litert/cc/litert_compiled_model.h:1961]" — where, not what — and says what failed on the
# next line ("Failed to modify graph with delegate").
_LOCATION_ONLY = _re.compile(r"^ERROR: \[[^\]]+:\d+\]\s*$")


def litert_said(log_text: str) -> list[str]:
    """LiteRT's ERROR lines from its log, each bare source location joined with the line after it that says what
    failed ("ERROR: [litert_compiled_model.h:1961] Failed to modify graph with delegate")."""
    lines = [ln.strip() for ln in (log_text or "").splitlines()]
    out = []
    for i, ln in enumerate(lines):
        if not ln.startswith("ERROR"):
            continue
        if _LOCATION_ONLY.match(ln):
            nxt = next((x for x in lines[i + 1:] if x), "")
            if nxt and not nxt.startswith(("ERROR", "WARNING", "INFO")):
                ln = f"{ln} {nxt}"
        out.append(ln)
    return out
