"""Files stay inside: how xc reads and copies a file tree someone else made (a batch folder, a run folder, a
manifest and the model files it names).

Such a tree can hold symlinks and special files: `runs/tiny/environ.txt -> /proc/self/environ` would put the
process environment (tokens included) into whatever xc writes or prints next, `runs/evil -> /home/me` a whole
outside folder, a FIFO or /dev/zero would hang or fill memory. One rule for every command, here:

- A file xc is asked to read (a matrix.json, a report.json and its sidecar, a manifest) is read only if its real
  path (`os.path.realpath`) is inside the folder it is named in, and it is a regular file: not a /proc or /sys
  entry (which stat as regular files), a device, a FIFO or a socket. Otherwise it is refused in one line
  (XcInputError) naming it. It is opened without following a last-moment symlink (O_NOFOLLOW), without blocking
  on a FIFO swapped in (O_NONBLOCK), checked again on the open descriptor, and read no further than its bound.
- A tree xc walks (a run folder's artifacts, a folder manifest, the run folders `xc batch merge` copies) yields its
  regular files only. Every symlink is skipped, whether it points inside or out: xc never writes one, so a
  symlink in its output is not xc's, and copying or listing its target would follow it; what a symlink inside
  the tree points at is in the tree and listed on its own anyway. Skipped entries are named in one warning line
  (`warn_skipped`); the command goes on (exit 0).
"""
from __future__ import annotations

import errno
import os
import stat
import sys
import threading
from dataclasses import dataclass, field

from .errors import XcInputError, printable_line

# Pseudo-filesystems whose entries stat as regular files of size 0 but read the kernel's state (environ, mem).
_PSEUDO_ROOTS = ("/proc", "/sys")
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_COPY_CHUNK = 1 << 20


def is_inside(root: str, path: str) -> bool:
    """Whether `path`, symlinks resolved, is `root` (symlinks resolved) or below it."""
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def special_kind(st: os.stat_result, real_path: str) -> str | None:
    """What a file that is not a regular file is ('a FIFO', 'a /proc entry'…), or None for a regular file."""
    if stat.S_ISLNK(st.st_mode):
        return "a symlink"
    if stat.S_ISDIR(st.st_mode):
        return "a folder"
    if stat.S_ISFIFO(st.st_mode):
        return "a FIFO"
    if stat.S_ISSOCK(st.st_mode):
        return "a socket"
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        return "a device"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    pseudo = _pseudo_root(real_path, st)
    if pseudo:
        return f"a {pseudo} entry"
    return None


def _pseudo_root(real_path: str, st: os.stat_result) -> str | None:
    for root in _PSEUDO_ROOTS:
        if real_path == root or real_path.startswith(root + "/"):
            return root
    return _pseudo_devices().get(st.st_dev)


_PSEUDO_DEVICES: dict[int, str] | None = None


def _pseudo_devices() -> dict[int, str]:
    """st_dev → /proc or /sys, for those mounted: the same filesystem bind-mounted elsewhere is found by it."""
    global _PSEUDO_DEVICES
    if _PSEUDO_DEVICES is None:
        found = {}
        for root in _PSEUDO_ROOTS:
            try:
                if os.path.ismount(root):
                    found[os.stat(root).st_dev] = root
            except OSError:
                continue
        _PSEUDO_DEVICES = found
    return _PSEUDO_DEVICES


def check_regular(path: str, root: str | None = None, shown: str | None = None) -> os.stat_result:
    """The stat of `path`, a regular file, whose real path is inside `root` when given; XcInputError naming it
    (as `shown`, default its base name) otherwise."""
    shown = printable_line(shown or os.path.basename(path) or path)
    real = os.path.realpath(path)
    if root is not None and not is_inside(root, path):
        raise XcInputError(f"{shown}: a symlink out of its folder — not read (xc reads only files inside the folder "
                           "they are in; give the file itself)")
    try:
        st = os.stat(real)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            kind = "a symlink to nothing" if os.path.lexists(path) else "no such file"
            raise XcInputError(f"{shown}: {kind}") from None
        raise XcInputError(f"{shown}: cannot be read ({e.strerror or type(e).__name__})") from None
    kind = special_kind(st, real)
    if kind:
        linked = os.path.islink(path)
        raise XcInputError(f"{shown}: {'a symlink to ' if linked else ''}{kind}, not a regular file — not read "
                           "(accepted: a regular file)")
    return st


def read_regular(path: str, root: str | None = None, max_bytes: int | None = None, too_big=None,
                 shown: str | None = None, head: int | None = None) -> bytes:
    """The bytes of `path` after `check_regular`; more than `max_bytes` raises `too_big(size)` (an exception),
    or XcInputError. Opened without following a symlink put in its place since, without blocking, checked again
    on the descriptor, and read no further than the bound even if the file grows. `head`: only the first this
    many bytes, whatever the file's size."""
    shown = printable_line(shown or os.path.basename(path) or path)
    st = check_regular(path, root, shown)

    def refuse_size(size: int):
        if too_big is not None:
            return too_big(size)
        return XcInputError(f"{shown}: {size / 2**20:,.1f} MiB, more than the {max_bytes / 2**20:,.0f} MiB xc "
                            "reads of it")
    if max_bytes is not None and st.st_size > max_bytes:
        raise refuse_size(st.st_size)
    try:
        fd = os.open(os.path.realpath(path), _OPEN_FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise XcInputError(f"{shown}: became a symlink while read — not read") from None
        raise XcInputError(f"{shown}: cannot be read ({e.strerror or type(e).__name__})") from None
    with os.fdopen(fd, "rb") as f:
        now = os.fstat(f.fileno())
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now.st_mode):
            raise XcInputError(f"{shown}: replaced while read — not read")
        try:
            data = f.read(head if head is not None else max_bytes + 1 if max_bytes is not None else -1)
        except OSError as e:
            raise XcInputError(f"{shown}: cannot be read ({e.strerror or type(e).__name__})") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise refuse_size(len(data))
    return data


@dataclass
class Tree:
    """A folder's regular files (path relative to the folder with "/" → real path) and what was skipped
    (relative path → why)."""
    root: str
    files: dict[str, str] = field(default_factory=dict)
    stats: dict[str, os.stat_result] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    def size(self) -> int:
        return sum(st.st_size for st in self.stats.values())


def regular_files(root: str, exclude_top: tuple[str, ...] = (), recursive: bool = True) -> Tree:
    """Every regular file under `root` (only those right in it unless `recursive`), symlinks not followed (a
    symlinked folder is not entered): see the module's rule. `exclude_top` names top-level entries left out
    altogether (a run's work/ folder)."""
    real_root = os.path.realpath(root)
    tree = Tree(real_root)
    for folder, dirs, names in os.walk(real_root, followlinks=False):
        rel_folder = os.path.relpath(folder, real_root)
        rel_folder = "" if rel_folder == "." else rel_folder.replace(os.sep, "/") + "/"
        kept = []
        for d in sorted(dirs):
            if not rel_folder and d in exclude_top:
                continue
            if os.path.islink(os.path.join(folder, d)):
                tree.skipped[rel_folder + d] = _link_why(real_root, os.path.join(folder, d))
            else:
                kept.append(d)
        dirs[:] = kept if recursive else []
        for name in sorted(names):
            if not rel_folder and name in exclude_top:
                continue
            full = os.path.join(folder, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue        # gone since it was listed
            if stat.S_ISLNK(st.st_mode):
                tree.skipped[rel_folder + name] = _link_why(real_root, full)
                continue
            kind = special_kind(st, full)
            if kind:
                tree.skipped[rel_folder + name] = kind
                continue
            tree.files[rel_folder + name] = full
            tree.stats[rel_folder + name] = st
    return tree


def _link_why(real_root: str, path: str) -> str:
    return "a symlink" + ("" if is_inside(real_root, path) else " out of the folder")


def copy_regular(src: str, dest: str, expected: os.stat_result) -> int:
    """Copy one regular file of a walked Tree to `dest` (a new file): not followed if it became a symlink, nor
    read if it became anything else, and no more of it than its size when walked (a file that grows since would
    break the bound a caller checked). The bytes copied; XcInputError when src is not the file it was."""
    shown = printable_line(src)
    try:
        fd = os.open(src, _OPEN_FLAGS)
    except OSError as e:
        raise XcInputError(f"{shown}: cannot be copied ({e.strerror or type(e).__name__})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (expected.st_dev, expected.st_ino):
            raise XcInputError(f"{shown}: replaced while copied — not copied")
        copied = 0
        with open(dest, "xb") as out:
            while chunk := f.read(min(_COPY_CHUNK, expected.st_size - copied + 1)):
                copied += len(chunk)
                if copied > expected.st_size:
                    raise XcInputError(f"{shown}: grew while copied — not copied")
                out.write(chunk)
    return copied


_WARNED: set[str] = set()
_WARNED_LOCK = threading.Lock()


def warn_skipped(where: str, skipped: dict[str, str], limit: int = 4) -> None:
    """One line on stderr naming what a walk skipped (at most `limit` entries, then how many more); once per
    line in a process."""
    if not skipped:
        return
    items = [f"{printable_line(rel)[:120]} ({why})" for rel, why in list(skipped.items())[:limit]]
    more = f" and {len(skipped) - limit} more" if len(skipped) > limit else ""
    what = "1 entry that is not a regular file" if len(skipped) == 1 else \
        f"{len(skipped)} entries that are not regular files"
    line = (f"xc: warning: {printable_line(where)}: skipped {what} (symlinks are not followed, special files not "
            f"read): {', '.join(items)}{more}")
    with _WARNED_LOCK:
        if line in _WARNED:
            return
        _WARNED.add(line)
    print(line, file=sys.stderr, flush=True)
