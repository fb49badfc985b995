"""The numpy MIL interpreter against real coremltools conversions (no mocks).

Each bundled sample is exported with torch.export and converted to an ML program in fp32 and fp16, once per module.
The fp32 program must reproduce torch eager; the fp16 program must be about as accurate as running the model in torch
half precision (it computes in fp16 between ops, so it should not be much better or much worse).
"""
import copy
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

ct = pytest.importorskip("coremltools")
from coremltools.converters.mil import Builder as mb  # noqa: E402

from xc_core.emulate.mil_interpreter import OPS, EmulationError, run_program  # noqa: E402
from xc_core.sources.samples import SAMPLES  # noqa: E402

SAMPLE_NAMES = ["vision-mini", "tts-mini", "transformer-mini"]
TARGETS = (ct.target.iOS17, ct.target.iOS16, ct.target.iOS18)  # first that converts wins


def rel_l2(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def convert(model, args, precisions, targets=TARGETS) -> list:
    """torch.export, then the MIL Program of an mlprogram conversion per precision (coremltools keeps it on the
    MLModel). The core-ATen-preserving decomposition table first, the default one if conversion fails."""
    ep = torch.export.export(model, tuple(args))
    errors = []
    for table in ({}, None):
        try:
            decomposed = ep.run_decompositions(table) if table is not None else ep.run_decompositions()
            for target in targets:
                try:
                    return [ct.convert(decomposed, convert_to="mlprogram", compute_precision=precision,
                                       minimum_deployment_target=target)._mil_program for precision in precisions]
                except Exception as exc:  # try the next deployment target
                    errors.append(f"{target}: {type(exc).__name__}: {exc}")
        except Exception as exc:
            errors.append(f"decompositions {table}: {type(exc).__name__}: {exc}")
    raise RuntimeError("conversion failed: " + " | ".join(errors))


def sample_args(sample, seed=0):
    g = torch.Generator().manual_seed(seed)
    args = []
    for spec in sample.inputs:
        if spec.dtype.startswith("int"):
            args.append(torch.randint(int(spec.low), int(spec.high), tuple(spec.shape), generator=g))
        else:
            args.append(torch.randn(tuple(spec.shape), generator=g))
    return args


def feeds(names, args):
    """Core ML has no int64: token ids go in as int32."""
    return {n: (a.numpy().astype(np.int32) if not a.is_floating_point() else a.numpy()) for n, a in zip(names, args)}


@dataclass
class Converted:
    fp32: object
    fp16: object
    feeds: dict
    reference: np.ndarray   # torch eager fp32
    torch_half: np.ndarray  # the same model in torch half precision


@pytest.fixture(scope="module")
def converted():
    cache: dict[str, Converted] = {}

    def get(name: str) -> Converted:
        if name not in cache:
            sample = SAMPLES[name]
            model = sample.model()
            args = sample_args(sample)
            with torch.no_grad():
                reference = model(*args).double().numpy()
                half = copy.deepcopy(model).half()
                torch_half = half(*[a.half() if a.is_floating_point() else a for a in args]).double().numpy()
            fp32, fp16 = convert(model, args, (ct.precision.FLOAT32, ct.precision.FLOAT16))
            cache[name] = Converted(
                fp32=fp32, fp16=fp16,
                feeds=feeds([s.name for s in sample.inputs], args), reference=reference, torch_half=torch_half)
        return cache[name]
    return get


def only_output(outputs: dict) -> np.ndarray:
    assert len(outputs) == 1
    return next(iter(outputs.values()))


# --- the bundled samples ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_fp32_program_matches_torch(converted, name):
    c = converted(name)
    out = only_output(run_program(c.fp32, c.feeds)[0])
    assert out.dtype == np.float32
    assert out.shape == c.reference.shape
    assert rel_l2(out, c.reference) <= 1e-5


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_fp16_program_is_as_accurate_as_torch_half(converted, name):
    c = converted(name)
    outputs, intermediates = run_program(c.fp16, c.feeds)
    err = rel_l2(only_output(outputs), c.reference)
    half_err = rel_l2(c.torch_half, c.reference)
    assert err <= 2 * half_err, (err, half_err)
    # it really ran in fp16: fp16 tensors between ops, and an error far above the fp32 program's
    assert any(v.dtype == np.float16 for v in intermediates.values())
    assert err > 10 * rel_l2(only_output(run_program(c.fp32, c.feeds)[0]), c.reference)


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_intermediates_are_recorded_by_var_name(converted, name):
    c = converted(name)
    outputs, intermediates = run_program(c.fp32, c.feeds)
    ops = list(c.fp32.functions["main"].operations)
    computed = {v.name for op in ops if op.op_type != "const" for v in op.outputs}
    assert intermediates and set(intermediates) == computed
    for out_name, value in outputs.items():
        np.testing.assert_array_equal(intermediates[out_name], value)
    declared = {v.name: v for op in ops for v in op.outputs}
    for var_name, value in intermediates.items():
        assert value.shape == tuple(declared[var_name].shape)
    assert run_program(c.fp32, c.feeds, record=False)[1] == {}


def test_fp16_intermediates_keep_the_program_dtypes(converted):
    c = converted("vision-mini")
    _, intermediates = run_program(c.fp16, c.feeds)
    from coremltools.converters.mil.mil import types
    for op in c.fp16.functions["main"].operations:
        for var in op.outputs:
            if var.name in intermediates:
                assert intermediates[var.name].dtype == np.dtype(types.nptype_from_builtin(var.dtype)), var.name


# --- unsupported ops ---------------------------------------------------------------------------------------------

def test_unknown_op_raises():
    # random ops cannot be reproduced, so the interpreter deliberately has none
    assert "random_uniform" not in OPS

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.add(x=x, y=mb.random_uniform(shape=np.array([2, 3], np.int32)))

    with pytest.raises(EmulationError, match="cannot emulate op random_uniform"):
        run_program(prog, {"x": np.zeros((2, 3), np.float32)})


def test_op_missing_from_the_dispatch_table_raises(converted, monkeypatch):
    monkeypatch.delitem(OPS, "conv")
    c = converted("vision-mini")
    with pytest.raises(EmulationError, match="cannot emulate op conv"):
        run_program(c.fp32, c.feeds)


def test_inputs_are_validated(converted):
    c = converted("tts-mini")
    with pytest.raises(ValueError, match="missing"):
        run_program(c.fp32, {})
    # int64 token ids are cast to the program's int32
    out64 = only_output(run_program(c.fp32, {k: v.astype(np.int64) for k, v in c.feeds.items()})[0])
    np.testing.assert_array_equal(out64, only_output(run_program(c.fp32, c.feeds)[0]))


# --- op coverage: small torch models exercising many ops, fp32 against torch eager ----------------------------

class ConvZoo(nn.Module):
    """Grouped/dilated/strided conv, grouped conv_transpose with output_padding, pools with ceil_mode and padding,
    norms, activations, resizes, pads, reductions."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(4, 8, 3, stride=2, padding=2, dilation=2, groups=2)
        self.up = nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.up1d = nn.ConvTranspose1d(6, 4, 4, stride=3, dilation=2)
        self.conv3d = nn.Conv3d(1, 3, (2, 3, 3), stride=(1, 2, 1), padding=(0, 1, 1))
        self.inorm = nn.InstanceNorm2d(6, affine=True)
        self.prelu = nn.PReLU(6)
        self.lrn = nn.LocalResponseNorm(3)
        self.gn = nn.GroupNorm(2, 6)
        self.ln = nn.LayerNorm([6, 10])

    def forward(self, x):
        y = self.up(self.conv(x))                                                       # (1, 6, 10, 10)
        y = (self.prelu(y) + F.elu(y) + F.leaky_relu(y, 0.1) + F.silu(y) + F.hardswish(y) + F.gelu(y)
             + F.softplus(y) + torch.tanh(y) * F.relu6(y) + F.hardsigmoid(y) + torch.sigmoid(y))
        y = self.inorm(y) + self.lrn(y) + self.gn(y)
        a = F.avg_pool2d(y, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
        b = F.max_pool2d(y, 3, stride=2, padding=1, ceil_mode=True)
        c = F.pad(F.avg_pool2d(y, 2, stride=2), (0, 1, 0, 1))
        z = torch.cat([a, b, c], dim=1)                                                 # (1, 18, 6, 6)
        near = F.interpolate(z, scale_factor=2, mode="nearest")
        bil = F.interpolate(z, size=(9, 7), mode="bilinear", align_corners=False)
        bil_ac = F.interpolate(z, size=(9, 7), mode="bilinear", align_corners=True)
        padded = (F.pad(z, (1, 2, 2, 1), mode="reflect") + F.pad(z, (1, 2, 2, 1), mode="replicate")
                  + F.pad(z, (1, 2, 2, 1), value=0.5))
        s = near.mean((2, 3)) + bil.amax((2, 3)) + bil_ac.sum((2, 3)) / 10 + padded.std((2, 3))
        s = s + torch.cumsum(s, dim=1) * 0.1 + torch.flip(s, [1])
        q = (torch.where(s > 0, torch.erf(s), torch.exp(-s.abs())) + torch.sqrt(s.abs() + 1)
             + torch.rsqrt(s.abs() + 1) + torch.log(s.abs() + 1) + s.clamp(-0.5, 0.5) ** 2)
        values, indices = torch.topk(s, 5, dim=1)
        w = self.up1d(self.ln(y.mean(3)))
        v = self.conv3d(x[:, :2].reshape(1, 1, 2, 10, 10))
        return (q, values, indices.to(torch.int32), w, v, F.pixel_shuffle(z[:, :16], 2),
                torch.argmax(s, dim=1).to(torch.int32), s.softmax(-1))


class IndexZoo(nn.Module):
    """Attention (float mask), grouped conv1d, gather/index_select/scatter, strided and negative slices, chunk/stack,
    masked_fill, triu/tril, integer floor_div/remainder, sort, argmin, log_softmax."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.mha = nn.MultiheadAttention(16, 4, batch_first=True)
        self.conv = nn.Conv1d(16, 8, 3, padding=1, groups=4)

    def forward(self, x, idx, v):
        causal = torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)
        att = self.mha(x, x, x, attn_mask=causal.float() * -1e4, need_weights=False)[0]   # (2, 6, 16)
        h = self.conv(att.transpose(1, 2))
        e = torch.einsum("bij,bkj->bik", att, att)
        chunks = torch.chunk(att, 4, dim=-1)
        scattered = torch.zeros(2, 8, dtype=att.dtype).scatter_add(1, idx.view(1, -1).expand(2, -1).contiguous(),
                                                                    att[:, 0, :4])
        updated = att.clone()
        updated[:, 2] = 1.0
        return (att, h, F.max_pool1d(h, 2, 2), F.adaptive_avg_pool1d(h, 3), torch.bmm(e, att),
                torch.index_select(att, 1, idx), att[:, 1::2, -5:-1], torch.stack([chunks[0], chunks[3]], dim=1),
                scattered, updated, e.masked_fill(causal, -1.0), torch.tril(e, -1) + torch.triu(e, 2),
                torch.floor_divide(v, 3) + torch.remainder(v, 4) * 10,
                torch.sort(att[:, 0], dim=-1, descending=True)[0], att.argmin(-1).to(torch.int32),
                F.log_softmax(att, -1), F.interpolate(x.unsqueeze(1), scale_factor=1.5, mode="bilinear"))


def _zoo_case(zoo):
    if zoo == "conv":
        return ConvZoo().eval(), ["x"], [torch.randn(1, 4, 10, 10, generator=torch.Generator().manual_seed(1))]
    g = torch.Generator().manual_seed(2)
    return IndexZoo().eval(), ["x", "idx", "v"], [torch.randn(2, 6, 16, generator=g), torch.tensor([3, 0, 5, 1]),
                                                   torch.randint(-20, 20, (2, 5), generator=g)]


@pytest.mark.parametrize("zoo", ["conv", "index"])
def test_op_zoo_matches_torch(zoo):
    model, names, args = _zoo_case(zoo)
    with torch.no_grad():
        references = model(*args)
    [prog] = convert(model, args, (ct.precision.FLOAT32,))
    outputs, _ = run_program(prog, feeds(names, args))
    assert len(outputs) == len(references)
    for (var_name, out), ref in zip(outputs.items(), references):
        ref = ref.numpy()
        assert out.shape == ref.shape, var_name
        if np.issubdtype(ref.dtype, np.integer):
            np.testing.assert_array_equal(out, ref, err_msg=var_name)
        else:
            assert rel_l2(out, ref) <= 1e-5, var_name


# --- hand-built programs: control flow, fp16 storage, attribute semantics ----------------------------------------

def test_cond_and_while_loop():
    @mb.program(input_specs=[mb.TensorSpec(shape=(3,)), mb.TensorSpec(shape=(1,))], opset_version=ct.target.iOS17)
    def prog(x, n):
        def body(acc, i):
            return mb.add(x=acc, y=x), mb.add(x=i, y=1.0)

        acc, _ = mb.while_loop(_cond=lambda acc, i: mb.less(x=i, y=n), _body=body,
                               loop_vars=(mb.mul(x=x, y=0.0), mb.mul(x=n, y=0.0)))
        positive = mb.greater(x=mb.reduce_sum(x=acc), y=0.0)
        return mb.cond(pred=positive, _true_fn=lambda: mb.mul(x=acc, y=2.0), _false_fn=lambda: mb.mul(x=acc, y=-1.0))

    x = np.array([1.0, 2.0, 3.0], np.float32)
    out = only_output(run_program(prog, {"x": x, "n": np.array([4.0], np.float32)})[0])
    np.testing.assert_allclose(out, 4 * x * 2)   # 4 iterations, then the true branch
    out = only_output(run_program(prog, {"x": -x, "n": np.array([2.0], np.float32)})[0])
    np.testing.assert_allclose(out, 2 * x)       # 2 iterations of -x, then the false branch


def test_fp16_values_are_stored_in_fp16():
    @mb.program(input_specs=[mb.TensorSpec(shape=(3,))], opset_version=ct.target.iOS17)
    def prog(x):
        h = mb.cast(x=x, dtype="fp16")
        return mb.cast(x=mb.add(x=mb.mul(x=h, y=np.float16(1000.0)), y=np.float16(0.1)), dtype="fp32")

    out = only_output(run_program(prog, {"x": np.array([100.0, 1.0001, -0.3], np.float32)})[0])
    # 1e5 overflows fp16; 1.0001 rounds to 1.0 in fp16 before the multiply; every result is an fp16 value
    assert np.isinf(out[0])
    expected = (np.float16(np.float16(1.0001) * np.float16(1000.0)) + np.float16(0.1)).astype(np.float16)
    assert out[1] == np.float32(expected)
    assert out.dtype == np.float32 and np.float32(np.float16(out[2])) == out[2]


def test_slicing_gather_and_layout_attributes():
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3, 4))], opset_version=ct.target.iOS17)
    def prog(x):
        sliced = mb.slice_by_index(x=x, begin=[1, 0, -1], end=[2, 3, 0], stride=[1, 2, -2],
                                   begin_mask=[False, True, False], end_mask=[False, False, True],
                                   squeeze_mask=[True, False, False])
        interleaved = mb.concat(values=[x, mb.mul(x=x, y=10.0)], axis=1, interleave=True)
        gathered = mb.gather(x=x, indices=np.array([[2, 0], [1, 1]], np.int32), axis=2, batch_dims=1)
        banded = mb.band_part(x=x, lower=1, upper=0)
        by_size = mb.slice_by_size(x=x, begin=[0, 1, 1], size=[-1, 2, 2])
        return sliced, interleaved, gathered, banded, by_size

    sliced, interleaved, gathered, banded, by_size = run_program(prog, {"x": x})[0].values()
    np.testing.assert_array_equal(sliced, x[1, 0:3:2, -1::-2])
    expected = np.empty((2, 6, 4), np.float32)
    expected[:, 0::2], expected[:, 1::2] = x, x * 10
    np.testing.assert_array_equal(interleaved, expected)
    np.testing.assert_array_equal(gathered, np.stack([x[0][:, [2, 0]], x[1][:, [1, 1]]]))
    np.testing.assert_array_equal(banded, np.tril(np.triu(x, -1), 0))
    np.testing.assert_array_equal(by_size, x[:, 1:3, 1:3])


def test_every_dispatch_entry_is_callable():
    assert all(callable(fn) for fn in OPS.values())
    assert issubclass(EmulationError, RuntimeError)


@pytest.mark.parametrize("mask_kind", ["none", "bool", "float"])
def test_scaled_dot_product_attention_matches_torch(mask_kind):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=g), torch.randn(2, 3, 7, 8, generator=g),
               torch.randn(2, 3, 7, 4, generator=g))
    mask = {"none": None, "bool": torch.rand(5, 7, generator=g) > 0.3, "float": torch.randn(1, 5, 7, generator=g)}[
        mask_kind]
    if mask is not None and mask.dtype == torch.bool:
        mask[:, 0] = True  # every query attends to something
    specs = [mb.TensorSpec(shape=t.shape) for t in (q, k, v)]

    @mb.program(input_specs=specs, opset_version=ct.target.iOS18)
    def prog(query, key, value):
        extra = {} if mask is None else {"attn_mask": mask.numpy()}
        return mb.scaled_dot_product_attention(query=query, key=key, value=value, **extra)

    out = only_output(run_program(prog, {"query": q.numpy(), "key": k.numpy(), "value": v.numpy()})[0])
    assert rel_l2(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask).numpy()) <= 1e-6


def test_slice_update():
    x = np.arange(4 * 6, dtype=np.float32).reshape(4, 6)

    @mb.program(input_specs=[mb.TensorSpec(shape=(4, 6))], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.slice_update(x=x, update=np.full((2, 3), -1.0, np.float32), begin=np.array([1, 0], np.int32),
                               end=np.array([4, 6], np.int32), stride=np.array([2, 2], np.int32))

    expected = x.copy()
    expected[1:4:2, 0:6:2] = -1.0
    np.testing.assert_array_equal(only_output(run_program(prog, {"x": x})[0]), expected)


# --- semantics settled by coremltools' own MIL op tests (bench/emulator_conformance.py runs all of them) ---------

def test_a_scalar_fed_to_an_input_declared_1():
    """coremltools declares a scalar placeholder as shape (1,); Core ML takes a 0-d value for it."""
    @mb.program(input_specs=[mb.TensorSpec(shape=(1,))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.mul(x=x, y=2.0)

    np.testing.assert_array_equal(only_output(run_program(prog, {"x": np.float32(3.0)})[0]), [6.0])


def test_local_response_norm_runs_only_where_it_is_defined():
    """NCHW with an odd window: torch's LRN. A rank-3 input (the op's doc says channels on axis 1, coremltools'
    expected values use axis 0) and an even window (which side gets the extra channel?) are refused."""
    x = np.random.default_rng(0).standard_normal((2, 6, 3, 3)).astype(np.float32)

    def lrn(shape, size):
        @mb.program(input_specs=[mb.TensorSpec(shape=shape)], opset_version=ct.target.iOS17)
        def prog(x):
            return mb.local_response_norm(x=x, size=size, alpha=0.5, beta=0.75, k=1.0)
        return prog

    got = only_output(run_program(lrn(x.shape, 3), {"x": x})[0])
    want = torch.nn.LocalResponseNorm(3, alpha=0.5, beta=0.75, k=1.0)(torch.from_numpy(x)).numpy()
    assert rel_l2(got, want) <= 1e-6
    with pytest.raises(EmulationError, match="rank 3"):
        run_program(lrn((1, 3, 2), 3), {"x": np.ones((1, 3, 2), np.float32)})
    with pytest.raises(EmulationError, match="size 2"):
        run_program(lrn(x.shape, 2), {"x": x})


def test_nearest_neighbour_source_positions():
    """upsample_nearest_neighbor takes floor(i * in / out) (coremltools' expected values for a fractional scale:
    1.12 on a width of 3 keeps [0, 1, 2]); resize_nearest_neighbor and iOS17 resize take half-pixel centres,
    floor((i + 0.5) * in / out), as the TensorFlow frontend that emits them means."""
    x = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS17)
    def prog(x):
        return (mb.upsample_nearest_neighbor(x=x, scale_factor_height=1.0, scale_factor_width=1.12),
                mb.resize_nearest_neighbor(x=x, target_size_height=3, target_size_width=2),
                mb.resize(x=x, shape=np.array([1, 1, 2, 4], np.int32), resized_dims=np.uint32(2),
                          interpolation_mode="NEAREST_NEIGHBOR"))

    upsampled, resized, resized17 = run_program(prog, {"x": x})[0].values()
    np.testing.assert_array_equal(upsampled, x)                       # width floor(4 * 1.12) = 4: [0, 1, 2, 3]
    np.testing.assert_array_equal(resized, x[..., [1, 3]])            # 4 → 2: floor((i + 0.5) * 2) = [1, 3]
    np.testing.assert_array_equal(resized17, x[..., [0, 2], :])       # 3 → 2: floor((i + 0.5) * 1.5) = [0, 2]


def test_reshape_zeros_align_on_the_right_in_ios17():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.reshape(x=x, shape=[1, 0, -1, 0])

    np.testing.assert_array_equal(only_output(run_program(prog, {"x": x})[0]), x.reshape(1, 1, 2, 3))


def test_chained_compressed_weights():
    """Joint compression: a quantized LUT (constexpr_blockwise_shift_scale) read by constexpr_lut_to_sparse, whose
    two outputs constexpr_sparse_to_dense reads — each op's input is the previous op's value."""
    from coremltools.converters.mil.mil import types
    mask = np.array([[1, 0, 1, 1], [0, 1, 1, 0]], dtype=types.np_uint1_dtype)
    indices = np.array([3, 0, 1, 2, 3], dtype=types.nptype_from_builtin(types.string_to_builtin("uint2")))
    quantized = np.array([-4, 1, 5, 9], np.int8).reshape(1, 1, 4, 1)
    scale, offset = np.full((1, 1, 1, 1), 0.5, np.float32), np.full((1, 1, 1, 1), 1, np.int8)

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 4))], opset_version=ct.target.iOS18)
    def prog(x):
        lut = mb.constexpr_blockwise_shift_scale(data=quantized, scale=scale, offset=offset)
        sparse_mask, values = mb.constexpr_lut_to_sparse(indices_mask=mask, indices_nonzero_data=indices, lut=lut)
        return mb.add(x=x, y=mb.constexpr_sparse_to_dense(nonzero_data=values, mask=sparse_mask))

    lut = (quantized.reshape(-1).astype(np.float32) - 1) * 0.5                 # [-2.5, 0, 2, 4]
    dense = np.zeros((2, 4), np.float32)
    dense[mask.astype(bool)] = lut[indices.astype(int)]
    np.testing.assert_array_equal(only_output(run_program(prog, {"x": np.zeros((2, 4), np.float32)})[0]), dense)
