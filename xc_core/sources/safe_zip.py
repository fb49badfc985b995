"""Zip archives from uploads, opened with bounds: .pt2, TorchScript / state_dict .pt, .npz and zipped .mlpackage
are all zips, and a crafted zip can claim millions of entries, inflate a megabyte into gigabytes, hide its data
behind encryption or a compression method nobody here reads, or carry paths that escape the folder it is unpacked
into.

`open_zip` checks the central directory before any entry is read: the entry count (from the end record, before
Python builds an object per entry), the declared unpacked size, the compression method, encryption, and every
path. `read_member` and `extract_all` then count the bytes that really come out, because the sizes in the
directory are only claims.
"""
from __future__ import annotations

import io
import os
import shutil
import zipfile
import zlib
from typing import BinaryIO

from ..errors import XcInputError
from ..limits import ZIP_RATIO_MIN_BYTES, Limits, exceeded

# Stored and deflate are what torch, numpy and zip tools write; anything else is refused rather than handed to a
# decompressor an attacker picked.
ALLOWED_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate"}
METHOD_NAMES = {zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "LZMA", 9: "deflate64", 93: "zstandard",
                98: "PPMd", 99: "AES encryption"}
MAX_PATH_CHARS = 1024
MAX_PATH_DEPTH = 64
MAX_NAME_BYTES = 255        # NAME_MAX: the longest file or folder name Linux file systems take
_CHUNK = 1 << 20


def open_zip(source: str | bytes | BinaryIO, label: str, limits: Limits) -> zipfile.ZipFile:
    """Open and check a zip. `label` names the file in errors. Raises XcInputError with one line."""
    fp = io.BytesIO(source) if isinstance(source, bytes) else source
    try:
        if isinstance(fp, str):
            with open(fp, "rb") as f:
                entries = _declared_entry_count(f)
        else:
            entries = _declared_entry_count(fp)
            fp.seek(0)
    except OSError as e:
        raise XcInputError(f"{label}: cannot read the file ({e.strerror or type(e).__name__})") from None
    if entries is None:
        raise XcInputError(f"{label}: not a zip archive, or its central directory is missing or damaged")
    if entries > limits.max_zip_entries:
        raise exceeded("max_zip_entries", f"{label}: the archive declares", entries, limits)
    try:
        z = zipfile.ZipFile(fp)
    except Exception as e:  # BadZipFile, struct.error, OverflowError, ValueError … all mean a broken directory
        raise XcInputError(f"{label}: the zip's central directory is damaged ({_why(e)})") from None
    try:
        _check_directory(z, label, limits)
    except BaseException:
        z.close()
        raise
    return z


def _declared_entry_count(f: BinaryIO) -> int | None:
    try:
        endrec = zipfile._EndRecData(f)  # stdlib's own end-record reader (handles zip64); None if there is none
    except OSError:
        raise
    except Exception:  # noqa: BLE001 — BadZipFile ("span multiple disks"), struct.error: a damaged end record
        return None
    if not endrec:
        return None
    return int(endrec[zipfile._ECD_ENTRIES_TOTAL])


def is_zip(path: str) -> bool:
    """zipfile.is_zipfile, except that a damaged end record means "no" instead of an exception."""
    try:
        with open(path, "rb") as f:
            return _declared_entry_count(f) is not None
    except OSError:
        return False


def _check_directory(z: zipfile.ZipFile, label: str, limits: Limits) -> None:
    infos = z.infolist()
    seen: set[str] = set()
    files: dict[str, str] = {}     # where each file entry lands when unpacked -> its name in the archive
    folders: set[str] = set()      # every folder an entry needs
    total = 0
    for info in infos:
        name = info.filename
        if info.flag_bits & 0x1:
            raise XcInputError(f"{label}: the entry '{_short(name)}' is encrypted; xc reads only unencrypted "
                               "archives")
        if info.compress_type not in ALLOWED_METHODS:
            method = METHOD_NAMES.get(info.compress_type, f"method {info.compress_type}")
            raise XcInputError(f"{label}: the entry '{_short(name)}' uses {method} compression; accepted: stored "
                               "or deflate (what torch, numpy and zip tools write)")
        _check_path(name, label)
        if name in seen:
            raise XcInputError(f"{label}: the entry '{_short(name)}' appears twice in the archive")
        seen.add(name)
        # Names that land on the same path ("a" and "./a"), or a file where a folder must be ("a" and "a/b"),
        # would make unpacking fail half way (or overwrite one entry with another): refused up front.
        parts = [p for p in name.split("/") if p not in ("", ".")]
        landing = "/".join(parts)
        if not info.is_dir():
            if not landing:
                raise XcInputError(f"{label}: the entry '{_short(name)}' is a file without a name")
            if landing in files:
                raise XcInputError(f"{label}: the entries '{_short(files[landing])}' and '{_short(name)}' unpack to "
                                   "the same file; accepted: an archive whose entries have distinct paths")
            files[landing] = name
        folders.update("/".join(parts[:i]) for i in range(1, len(parts) if not info.is_dir() else len(parts) + 1))
        if info.file_size > ZIP_RATIO_MIN_BYTES and info.compress_type != zipfile.ZIP_STORED:
            ratio = info.file_size / max(info.compress_size, 1)
            if ratio > limits.max_zip_ratio:
                raise exceeded("max_zip_ratio", f"{label}: the entry '{_short(name)}' claims to inflate", ratio,
                               limits)
        total += info.file_size
    clash = next((landing for landing in files if landing in folders), None)
    if clash is not None:
        raise XcInputError(f"{label}: '{_short(files[clash])}' is a file in the archive and also the folder of "
                           "other entries; accepted: an archive whose entries have distinct paths")
    if total > limits.bytes("max_unzipped_mb"):
        raise exceeded("max_unzipped_mb", f"{label}: the archive unpacks to", total, limits)


def _check_path(name: str, label: str) -> None:
    if len(name) > MAX_PATH_CHARS:
        raise XcInputError(f"{label}: an entry's path is {len(name):,} characters long (at most "
                           f"{MAX_PATH_CHARS:,} are accepted)")
    parts = name.replace("\\", "/").split("/")
    if len(parts) > MAX_PATH_DEPTH:
        raise XcInputError(f"{label}: an entry's path is {len(parts):,} folders deep (at most {MAX_PATH_DEPTH} are "
                           "accepted)")
    if "\x00" in name or name.startswith(("/", "\\")) or ".." in parts or (len(name) > 1 and name[1] == ":"):
        raise XcInputError(f"{label}: the archive has an unsafe path '{_short(name)}' (absolute, or leaving its "
                           "folder with '..')")
    longest = max(len(p.encode("utf-8", "surrogatepass")) for p in name.split("/"))
    if longest > MAX_NAME_BYTES:
        raise XcInputError(f"{label}: the entry '{_short(name)}' has a file or folder name of {longest:,} bytes; "
                           f"at most {MAX_NAME_BYTES} are accepted (what file systems take)")


def read_member(z: zipfile.ZipFile, info: zipfile.ZipInfo | str, label: str, limits: Limits) -> bytes:
    """The entry's bytes, never more than it declared (and the declared sizes were bounded by open_zip)."""
    info = z.getinfo(info) if isinstance(info, str) else info
    out = io.BytesIO()
    with _opened(z, info, label) as stream:
        _copy_bounded(stream, out, info, label)
    return out.getvalue()


def extract_all(z: zipfile.ZipFile, dest: str, label: str, limits: Limits) -> None:
    """Unpack every entry below `dest`, counting what really comes out."""
    root = os.path.realpath(dest)
    written = 0
    for info in z.infolist():
        target = os.path.realpath(os.path.join(root, info.filename))
        if target != root and not target.startswith(root + os.sep):
            raise XcInputError(f"{label}: the archive has an unsafe path '{_short(info.filename)}'")
        try:
            if info.is_dir():
                os.makedirs(target, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with _opened(z, info, label) as stream, open(target, "wb") as out:
                written += _copy_bounded(stream, out, info, label)
        except OSError as e:
            # open_zip's checks leave the environment's errors (a full disk) and the file system's own limits:
            # one line naming the entry, never the scratch folder it was unpacked into.
            raise XcInputError(f"{label}: the entry '{_short(info.filename)}' cannot be unpacked "
                               f"({e.strerror or type(e).__name__})") from None
        if written > limits.bytes("max_unzipped_mb"):
            raise exceeded("max_unzipped_mb", f"{label}: the archive unpacks to more than", written, limits)


class _opened:
    """z.open with every failure (bad local header, unsupported feature) turned into one line."""

    def __init__(self, z, info, label):
        self.z, self.info, self.label = z, info, label

    def __enter__(self):
        try:
            self.stream = self.z.open(self.info)
        except Exception as e:
            raise XcInputError(f"{self.label}: the entry '{_short(self.info.filename)}' cannot be opened "
                               f"({_why(e)})") from None
        return self.stream

    def __exit__(self, *exc):
        self.stream.close()
        return False


def _copy_bounded(stream, out, info: zipfile.ZipInfo, label: str) -> int:
    n = 0
    try:
        while True:
            chunk = stream.read(_CHUNK)
            if not chunk:
                break
            n += len(chunk)
            if n > info.file_size:
                raise XcInputError(f"{label}: the entry '{_short(info.filename)}' inflates beyond the "
                                   f"{info.file_size:,} bytes it declares")
            out.write(chunk)
    except XcInputError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as e:
        raise XcInputError(f"{label}: the entry '{_short(info.filename)}' fails to inflate ({_why(e)}); the "
                           "archive is damaged") from None
    return n


def remove_tree(path: str | None) -> None:
    if path:
        shutil.rmtree(path, ignore_errors=True)


def _short(name: str, n: int = 80) -> str:
    printable = name.encode("unicode_escape").decode("ascii")
    return printable if len(printable) <= n else printable[: n - 1] + "…"


def _why(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:160]}" if text else type(e).__name__
