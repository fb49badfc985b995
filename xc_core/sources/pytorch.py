"""PyTorch sources: bundled samples, ExportedProgram .pt2, TorchScript .pt, and state_dicts of a sample's
architecture. A pickled whole nn.Module is refused: loading it would run code named by the file.

What runs for each: a .pt2 is read by `pt2_archive` (no pickle, no evaluated text; its graph runs only registered
torch operators); a TorchScript .pt is compiled by TorchScript, whose code can call only registered operators and
whose unpickler rebuilds only TorchScript values; a state_dict goes through `torch.load(weights_only=True)` and
must hold plain dense CPU tensors.
"""
from __future__ import annotations

import os

from ..errors import XcInputError, first_line
from ..limits import Limits
from . import safe_zip
from .onnx_file import DEFAULT_BATCH, DEFAULT_DIM
from .spec import InputSpec, ShapeOverrides, Source

TORCH_DTYPES = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16",
                "torch.float64": "float64", "torch.int64": "int64", "torch.int32": "int32", "torch.int8": "int8",
                "torch.uint8": "uint8", "torch.bool": "bool"}

PICKLED_MODULE = ("{name}: this is a pickled Python object (torch.save of a whole nn.Module or other classes); "
                  "xc never unpickles arbitrary objects because that runs code from the file — save it with "
                  "torch.export.save (.pt2), torch.jit.save (.pt) or torch.onnx.export (.onnx), or save a "
                  "state_dict of a bundled sample's architecture")


def load_sample(name: str) -> Source:
    import hashlib

    from .samples import SAMPLES
    if name not in SAMPLES:
        raise XcInputError(f"unknown sample '{name}'; accepted: {', '.join('sample:' + n for n in SAMPLES)}")
    sample = SAMPLES[name]
    model = sample.model()
    # A sample's identity is its name plus its weights: hash the state_dict bytes so the cache key changes
    # whenever the definition does.
    h = hashlib.sha256(name.encode())
    for k, v in model.state_dict().items():
        h.update(k.encode())
        h.update(v.detach().contiguous().numpy().tobytes())
    return Source(kind="sample", name=name, sha256=h.hexdigest(), inputs=list(sample.inputs), module=model)


def load_exported_program(path: str, shapes: ShapeOverrides | None = None, limits: Limits | None = None) -> Source:
    from .pt2_archive import load_pt2
    name = os.path.basename(path)
    if not safe_zip.is_zip(path):
        raise XcInputError(f"{name}: not a torch.export archive (a .pt2 is a zip written by torch.export.save)")
    ep, notes = load_pt2(path, limits or Limits.from_env())
    constants: dict = {}
    from . import pt2_constants
    from .program_dims import program_dim_bounds
    if pt2_constants.needs_respecialising(ep):
        # Once, here: the reference, the capture and every target then see a program of tensor inputs only.
        ep, constants = pt2_constants.respecialise(ep, name)
        notes.append(pt2_constants.baked_in_note(constants))
    try:
        module = ep.module()
    except Exception as e:  # noqa: BLE001 — unlifting checks the signature against the state dict
        raise XcInputError(f"{name}: the exported program cannot be turned into a module "
                           f"({type(e).__name__}: {first_line(e)})") from None
    from ..paths import sha256_file
    return Source(kind="exported-program", name=name, sha256=sha256_file(path),
                  inputs=exported_program_inputs(ep), module=module, exported_program=ep, path=path,
                  notes=notes, dim_bounds=program_dim_bounds(ep),
                  constant_inputs={k: pt2_constants.json_value(v) for k, v in constants.items()})


def load_torch_file(path: str, shapes: ShapeOverrides | None = None, limits: Limits | None = None) -> Source:
    name = os.path.basename(path)
    if not safe_zip.is_zip(path):
        # Legacy (non-zip) torch.save files are bare pickles. torch.load(weights_only=True) could read tensors
        # from them, but a bare pickle from an upload is exactly what we refuse to feed to any unpickler.
        raise XcInputError(PICKLED_MODULE.format(name=name).replace("this is a pickled Python object",
                                                                     "this is not a zip archive but a bare pickle"))
    # torch reads the zip itself; check its directory (entries, sizes, methods, paths) before it does.
    with safe_zip.open_zip(path, name, limits or Limits.from_env()) as z:
        names = z.namelist()
    if any(n.endswith("/constants.pkl") for n in names) and any("/code/" in n for n in names):
        return _load_torchscript(path, shapes)
    return _load_state_dict(path, shapes)


def _load_torchscript(path: str, shapes: ShapeOverrides | None) -> Source:
    import torch
    name = os.path.basename(path)
    try:
        module = torch.jit.load(path, map_location="cpu").eval()
    except Exception as e:
        raise XcInputError(f"{name}: torch.jit.load failed ({type(e).__name__}: {first_line(e)})") from None
    # TorchScript's own parser admits only identifiers as attribute names; checked again all the same, because these
    # names become attribute paths in the code torch.fx generates when the module is converted for the targets.
    from .pt2_archive import check_fqn
    for what, names in (("module name", (n for n, _ in module.named_modules())),
                        ("parameter name", (n for n, _ in module.named_parameters())),
                        ("buffer name", (n for n, _ in module.named_buffers()))):
        for fqn in names:
            if fqn:
                check_fqn(fqn, what, name)
    args = [a for a in module.forward.schema.arguments[1:]]  # [0] is self
    shapes = shapes or {}
    specs = []
    for a in args:
        if str(a.type) != "Tensor":
            raise XcInputError(f"{name}: forward takes '{a.name}: {a.type}', not a tensor; TorchScript modules "
                               "whose forward takes Python values cannot be re-exported — export the model to "
                               ".pt2 or .onnx with that value fixed")
        if a.name not in shapes:
            missing = [x.name for x in args if x.name not in shapes]
            raise XcInputError(f"{name}: TorchScript does not record input shapes; give the shape of "
                               f"{', '.join(missing)}", fix="shapes", inputs=missing)
        shape, dtype = shapes[a.name]
        specs.append(InputSpec(a.name, list(shape), dtype or "float32", None, None, "shape given by the user"))
    from ..paths import sha256_file
    return Source(kind="torchscript", name=name, sha256=sha256_file(path), inputs=specs, module=module,
                  path=path, notes=["TorchScript has no nn.Module hierarchy after conversion: module paths are "
                                    "unavailable for this source"])


def _load_state_dict(path: str, shapes: ShapeOverrides | None) -> Source:
    import pickle

    import torch

    from .samples import SAMPLES
    name = os.path.basename(path)
    try:
        # weights_only=True: the unpickler only rebuilds tensors and plain containers; any other global (a class
        # of an nn.Module, os.system, ...) is refused before it is looked up, so nothing in the file runs.
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise XcInputError(PICKLED_MODULE.format(name=name)) from None
    except Exception as e:
        raise XcInputError(f"{name}: torch.load failed ({type(e).__name__}: {first_line(e)}); the file may be "
                           "truncated") from None
    if not isinstance(obj, dict) or not obj or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise XcInputError(f"{name}: a .pt that is not TorchScript must be a state_dict (a dict of tensors) of a "
                           f"bundled sample's architecture ({', '.join(SAMPLES)})")
    return _state_dict_source(obj, path, "state_dict")


def load_safetensors(path: str, limits: Limits | None = None) -> Source:
    """safetensors weights of a bundled sample's architecture: a JSON header and raw tensor bytes, no pickle."""
    name = os.path.basename(path)
    try:
        from safetensors.torch import load_file
        obj = load_file(path, device="cpu")
    except Exception as e:  # noqa: BLE001 — a malformed header or truncated data
        raise XcInputError(f"{name}: not readable safetensors ({type(e).__name__}: {first_line(e)})") from None
    if not obj:
        raise XcInputError(f"{name}: the safetensors file holds no tensors")
    return _state_dict_source(obj, path, "safetensors weights")


def _state_dict_source(obj: dict, path: str, what: str) -> Source:
    from .samples import SAMPLES
    name = os.path.basename(path)
    for key, t in obj.items():
        problem = _unusable_tensor(t)
        if problem:
            raise XcInputError(f"{name}: state_dict entry {str(key)[:80]!r} is {problem}; accepted: dense CPU "
                               "tensors of a bundled sample's architecture")
    for sample_name, sample in SAMPLES.items():
        model = sample.model()
        expected = model.state_dict()
        if set(expected) == set(obj) and all(expected[k].shape == obj[k].shape for k in obj):
            try:
                model.load_state_dict(obj)
            except Exception as e:  # noqa: BLE001 — a dtype the parameter cannot take
                raise XcInputError(f"{name}: the {what} fit sample '{sample_name}' by shape but not by type "
                                   f"({type(e).__name__}: {first_line(e)})") from None
            from ..paths import sha256_file
            return Source(kind="state-dict", name=name, sha256=sha256_file(path), inputs=list(sample.inputs),
                          module=model.eval(), path=path,
                          notes=[f"{what} loaded into the architecture of sample '{sample_name}'"])
    raise XcInputError(f"{name}: these {what} match no known architecture (keys and shapes of "
                       f"{', '.join(SAMPLES)}); export the model to .pt2 or .onnx instead")


def _unusable_tensor(t) -> str | None:
    """Why a tensor from a state_dict cannot be loaded into a model here, or None."""
    import torch
    if t.device.type != "cpu":
        return f"a tensor on the '{t.device.type}' device (it holds no data here)"
    if t.layout != torch.strided:
        return f"a {str(t.layout).replace('torch.', '')} tensor"
    if t.is_quantized:
        return f"a quantized tensor ({t.dtype})"
    if t.is_complex():
        return f"a complex tensor ({t.dtype})"
    return None


def exported_program_inputs(ep) -> list[InputSpec]:
    """Input specs from the placeholders' fake tensors. Symbolic dims are named (torch's symbol, e.g. s77) in
    `dim_names` and resolved later; int inputs that index an embedding get its row count as their bound."""
    import torch
    sig = ep.graph_signature
    user_inputs = set(sig.user_inputs)
    embedding_rows = _embedding_bounds(ep)
    specs = []
    for node in ep.graph.nodes:
        if node.op != "placeholder" or node.name not in user_inputs:
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise XcInputError(f"input '{node.name}' is not a tensor; xc accepts models whose inputs are tensors")
        dtype = TORCH_DTYPES.get(str(val.dtype), str(val.dtype).replace("torch.", ""))
        shape, labels = [], []
        for i, d in enumerate(val.shape):
            if isinstance(d, int):
                shape.append(d)
                labels.append(None)
            else:
                shape.append(DEFAULT_BATCH if i == 0 else DEFAULT_DIM)
                labels.append(str(d))
        low = high = None
        if dtype.startswith(("int", "uint")) and node.name in embedding_rows:
            low, high = 0, embedding_rows[node.name]
        elif dtype.startswith(("int", "uint")) and node.name in _MASK_INPUTS:
            low, high = 0, 2   # 1 attends, 0 masks out: other values are not masks (-1 would double the bias)
        specs.append(InputSpec(node.name, shape, dtype, low, high, "",
                               dim_names=tuple(labels) if any(labels) else ()))
    return specs


# Integer inputs Hugging Face models take as 0/1 masks, by the name transformers gives them.
_MASK_INPUTS = {"attention_mask", "decoder_attention_mask", "encoder_attention_mask"}


# Ops that move token ids around without changing them: ids reach the embedding through these (Hugging Face
# models view input_ids as (-1, seq) first).
_ID_PRESERVING = {"view", "reshape", "_unsafe_view", "unsqueeze", "squeeze", "flatten", "clone", "contiguous",
                  "expand", "_to_copy", "to", "slice", "select", "alias", "detach", "permute", "transpose"}


def _embedding_bounds(ep) -> dict[str, int]:
    """input name -> the number of rows of the (smallest) embedding its ids index, following the ids through
    views and reshapes."""
    import torch
    out = {}
    for node in ep.graph.nodes:
        if node.op != "placeholder":
            continue
        sizes, stack, seen = [], [node], set()
        while stack:
            n = stack.pop()
            for user in n.users:
                if user in seen or user.op != "call_function":
                    continue
                seen.add(user)
                name = getattr(getattr(user.target, "_overloadpacket", None), "__name__", "")
                if user.target is torch.ops.aten.embedding.default and len(user.args) > 1 and user.args[1] is n:
                    weight = user.args[0].meta.get("val")
                    if isinstance(weight, torch.Tensor):
                        sizes.append(int(weight.shape[0]))
                elif name in _ID_PRESERVING and user.args and user.args[0] is n:
                    stack.append(user)
        if sizes:
            out[node.name] = min(sizes)
    return out


