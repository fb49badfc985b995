"""Compiled Core ML models as sources: an `.mlmodel` (NeuralNetwork models are refused: xc reads ML programs) or a
zipped `.mlpackage`. The MIL program is read back from the spec; no source model is needed."""
from __future__ import annotations

import os
import shutil
import tempfile

from ..errors import XcInputError, first_line
from ..limits import Limits
from . import safe_zip
from .spec import InputSpec, Source

_ARRAY_DTYPES = {65568: "float32", 65552: "float16", 131104: "int32", 65600: "float64"}


def load_coreml(path: str, limits: Limits | None = None) -> Source:
    """The unpacked package lives in the Source's temp_dirs until Source.close(); on error it is removed here."""
    workdir = tempfile.mkdtemp(prefix="xc-coreml-")
    try:
        src = _load(path, workdir, limits or Limits.from_env())
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    src.temp_dirs.append(workdir)
    return src


def _load(path: str, workdir: str, limits: Limits) -> Source:
    name = os.path.basename(path)
    try:
        from ..quiet import quiet_coremltools
        with quiet_coremltools():  # coremltools prints version warnings on import
            import coremltools as ct
            from coremltools.converters.mil.frontend.milproto.load import (
                load as load_milproto,
            )
    except ImportError:
        raise XcInputError(f"{name}: reading Core ML models needs coremltools") from None
    if path.lower().endswith(".zip") or safe_zip.is_zip(path):
        package = _unzip_package(path, workdir, name, limits)
        try:
            mlmodel = ct.models.MLModel(package, skip_model_load=True)
        except Exception as e:
            raise XcInputError(f"{name}: not a readable .mlpackage ({first_line(e)})") from None
        spec, weights = mlmodel.get_spec(), mlmodel.weights_dir
    else:
        try:
            spec = ct.utils.load_spec(path)
        except Exception as e:
            raise XcInputError(f"{name}: not a readable .mlmodel ({first_line(e)})") from None
        weights = ""
    if spec.WhichOneof("Type") != "mlProgram":
        raise XcInputError(f"{name}: a Core ML '{spec.WhichOneof('Type')}' model; xc reads ML programs "
                           "(convert_to='mlprogram'), uploaded as a zipped .mlpackage")
    try:
        prog = load_milproto(spec, spec.specificationVersion, file_weights_dir=weights or "")
    except Exception as e:
        raise XcInputError(f"{name}: the ML program could not be read back ({first_line(e)})") from None
    inputs = []
    for i in spec.description.input:
        arr = i.type.multiArrayType
        shape = [int(d) for d in arr.shape]
        dtype = _ARRAY_DTYPES.get(arr.dataType, "float32")
        low, high = (0, 16) if dtype.startswith("int") else (None, None)
        inputs.append(InputSpec(i.name, shape, dtype, low, high, "the model's declared shape"
                                + ("; integer values drawn from [0, 16)" if low is not None else "")))
    from ..paths import sha256_file
    return Source(kind="coreml", name=name, sha256=sha256_file(path), inputs=inputs, mil_program=prog, path=path,
                  notes=["compiled Core ML model: inspected and emulated as it is; no reference to compare to"])


def _unzip_package(path: str, workdir: str, name: str, limits: Limits) -> str:
    with safe_zip.open_zip(path, name, limits) as z:   # bounds, methods and paths (no zip slip) checked first
        safe_zip.extract_all(z, workdir, name, limits)
    for root, dirs, _ in os.walk(workdir):
        for d in dirs:
            if d.endswith(".mlpackage"):
                return os.path.join(root, d)
    raise XcInputError(f"{name}: the zip holds no .mlpackage folder")


