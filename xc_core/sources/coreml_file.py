"""Compiled Core ML models as sources: an `.mlmodel` or a zipped `.mlpackage`. An ML program's MIL program is read
back from the spec; a `neuralNetwork` model (the format before ML programs) is read layer by layer from its spec
(readers/coreml_neural_network.py) — there is no MIL program to emulate, so its numerics are not run here. No
source model is needed."""
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
    from ..readers.coreml_neural_network import NN_TYPES
    if spec.WhichOneof("Type") in NN_TYPES:
        return _neural_network_source(spec, path, name)
    if spec.WhichOneof("Type") != "mlProgram":
        raise XcInputError(f"{name}: a Core ML '{spec.WhichOneof('Type')}' model; xc reads ML programs and "
                           "neuralNetwork models (.mlmodel, or a zipped .mlpackage)")
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


def _neural_network_source(spec, path: str, name: str) -> Source:
    from ..readers.coreml_neural_network import neural_network_graph, summary
    try:
        graph = neural_network_graph(spec)
    except Exception as e:  # noqa: BLE001 — a spec coremltools parsed but whose layers do not hold together
        raise XcInputError(f"{name}: the neuralNetwork layers could not be read ({first_line(e)})") from None
    if not graph.nodes:
        raise XcInputError(f"{name}: the neuralNetwork model has no layers")
    inputs = []
    for t in graph.inputs:
        if not t.shape:
            raise XcInputError(f"{name}: input '{t.name}' declares no shape; xc draws inputs of the declared shape")
        inputs.append(InputSpec(t.name, list(t.shape), t.dtype or "float32", note="the model's declared shape"))
    from ..paths import sha256_file
    facts = summary(spec)
    return Source(kind="coreml", name=name, sha256=sha256_file(path), inputs=inputs, path=path, coreml_graph=graph,
                  metadata=facts,
                  notes=[f"a Core ML {facts['coreml_type']} model (the format before ML programs): its layers, "
                         "declared shapes and weight precisions read from the spec; compute units predicted by cited "
                         "rules; its numerics are not run (there is no MIL program to emulate, and Core ML runs "
                         "only on Apple hardware)"])


def _unzip_package(path: str, workdir: str, name: str, limits: Limits) -> str:
    with safe_zip.open_zip(path, name, limits) as z:   # bounds, methods and paths (no zip slip) checked first
        safe_zip.extract_all(z, workdir, name, limits)
    for root, dirs, _ in os.walk(workdir):
        for d in dirs:
            if d.endswith(".mlpackage"):
                return os.path.join(root, d)
    raise XcInputError(f"{name}: the zip holds no .mlpackage folder")


