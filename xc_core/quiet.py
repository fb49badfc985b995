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
