"""report.json stays small: per-node lists too big for it are written beside it, in report.nodes.json.

A model of tens of thousands of compiled ops (an LSTM that Core ML unrolls into 60,000 MIL ops, a flat ONNX of
20,000 nodes) makes lists of every node: the compiled graphs, the nodes that carry each source op, a divergence
signature per node. Written inline, they made report.json 90 MB — too big to attach to a pull request, slow to
parse for a page that shows counts. So when a report is written, every list or mapping whose JSON exceeds
DETACH_BYTES moves to the sidecar and leaves a marker in its place, `{"$detached": "<JSON pointer>"}`; the report
names the sidecar and the pointers under "detached". Reading puts each one back, so the Report in memory is whole
and every view reads it as before. The bundled samples' reports have nothing that big: their report.json is
self-contained.

A report.json read without its sidecar is refused in one line that names the missing file, rather than shown with
lists silently empty.

The sidecar is gzip-compressed (report.nodes.json.gz): per-node lists repeat the same keys and names, and compress
about 20× (47 MB → 2.5 MB for a 20,000-node graph on eight targets). Readers take either that or the plain
report.nodes.json earlier versions wrote, and bound what they decompress by the same size limit as the plain text.
"""
from __future__ import annotations

import gzip
import json
import os
import zlib

from ..errors import first_line

SIDECAR_FILE = "report.nodes.json.gz"
PLAIN_SIDECAR_FILE = "report.nodes.json"      # what xc wrote before the sidecar was compressed; still read
SIDECAR_FILES = (SIDECAR_FILE, PLAIN_SIDECAR_FILE)
_GZIP_MAGIC = b"\x1f\x8b"
DETACH_BYTES = 1 << 18        # a list whose JSON is larger than this (256 KiB) goes to the sidecar
_MEASURE_FROM = 256           # shorter lists are not measured as a whole: their items are looked into instead
MARKER = "$detached"
FORMAT = 1


def dumps(report: dict) -> tuple[str, str | None]:
    """(report.json text, sidecar text or None): compact JSON, the big lists moved out of the report."""
    detached: dict[str, str] = {}
    small = _detach(report, "", detached)
    if not detached:
        return json.dumps(report, separators=(",", ":")), None
    small["detached"] = {"file": SIDECAR_FILE, "pointers": list(detached),
                         "bytes": sum(len(text) for text in detached.values())}
    body = ",".join(f"{json.dumps(pointer)}:{text}" for pointer, text in detached.items())
    return json.dumps(small, separators=(",", ":")), f'{{"format":{FORMAT},"values":{{{body}}}}}'


def _detach(value, pointer: str, out: dict):
    """A copy of `value` in which every list or mapping bigger than DETACH_BYTES is a marker (its text kept in
    `out`); parts that keep nothing detached are shared, not copied. Containers of fewer than _MEASURE_FROM items
    are not measured whole (their items are): what stays inline is bounded by that many items."""
    if isinstance(value, (dict, list)) and len(value) >= _MEASURE_FROM and pointer:
        text = json.dumps(value, separators=(",", ":"))
        if len(text) > DETACH_BYTES:
            out[pointer] = text
            return {MARKER: pointer}
        return value            # all of it is small, and so is everything inside it
    if isinstance(value, dict):
        changed = {}
        for k, v in value.items():
            if isinstance(v, (dict, list)):
                new = _detach(v, f"{pointer}/{_escape(str(k))}", out)
                if new is not v:
                    changed[k] = new
        return {**value, **changed} if changed else value
    if isinstance(value, list):
        changed = {}
        for i, v in enumerate(value):
            if isinstance(v, (dict, list)):
                new = _detach(v, f"{pointer}/{i}", out)
                if new is not v:
                    changed[i] = new
        if not changed:
            return value
        return [changed.get(i, v) for i, v in enumerate(value)]
    return value


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def encode(side: str) -> bytes:
    """The sidecar's bytes as written: gzip with no time stamp, so the same lists give the same bytes (the run
    store keeps a file once by its hash)."""
    return gzip.compress(side.encode(), compresslevel=6, mtime=0)


def decode(data: bytes, max_bytes: int | None = None) -> str:
    """The sidecar's text from its bytes, gzip or plain; decompressing stops past `max_bytes` (a small file that
    inflates without end is refused, not read). SidecarError says what is wrong; text that is not UTF-8 raises
    UnicodeDecodeError."""
    if data[:2] != _GZIP_MAGIC:
        return data.decode("utf-8")
    inflate = zlib.decompressobj(wbits=31)
    try:
        text = inflate.decompress(data, max_bytes + 1 if max_bytes else 0)
    except zlib.error as e:
        raise SidecarError(f"{SIDECAR_FILE} is not gzip data an xc sidecar is written as ({e})") from None
    if max_bytes and len(text) > max_bytes:
        raise SidecarError(f"{SIDECAR_FILE} holds more than {max_bytes / 2**20:,.0f} MiB once decompressed "
                           f"(the limit for a sidecar read back, XC_MAX_SIDECAR_MB)")
    if not inflate.eof:
        raise SidecarError(f"{SIDECAR_FILE} is cut short (its gzip stream does not end)")
    return text.decode("utf-8")


def write(report: dict, folder: str, name: str = "report.json") -> list[str]:
    """Write report.json (and its sidecar when it has one) into `folder`, each atomically; the paths written."""
    from ..paths import write_bytes_atomic, write_text_atomic
    text, side = dumps(report)
    written = []
    for stale in SIDECAR_FILES:      # a report written again without big lists (or by an older xc): none stale
        if os.path.exists(os.path.join(folder, stale)):
            os.remove(os.path.join(folder, stale))
    if side is not None:
        sidecar_path = os.path.join(folder, SIDECAR_FILE)
        write_bytes_atomic(sidecar_path, encode(side))
        written.append(sidecar_path)
    write_text_atomic(os.path.join(folder, name), text)
    written.append(os.path.join(folder, name))
    return written


class SidecarError(ValueError):
    """The sidecar cannot be attached: the message says why, in one line."""


class MissingSidecar(SidecarError):
    pass


def attach(report: dict, read_sidecar, max_bytes: int | None = None) -> dict:
    """Put the detached lists back (in place). `read_sidecar()` returns the sidecar's text or bytes (gzip or
    plain, see `decode`; at most `max_bytes` once decompressed), or None when it is not there; then MissingSidecar
    names it. A sidecar that is not JSON, or pointers that name no marker in the report
    (a crafted or mismatched pair), raise SidecarError."""
    info = report.get("detached")
    if not info:
        return report
    if not isinstance(info, dict) or not isinstance(info.get("pointers"), list):
        raise SidecarError("its 'detached' entry is not an xc sidecar's index (an object with a list of pointers)")
    name = info.get("file") if isinstance(info.get("file"), str) else SIDECAR_FILE
    text = read_sidecar()
    if text is None:
        raise MissingSidecar(f"its per-node lists are in {name[:80]}, which is not beside it "
                             f"(keep the two files together)")
    if isinstance(text, bytes):
        text = decode(text, max_bytes)
    try:
        data = json.loads(text)
    except RecursionError:
        raise SidecarError(f"{SIDECAR_FILE} is nested too deep to be an xc sidecar") from None
    except ValueError as e:
        raise SidecarError(f"{SIDECAR_FILE} is not JSON ({first_line(e)})") from None
    values = data.get("values") if isinstance(data, dict) else None
    if not isinstance(values, dict):
        raise SidecarError(f"{SIDECAR_FILE} is not an xc sidecar (no values)")
    for pointer in info["pointers"]:
        shown = json.dumps(pointer)[:80]
        if not isinstance(pointer, str) or pointer not in values:
            raise MissingSidecar(f"{SIDECAR_FILE} does not hold {shown} (a sidecar of another run?)")
        parent, key = _locate(report, pointer)
        if not (isinstance(parent[key], dict) and parent[key].get(MARKER) == pointer):
            raise SidecarError(f"report.json has no marker at {shown} for {SIDECAR_FILE}")
        parent[key] = values[pointer]
    del report["detached"]
    return report


def _locate(report: dict, pointer: str):
    """The container holding `pointer`'s value, and its key there; SidecarError when the report has no such
    place."""
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]
    node = report
    for depth, t in enumerate(tokens):
        if isinstance(node, list) and t.isascii() and t.isdigit() and int(t) < len(node):
            key = int(t)
        elif isinstance(node, dict) and t in node:
            key = t
        else:
            break
        if depth == len(tokens) - 1:
            return node, key
        node = node[key]
    raise SidecarError(f"report.json has no place {json.dumps(pointer)[:80]} for a list of {SIDECAR_FILE}")


def read_file(path: str) -> dict:
    """A report.json from disk, with its sidecar (beside it) attached. Each is read only as a regular file inside
    the report's folder (safe_files): a symlink out of it, a /proc entry, a device or a FIFO raises XcInputError."""
    from ..safe_files import read_regular
    folder = os.path.dirname(os.path.abspath(path))
    try:
        report = json.loads(read_regular(path, root=folder))
    except RecursionError:
        raise SidecarError(f"{os.path.basename(path)} is nested too deep to be an xc report") from None
    return attach(report, lambda: _read_beside(path))


def _read_beside(path: str) -> bytes | None:
    """The sidecar's bytes from the report's folder (compressed, else plain), or None when it has none."""
    from ..safe_files import read_regular
    folder = os.path.dirname(os.path.abspath(path))
    for name in SIDECAR_FILES:
        if os.path.lexists(os.path.join(folder, name)):
            return read_regular(os.path.join(folder, name), root=folder)
    return None


def sidecar_in(names) -> str | None:
    """Which sidecar file name (compressed, else plain) is among `names` (a run's files, a manifest)."""
    return next((n for n in SIDECAR_FILES if n in names), None)
