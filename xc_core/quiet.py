"""Libraries that talk while they work: torch.export and torch.onnx print progress and warnings, coremltools prints
progress bars and version warnings on import. xc's CLI output and the server's log stay clean."""
from __future__ import annotations

import contextlib
import io
import logging
import warnings


@contextlib.contextmanager
def quiet_torch():
    """torch.export and torch.onnx: their logger to errors only, warnings ignored, stdout kept."""
    logging.getLogger("torch").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


@contextlib.contextmanager
def quiet_coremltools():
    """coremltools: its logger to errors only, warnings ignored, stdout and stderr kept (its progress bars)."""
    logging.getLogger("coremltools").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()), \
            contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


@contextlib.contextmanager
def quiet_coreai():
    """coreai-torch: its conversion progress bar (rich, on stdout) and its torch-version warning."""
    logging.getLogger("coreai_torch").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()), \
            contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


@contextlib.contextmanager
def native_output(sink: list[str] | None = None):
    """What native code writes to file descriptors 1 and 2 (C++ logging, which Python's redirects do not see),
    captured for the block; its text is appended to `sink`. LiteRT's GPU delegate says which ops it cannot take
    only there."""
    import os
    import sys
    import tempfile
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        for fd in saved:
            os.dup2(tmp.fileno(), fd)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
            tmp.seek(0)
            if sink is not None:
                sink.append(tmp.read().decode("utf-8", "replace"))


@contextlib.contextmanager
def quiet_litert(sink: list[str] | None = None):
    """litert-torch and LiteRT: the converter's progress lines (stdout/stderr), warnings, and the C++ runtime's
    logging on file descriptor 2 (kept in `sink` when given)."""
    logging.getLogger("litert_torch").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()), \
            contextlib.redirect_stdout(io.StringIO()), native_output(sink):
        warnings.simplefilter("ignore")
        yield
