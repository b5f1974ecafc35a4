"""Lab 03 graded tests: the fused LayerNorm+GELU kernel, and the Inductor lowering that uses it.

The tests follow the handout's steps (``lab.toml``'s ``[[steps]]``), one section each; the models
they compile are in ``given/models.py``, the machinery they check with (the reference, the inputs, the
compile-and-read-the-code helper) in ``given/checks.py``.

CPU tests run the kernel in Triton's interpreter and the lowering in CPU Inductor. Tests marked
``gpu`` need CUDA and are graded as pending without it.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch._inductor import config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files
from torch._inductor.pattern_matcher import fwd_only
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from lab03_triton_lowering.given.checks import (
    ATTENTION_SHAPES,
    DEFAULT_EPS,
    FP8_TOLERANCE,
    HALF_TOLERANCE,
    TOLERANCE,
    AttentionShape,
    CompiledRun,
    RecordingPass,
    SentinelPass,
    affine_name,
    assert_attention_matches,
    assert_fp8_matches,
    assert_matches_reference,
    assert_passes_opcheck,
    assert_raises_as_promised,
    assert_rounds_once,
    attention_inputs,
    compile_with_lowering,
    fp8_inputs,
    fp8_reference,
    layer_norm_affine_forms,
    make_inputs,
    reference,
    run_python,
    run_simulated_gpu_check,
    the_custom_operator,
    with_outliers,
)
from lab03_triton_lowering.given.interface import (
    AFFINE_FORMS,
    ATTENTION_DTYPES,
    FP8_DTYPES,
    FP8_OUT_DTYPES,
    MAX_HEAD_DIM,
)
from lab03_triton_lowering.given.models import (
    CONTROL_SITE,
    FUSABLE_SITES,
    NON_FUSABLE_SITES,
    FusableSites,
    NonFusableSites,
)
from lab03_triton_lowering.given.round_trips import fwd_only_folding_round_trips
from labkit.numerics import output_error, outputs_close

# --------------------------------------------------------------------------------------------
# step 1: rows that fit one block, the launcher, check_arguments (the kernel interpreted on CPU)


#: Rows that fit one block (step 1).
EDGE_SHAPES = {
    "row_of_one": (4, 1),
    "odd_row_7": (3, 7),
    "row_1000_not_power_of_two": (5, 1000),
    "row_1024_power_of_two": (2, 1024),
    # a power-of-two row, so only the row mask guards the end: rows that do not fill a program's last block
    "five_rows_of_64": (5, 64),
    "zero_rows": (0, 64),
    "zero_columns": (3, 0),
    "no_rows_and_no_columns": (0, 2, 0),
    "three_dims": (2, 3, 33),
    "four_dims": (2, 2, 3, 17),
}


@pytest.mark.points(1)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape", list(EDGE_SHAPES.values()), ids=list(EDGE_SHAPES))
def test_kernel_matches_pytorch_on_edge_shapes(lab, shape, approximate):
    assert_matches_reference(lab, *make_inputs(shape), approximate=approximate)


@pytest.mark.points(1)
@pytest.mark.parametrize("eps", [1e-5, 1e-6, 0.1, 1])  # 1: an int is a number too (F.layer_norm takes it)
@pytest.mark.parametrize("affine", AFFINE_FORMS)
def test_kernel_handles_affine_forms_and_eps(lab, affine, eps):
    # Small spread (std 0.01) so eps is not negligible next to the variance.
    x, weight, bias = make_inputs((6, 300), affine)
    assert_matches_reference(lab, x * 0.005, weight, bias, eps=eps)
    if eps == DEFAULT_EPS:  # and left out: the signature's default is the contract's, on data where it counts
        assert_matches_reference(lab, x * 0.005, weight, bias, eps=None)


NON_CONTIGUOUS = {
    # rows 64 apart but only 40 long: the kernel must use the row stride, not the row length
    "row_slice": lambda: make_inputs((6, 64))[0][:, :40],
    # last dimension not contiguous: rows must be copied (or gathered) first
    "strided_columns": lambda: make_inputs((5, 96))[0][:, ::2],
    # rows not evenly spaced in memory
    "transposed_leading_dims": lambda: make_inputs((3, 5, 48))[0].transpose(0, 1),
    # a broadcast batch dimension (stride 0)
    "expanded_batch": lambda: make_inputs((1, 3, 32))[0].expand(4, 3, 32),
}


@pytest.mark.points(1)
@pytest.mark.parametrize("layout", list(NON_CONTIGUOUS), ids=list(NON_CONTIGUOUS))
def test_kernel_handles_non_contiguous_input(lab, layout):
    x = NON_CONTIGUOUS[layout]()
    n = x.shape[-1]
    weight, bias = torch.linspace(0.5, 1.5, n), torch.linspace(-0.5, 0.5, n)
    assert_matches_reference(lab, x, weight, bias, approximate="tanh")


@pytest.mark.points(1)
@pytest.mark.parametrize("strided", ["weight", "bias"])
def test_kernel_reads_strided_weight_and_bias(lab, strided):
    """``F.layer_norm`` takes a weight or bias that is a view with a stride (every other element of a
    bigger tensor): the kernel reads them at ``cols``, so the launcher must pass contiguous ones."""
    x, weight, bias = make_inputs((3, 40))
    affine = {"weight": weight, "bias": bias}
    every_other = torch.stack([affine[strided], torch.full_like(affine[strided], 7.0)], dim=1).flatten()[::2]
    assert torch.equal(every_other, affine[strided]) and every_other.stride() == (2,)
    affine[strided] = every_other
    assert_matches_reference(
        lab,
        x,
        affine["weight"],
        affine["bias"],
        data=f"a {strided} read with stride 2 ({strided}[::2] of a bigger tensor)",
    )


@pytest.mark.points(1)
def test_kernel_returns_a_new_contiguous_tensor_and_leaves_input_alone(lab):
    x, weight, bias = make_inputs((4, 3, 50))
    x_before = x.clone()
    out = lab.layernorm_gelu(x, weight, bias)
    assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device
    assert out.is_contiguous(), "the output is a new contiguous tensor"
    assert out.data_ptr() != x.data_ptr(), "the output must not overwrite the input"
    assert torch.equal(x, x_before), "the kernel modified its input"


@pytest.mark.points(2)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_kernel_half_precision_rounds_once(lab, dtype):
    assert_rounds_once(lab, (4, 700), dtype)


@pytest.mark.points(4)
@settings(max_examples=25, deadline=None, derandomize=True)
# eps = 0 is allowed (check_arguments refuses a negative eps only): rows that vary are normalized without it.
@example(leading=[3], n=40, eps=0.0, approximate="none", affine=AFFINE_FORMS[0], seed=0)
@given(
    leading=st.lists(st.integers(1, 4), min_size=0, max_size=3),
    n=st.one_of(st.integers(1, 64), st.integers(65, 3000)),
    eps=st.sampled_from([1e-5, 1e-6, 1e-3]),
    approximate=st.sampled_from(["none", "tanh"]),
    affine=st.sampled_from(AFFINE_FORMS),
    seed=st.integers(0, 2**16),
)
def test_kernel_matches_pytorch_on_generated_inputs(lab, leading, n, eps, approximate, affine, seed):
    x, weight, bias = make_inputs((*leading, n), affine, seed=seed)
    assert_matches_reference(lab, x, weight, bias, eps=eps, approximate=approximate)


#: Every error ``check_arguments``' docstring promises: (arguments, error type, words its message must hold).
#: "Another device" is ``meta``: a device other than x's that every machine has.
BAD_INPUTS = {
    "unknown_gelu_form": (lambda x, w, b: dict(x=x, weight=w, bias=b, approximate="fast"), ValueError, ["approximate"]),
    # x is [2, 3, 16]: the length expected is its last dimension's, 16 (not 3, its second or second-to-last).
    "weight_wrong_length": (lambda x, w, b: dict(x=x, weight=w[:-1], bias=b), ValueError, ["weight", "16"]),
    # 16 values, but not of shape (16,): F.layer_norm refuses it ("same shape as normalized_shape")
    "weight_not_one_dimensional": (lambda x, w, b: dict(x=x, weight=w.reshape(4, 4), bias=b), ValueError, ["weight"]),
    # The bias is checked whether or not a weight comes with it (LayerNorm(elementwise_affine) has both or none,
    # a caller may pass either): these two cases leave the weight out.
    "bias_wrong_length": (lambda x, w, b: dict(x=x, weight=None, bias=torch.cat([b, b])), ValueError, ["bias", "16"]),
    "float64_input": (lambda x, w, b: dict(x=x.double(), weight=w, bias=b), TypeError, ["float64"]),
    "integer_input": (lambda x, w, b: dict(x=x.long(), weight=w, bias=b), TypeError, ["int64"]),
    "float64_weight": (lambda x, w, b: dict(x=x, weight=w.double(), bias=b), TypeError, ["weight", "float64"]),
    "negative_eps": (lambda x, w, b: dict(x=x, weight=w, bias=b, eps=-1e-5), ValueError, ["eps"]),
    "eps_not_a_number": (lambda x, w, b: dict(x=x, weight=w, bias=b, eps="1e-5"), TypeError, ["eps"]),
    "zero_dim_input": (lambda x, w, b: dict(x=x[0, 0, 0], weight=None, bias=None), ValueError, ["x"]),
    "input_on_another_device": (
        lambda x, w, b: dict(x=x.to("meta"), weight=None, bias=None),
        ValueError,
        ["x", "meta"],
    ),
    "weight_on_another_device": (lambda x, w, b: dict(x=x, weight=w.to("meta"), bias=b), ValueError, ["weight"]),
    "bias_on_another_device": (lambda x, w, b: dict(x=x, weight=None, bias=b.to("meta")), ValueError, ["bias"]),
}


@pytest.mark.points(1)
@pytest.mark.parametrize("case", list(BAD_INPUTS), ids=list(BAD_INPUTS))
def test_bad_input_gets_a_clear_error(lab, case):
    arguments, error, words = BAD_INPUTS[case]
    x, weight, bias = make_inputs((2, 3, 16))
    assert_raises_as_promised(
        lambda: lab.layernorm_gelu(**arguments(x, weight, bias)), case, error, words, "check_arguments"
    )


# --------------------------------------------------------------------------------------------
# step 2: long rows, the loop over blocks


#: Rows longer than the largest block the kernel holds (step 2: the loop over blocks).
LONG_ROWS = {
    "long_row_12288": (2, 12288),
    "row_65537_longer_than_any_block": (2, 65537),
}


@pytest.mark.points(1)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape", list(LONG_ROWS.values()), ids=list(LONG_ROWS))
def test_kernel_matches_pytorch_on_rows_longer_than_a_block(lab, shape, approximate):
    assert_matches_reference(lab, *make_inputs(shape), approximate=approximate)


#: Block widths a kernel may choose (powers of two): rows one short of, exactly at and one past each one
#: cover one block, two blocks exactly, and a partial last block, whichever width the kernel uses.
BLOCK_BOUNDARIES = (2048, 4096, 8192, 16384)


@pytest.mark.points(1)
@pytest.mark.parametrize("boundary", BLOCK_BOUNDARIES, ids=[f"around_{b}" for b in BLOCK_BOUNDARIES])
def test_kernel_matches_pytorch_on_lengths_around_every_block_boundary(lab, boundary):
    """Every tile count from one to five at the reference's 4096-wide blocks (4097 and 8192 are exactly two),
    with a non-default eps: a loop that starts at the second block, stops one early, or a single-block path
    taken for a row that needs two fails here and nowhere else."""
    for length in (boundary - 1, boundary, boundary + 1):
        x, weight, bias = make_inputs((2, length), seed=length)
        for approximate in ("none", "tanh"):
            assert_matches_reference(lab, x, weight, bias, eps=1e-3, approximate=approximate)


#: Data that finds what well-behaved ``randn`` rows hide, each in a row that fits one block and in one
#: that needs the loop (step 2), both GELU forms: rows of one value (variance 0: only eps keeps
#: 1/sqrt(var + eps) finite), outliers (a normalised value of 17 to 110: a tanh written with exp(+2z)
#: overflows to NaN), and a variance far below a non-default eps. ``(make x, eps)``.
HARD_DATA = {
    "constant_rows": (lambda shape: torch.full(shape, 3.25), 0.1),
    "outliers": (with_outliers, 1e-5),
    "variance_below_eps": (lambda shape: make_inputs(shape)[0] * 1e-3, 1e-2),
}


@pytest.mark.points(1)
@pytest.mark.parametrize("data", sorted(HARD_DATA))
def test_kernel_matches_pytorch_on_data_that_finds_bugs(lab, data):
    make, eps = HARD_DATA[data]
    for length in (300, 12288):
        x, (_, weight, bias) = make((2, length)), make_inputs((2, length))
        for approximate in ("none", "tanh"):
            assert_matches_reference(
                lab, x, weight, bias, eps=eps, approximate=approximate, data=data.replace("_", " ")
            )


@pytest.mark.points(1)
def test_kernel_is_numerically_stable_for_large_means(lab):
    # mean 1000, spread 1: E[x^2] - E[x]^2 in fp32 loses everything; a stable kernel does not.
    for n in (700, 12288):  # one block, and the loop over blocks
        x, weight, bias = make_inputs((3, n), offset=1000.0)
        x = (x - 1000.0) / 2 + 1000.0
        assert_matches_reference(lab, x, weight, bias)


@pytest.mark.points(1)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_kernel_half_precision_long_rows_accumulate_in_fp32(lab, dtype):
    # The loop over blocks sums thousands of values per lane: accumulators in the storage dtype
    # (half) lose the statistics entirely, while a row that fits one block would still pass.
    assert_rounds_once(lab, LONG_ROWS["long_row_12288"], dtype)


@pytest.mark.points(2)
def test_kernel_runs_on_cpu_tensors_in_a_process_that_has_a_gpu(lab):
    # A GPU machine runs the CPU tests too: CPU launches must take the interpreter even where CUDA
    # exists (launch through kernel_for, which chooses per launch by the tensors' device).
    result = run_simulated_gpu_check(lab, "cpu")
    assert result.returncode == 0, f"CPU launches beside a GPU failed:\n{result.stdout}\n{result.stderr[-3000:]}"


# --------------------------------------------------------------------------------------------
# step 3: the GPU compiler


@pytest.mark.points(4)
def test_kernel_compiles_for_a_real_gpu(lab):
    # The interpreter accepts kernels the GPU compiler rejects: compile every launch for sm_90 (no GPU needed).
    result = run_simulated_gpu_check(lab, "kernel")
    assert result.returncode == 0, f"compiling for sm_90 failed:\n{result.stdout}\n{result.stderr[-3000:]}"


# --------------------------------------------------------------------------------------------
# step 4: the operators: what the compiler needs from them (and the GPU kernel's tests)


@pytest.mark.points(2)
def test_operator_has_a_fake_implementation(lab):
    # Tracing runs the fake implementation: shapes and dtypes out, no kernel launched.
    with FakeTensorMode():
        x = torch.empty(4, 7, 33)
        out = lab.layernorm_gelu(x, torch.empty(33), None, eps=1e-3, approximate="tanh")
    assert isinstance(out, FakeTensor), "layernorm_gelu must dispatch to an operator with register_fake"
    assert out.shape == x.shape and out.dtype == x.dtype and out.is_contiguous()


@pytest.mark.points(3)
def test_layernorm_gelu_is_one_registered_operator_that_passes_opcheck(lab):
    x, weight, bias = make_inputs((3, 40))
    # Schema, fake/real agreement, autograd registration and AOT dispatch: PyTorch's own checklist.
    operator = the_custom_operator(lab, x, weight, bias)
    torch.library.opcheck(operator, (x, weight, bias, 1e-5, "none"))
    # The real operator returns a new contiguous tensor whatever x's strides: so must the fake, on every layout
    # the kernel takes (a transposed x, and each of NON_CONTIGUOUS).
    layouts = {"transposed": lambda: make_inputs((40, 3))[0].t(), **NON_CONTIGUOUS}
    for layout, make_x in layouts.items():
        strided = make_x()
        n = strided.shape[-1]
        weight, bias = torch.linspace(0.5, 1.5, n), torch.linspace(-0.5, 0.5, n)
        assert_passes_opcheck(
            operator,
            (strided, weight, bias, 1e-5, "none"),
            f"a non-contiguous x ({layout}: shape {list(strided.shape)}, strides {strided.stride()})",
            "op.py's register_fake must describe the real output, a new contiguous tensor of x's shape "
            "(torch.empty_like(x) keeps x's strides)",
        )


@pytest.mark.points(1)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_operator_passes_opcheck_in_half_precision(lab, dtype):
    # The fake implementation is what the compiler plans with: a fake that answers float32 for half
    # inputs makes every compiled half-precision model allocate the wrong buffers.
    x, weight, bias = make_inputs((2, 3, 24), dtype=dtype)
    operator = the_custom_operator(lab, x, weight, bias)
    assert_passes_opcheck(
        operator,
        (x, weight, bias, 1e-3, "tanh"),
        f"{dtype} inputs",
        "op.py's register_fake must return x's shape, dtype and device, as the real operator does",
    )


GPU_SHAPES = {"row_4096": (8, 4096), "row_1000": (6, 1000), "long_row_12288": (4, 12288), "zero_rows": (0, 128)}


@pytest.mark.gpu
@pytest.mark.points(1)
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["float32", "float16", "bfloat16"]
)
@pytest.mark.parametrize("shape", list(GPU_SHAPES.values()), ids=list(GPU_SHAPES))
def test_gpu_kernel_matches_pytorch(lab, shape, dtype):
    x, weight, bias = make_inputs(shape, dtype=dtype, device="cuda")
    for approximate in ("none", "tanh"):
        out = lab.layernorm_gelu(x, weight, bias, approximate=approximate)
        assert out.dtype == dtype and out.device == x.device
        expected = reference(x.float(), weight.float(), bias.float(), 1e-5, approximate)
        if dtype == torch.float32:
            error = output_error(out, expected)
            assert error.max_abs <= TOLERANCE, f"{approximate}: max |error| {error.max_abs:.3g}"
        else:
            expected = expected.to(dtype)
            assert outputs_close(out, expected, **HALF_TOLERANCE[dtype]), (
                f"{approximate}: {output_error(out, expected)}"
            )


@pytest.mark.gpu
@pytest.mark.points(10)
def test_gpu_fused_kernel_beats_sequential_ops_on_the_spec_shape(lab):
    from lab03_triton_lowering.given.benchmark import SPEC_SHAPE, median_ms, sequential

    x, weight, bias = make_inputs(SPEC_SHAPE, dtype=torch.float16, device="cuda")
    fused = lab.layernorm_gelu(x, weight, bias)
    assert outputs_close(fused, sequential(x, weight, bias), rtol=1e-3, atol=1e-3), "wrong before fast"
    del fused
    sequential_ms = median_ms(lambda: sequential(x, weight, bias))
    fused_ms = median_ms(lambda: lab.layernorm_gelu(x, weight, bias))
    speedup = sequential_ms / fused_ms
    assert speedup > 1.2, (
        f"fused {fused_ms:.3f} ms vs sequential {sequential_ms:.3f} ms: {speedup:.2f}x, the spec asks > 1.2x"
    )


# --------------------------------------------------------------------------------------------
# step 5: the lowering: torch.compile uses the kernel on its own


@pytest.fixture(scope="module")
def fusable_run(lab) -> CompiledRun:
    return compile_with_lowering(lab, FusableSites)


@pytest.fixture(scope="module")
def non_fusable_run(lab) -> CompiledRun:
    return compile_with_lowering(lab, NonFusableSites)


@pytest.mark.points(4)
def test_lowering_counts_every_site_it_replaces(fusable_run):
    assert fusable_run.replacements == len(FUSABLE_SITES), (
        f"handle.replacements={fusable_run.replacements}; the model has {len(FUSABLE_SITES)} LayerNorm->GELU sites"
    )


@pytest.mark.points(3)
@pytest.mark.parametrize("site", FUSABLE_SITES, ids=[s.name for s in FUSABLE_SITES])
def test_compiled_model_calls_the_kernel_at_each_site_and_matches_eager(fusable_run, site):
    calls = fusable_run.calls_with_eps(site.eps)
    assert calls, f"{site.name} ({site.why}): no fused call with eps={site.eps} in the generated code"
    assert [c.approximate for c in calls] == [site.approximate], (
        f"{site.name}: fused call(s) {calls}; expected one with approximate={site.approximate!r}"
    )
    error = output_error(fusable_run.compiled[site.name], fusable_run.eager[site.name])
    assert error.max_abs <= TOLERANCE, f"{site.name}: compiled output differs from eager by {error.max_abs:.3g}"


@pytest.mark.points(2)
def test_lowering_replaces_only_the_fusable_control_site(non_fusable_run):
    counted, calls = non_fusable_run.replacements, len(non_fusable_run.fused_calls)
    assert counted == 1, (
        f"handle.replacements={counted}, and the generated code calls the fused kernel {calls} time(s); only the "
        f"control site of NonFusableSites may be replaced{_count_hint(counted, calls)}"
    )


def _count_hint(counted: int, replaced: int) -> str:
    """What to say when the handle's count disagrees with the sites a graph shows replaced."""
    if counted == replaced:
        return ""
    return (
        f" (the pass replaced {replaced} site(s) but the handle counts {counted}: handle.replacements must add up "
        "what every graph replaced, += not =, read where the pass records it)"
    )


@pytest.mark.points(2)
@pytest.mark.parametrize("site", NON_FUSABLE_SITES, ids=[s.name for s in NON_FUSABLE_SITES])
def test_lowering_leaves_non_fusable_sites_alone(non_fusable_run, site):
    assert non_fusable_run.calls_with_eps(CONTROL_SITE.eps), (
        "the control site was not replaced: was the lowering active?"
    )
    stray = non_fusable_run.calls_with_eps(site.eps)
    assert not stray, f"{site.name} ({site.why}) must not be replaced, found {stray}"
    error = output_error(non_fusable_run.compiled[site.name], non_fusable_run.eager[site.name])
    assert error.max_abs <= TOLERANCE, f"{site.name}: compiled output differs from eager by {error.max_abs:.3g}"


LAYER_NORM_AFFINE = layer_norm_affine_forms()


#: LayerNorm -> GELU over several trailing dims of a (2, 3, 4, 8) input, each site with its own eps.
SEVERAL_DIMS_SITES = {(4, 8): 2e-5, (3, 4, 8): 3e-5}


#: The control: LayerNorm over the last dim (with weight and bias) -> GELU, in the same graph; it must be replaced.
LAST_DIM_CONTROL = ((8,), 1e-5)


@pytest.mark.points(1)
@pytest.mark.parametrize("affine", LAYER_NORM_AFFINE, ids=[affine_name(a) for a in LAYER_NORM_AFFINE])
def test_lowering_refuses_layernorm_over_several_trailing_dims(lab, affine):
    # The kernel normalizes x's last dim, with weight and bias of shape (n,): a LayerNorm whose normalized_shape
    # spans several dims (nn.LayerNorm((4, 8))) must stay with Inductor, with or without weight and bias.
    # The graph is the one the post-grad pass sees (Inductor's decompositions), as in the half-precision test.
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, 8, generator=generator) * 2 + 0.5
    sites = [(shape, eps, affine) for shape, eps in SEVERAL_DIMS_SITES.items()]
    sites.append((*LAST_DIM_CONTROL, ("weight", "bias")))
    params = [
        torch.rand(shape, generator=generator) + 0.5
        if name == "weight"
        else torch.rand(shape, generator=generator) - 0.5
        for shape, _, names in sites
        for name in names
    ]

    def fn(x, *params):
        outputs, flat = [], iter(params)
        for shape, eps, names in sites:
            tensors = {name: next(flat) for name in names}
            outputs.append(F.gelu(F.layer_norm(x, shape, eps=eps, **tensors)))
        return tuple(outputs)

    graph_module = make_fx(fwd_only(fn, [x, *params]), tracing_mode="fake")(x, *params)
    lab.install_lowering()
    try:
        inductor_config.post_grad_custom_post_pass(graph_module.graph)
    finally:
        lab.uninstall_lowering()
    fused_eps = [
        node.args[3] if len(node.args) > 3 else node.kwargs["eps"]
        for node in graph_module.graph.nodes
        if node.op == "call_function"
        and isinstance(node.target, torch._ops.OpOverload)
        and node.target.namespace not in ("aten", "prims")
    ]  # layernorm_gelu(x, weight, bias, eps, approximate)
    label = " and ".join(affine) if affine else "no weight, no bias"
    control_shape, control_eps = LAST_DIM_CONTROL
    assert any(math.isclose(eps, control_eps) for eps in fused_eps), (
        f"the control site (normalized_shape={control_shape}, weight and bias) was not replaced: "
        "was the lowering active?"
    )
    for shape, eps in SEVERAL_DIMS_SITES.items():
        assert not any(math.isclose(e, eps) for e in fused_eps), (
            f"LayerNorm over normalized_shape={shape} ({label}) -> GELU was replaced by the kernel, which normalizes "
            f"x's last dim only: the lowering must not fire where normalized_shape spans several dims"
        )
    graph_module.recompile()
    for (shape, _, _), got, want in zip(sites, graph_module(x, *params), fn(x, *params)):
        error = output_error(got, want)
        assert error.max_abs <= TOLERANCE, (
            f"normalized_shape={shape} ({label}): differs from eager by {error.max_abs:.3g}"
        )


@pytest.mark.points(3)
def test_install_is_idempotent_and_uninstall_restores_inductor_config(lab):
    sentinel = SentinelPass()
    with inductor_config.patch(post_grad_custom_post_pass=sentinel):
        first = lab.install_lowering()
        try:
            installed = inductor_config.post_grad_custom_post_pass
            assert installed is not sentinel, "install_lowering must set post_grad_custom_post_pass"
            assert isinstance(installed, CustomGraphPass) and installed.uuid() is not None, (
                "the pass must be a CustomGraphPass with a uuid() (Inductor's cache key)"
            )
            assert lab.install_lowering() is first, "installing twice must return the same handle"
            assert inductor_config.post_grad_custom_post_pass is installed, "installing twice must not stack passes"
            assert first.replacements == 0
        finally:
            lab.uninstall_lowering()
        assert inductor_config.post_grad_custom_post_pass is sentinel, (
            "uninstall_lowering must restore the previous pass"
        )
        lab.uninstall_lowering()  # a second uninstall is harmless
        assert inductor_config.post_grad_custom_post_pass is sentinel
        # Another library installs its own pass after ours: uninstalling ours must not remove theirs.
        lab.install_lowering()
        later = SentinelPass()
        inductor_config.post_grad_custom_post_pass = later
        lab.uninstall_lowering()
        assert inductor_config.post_grad_custom_post_pass is later, (
            "lowering.py: uninstall_lowering() replaced a pass another library installed after install_lowering(); "
            "restore the previous pass only while post_grad_custom_post_pass is still yours"
        )
        inductor_config.post_grad_custom_post_pass = sentinel
        # Replaced behind its back (another library, a config.patch that ended): no longer installed, so a call
        # installs it again rather than hand back a handle whose pass Inductor no longer runs.
        lab.install_lowering()
        try:
            inductor_config.post_grad_custom_post_pass = None
            lab.install_lowering()
            assert isinstance(inductor_config.post_grad_custom_post_pass, CustomGraphPass), (
                "lowering.py: post_grad_custom_post_pass was reset after install_lowering(); the pass is no longer "
                "installed, so install_lowering() must install it again (idempotent only while installed)"
            )
        finally:
            lab.uninstall_lowering()


@pytest.mark.points(1)
def test_reinstalling_starts_a_new_count(lab, fusable_run):
    assert fusable_run.replacements > 0
    handle = lab.install_lowering()
    try:
        assert handle is not fusable_run.handle and handle.replacements == 0
    finally:
        lab.uninstall_lowering()


@pytest.mark.points(1)
@pytest.mark.parametrize("form", ["round_trip", "folded"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_lowering_fires_in_half_precision_with_or_without_the_round_trip(lab, dtype, form):
    # The graph a post-grad pass sees in half precision, as PyTorch 2.14 leaves it (LayerNorm's
    # output rounded to half before GELU) and as 2.11 leaves it (the round trip folded away).
    trace = fwd_only if form == "round_trip" else fwd_only_folding_round_trips
    x, weight, bias = make_inputs((4, 32), dtype=dtype)
    traced = trace(lambda x, w, b: reference(x, w, b, 1e-5, "none"), [x, weight, bias])
    graph_module = make_fx(traced, tracing_mode="fake")(x, weight, bias)  # one fake mode, as in Inductor's graphs
    handle = lab.install_lowering()
    try:
        before = handle.replacements
        inductor_config.post_grad_custom_post_pass(graph_module.graph)
        replaced = handle.replacements - before
    finally:
        lab.uninstall_lowering()
    calls = sum(1 for node in graph_module.graph.nodes if "layernorm_gelu" in str(node.target))
    assert replaced == 1, (
        f"{dtype}, {form}: {replaced} replacements counted in a graph with one LayerNorm -> GELU"
        f"{_count_hint(replaced, calls)}"
    )
    graph_module.recompile()
    expected = reference(x.float(), weight.float(), bias.float(), 1e-5, "none").to(dtype)
    out = graph_module(x, weight, bias)
    out = out[0] if isinstance(out, (tuple, list)) else out
    assert outputs_close(out, expected, **HALF_TOLERANCE[dtype]), f"{dtype}, {form}: {output_error(out, expected)}"


#: Compiles a small model after install_lowering() with Inductor's default caches and prints what happened.
CACHED_COMPILE = """
import json, torch
from torch import nn
from torch._dynamo.utils import counters
from torch._inductor.utils import run_and_get_code
from labkit.impl import load_lab
lab = load_lab("lab03_triton_lowering")
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16, eps=1e-6), nn.GELU()).eval()
handle = lab.install_lowering()
with torch.no_grad():
    out, code = run_and_get_code(torch.compile(model), torch.randn(3, 16))
print(json.dumps({"replacements": handle.replacements, "cache_hits": counters["inductor"]["fxgraph_cache_hit"],
                  "kernel_calls": "\\n".join(code).count("layernorm_gelu")}))
"""


#: The variables that turn every compiler cache off (``torch.compiler.config.force_disable_caches``).
CACHE_SWITCHES_OFF = ("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "TORCH_COMPILE_FORCE_DISABLE_CACHES")


@pytest.mark.points(3)
def test_count_holds_when_the_compile_is_served_from_inductors_cache(lab, tmp_path):
    # Two identical processes sharing one (fresh) cache directory, caches on as users have them (even where
    # this run has them off): the second is served from Inductor's FX graph cache, where no pass runs.
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache")}
    runs = []
    for attempt in ("first", "second"):
        result = run_python(lab, "-c", CACHED_COMPILE, env=env, unset=CACHE_SWITCHES_OFF)
        assert result.returncode == 0, f"{attempt} process failed:\n{result.stdout}\n{result.stderr[-3000:]}"
        runs.append(json.loads(result.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["kernel_calls"] > 0 and first["replacements"] == 1, f"first process (cold cache): {first}"
    assert second["cache_hits"] >= 1, (
        f"the second process was not served from the cache, so this proves nothing: {second}"
    )
    assert second["kernel_calls"] > 0, f"the cached code should still call the kernel: {second}"
    assert second["replacements"] == 1, (
        f"served from the cache, the handle counts {second['replacements']} replacements although the compiled "
        "code calls the kernel: count through Inductor's counters, which the cache replays"
    )


@pytest.mark.points(1)
def test_cache_key_changes_with_the_operator_namespace(lab, monkeypatch):
    # Inductor's cache serves compiled code whose key matches; that code calls the operator by its
    # qualified name (torch.ops.<namespace>.layernorm_gelu). The same files imported as another
    # package (a reference solution, then dropped over the starter to be graded) must not
    # be served each other's code.
    lowering = sys.modules[f"{lab.__name__}.lowering"]
    graph_pass = lab.install_lowering().graph_pass
    try:
        key = graph_pass.uuid()
        monkeypatch.setattr(lowering, "OP_NAMESPACE", f"another_{lowering.OP_NAMESPACE}")
        assert graph_pass.uuid() != key, "uuid() must change when OP_NAMESPACE does"
    finally:
        lab.uninstall_lowering()


@pytest.mark.points(1)
def test_the_pass_runs_the_previously_installed_pass(lab):
    # Keeping the previous pass (to restore it) is not enough: Inductor calls one post-grad custom
    # pass, so a pass that does not call the previous one switches someone else's pass off.
    previous = RecordingPass()
    with inductor_config.patch(post_grad_custom_post_pass=previous):
        lab.install_lowering()
        try:
            graph = torch.fx.symbolic_trace(lambda x: x.relu()).graph  # a graph with no LayerNorm+GELU site
            inductor_config.post_grad_custom_post_pass(graph)
            assert previous.graphs == [graph], (
                "lowering.py's LayerNormGeluPass must run the pass installed before it (self.previous) on each graph"
            )
        finally:
            lab.uninstall_lowering()


@pytest.mark.points(1)
def test_cache_key_changes_with_the_previous_pass(lab):
    """Our pass runs the previous one, so the code it leaves depends on that pass too: installed over two
    passes with different keys, it must have two keys, or Inductor serves a graph compiled under one pass
    after the other was installed (and the other never runs)."""

    class AnotherPass(SentinelPass):
        def uuid(self) -> str:
            return "another"

    keys = []
    for previous in (None, SentinelPass(), AnotherPass()):
        with inductor_config.patch(post_grad_custom_post_pass=previous):
            keys.append(lab.install_lowering().graph_pass.uuid())
            lab.uninstall_lowering()
    assert len(set(keys)) == 3, (
        f"lowering.py: uuid() is {keys[0]!r} over no pass, {keys[1]!r} over a pass keyed 'sentinel' and {keys[2]!r} "
        "over one keyed 'another': it must include the previous pass's uuid()"
    )


@pytest.mark.points(1)
def test_cache_key_changes_when_the_lowerings_files_change(lab, monkeypatch, tmp_path):
    # A cached graph holds code the pass generated; editing kernel.py, op.py or lowering.py must make
    # Inductor compile again, or the student runs yesterday's kernel.
    lowering = sys.modules[f"{lab.__name__}.lowering"]
    copies = []
    for source in lowering._SOURCE_FILES:
        copy = tmp_path / Path(source).name
        copy.write_bytes(Path(source).read_bytes())
        copies.append(str(copy))
    monkeypatch.setattr(lowering, "_SOURCE_FILES", tuple(copies))
    graph_pass = lab.install_lowering().graph_pass
    try:
        key = graph_pass.uuid()
        with open(copies[0], "a", encoding="utf-8") as kernel:
            kernel.write("\n# an edit\n")
        getattr(get_hash_for_files, "cache_clear", lambda: None)()  # torch memoizes file hashes per path
        assert graph_pass.uuid() != key, (
            "lowering.py's uuid() must change when a file in _SOURCE_FILES changes "
            "(get_hash_for_files(_SOURCE_FILES, ...))"
        )
    finally:
        lab.uninstall_lowering()


# --------------------------------------------------------------------------------------------
# step 6: the CUDA replacement: Inductor inlines your kernel


@pytest.mark.points(4)
def test_inductor_compiles_the_kernel_into_cuda_code_on_a_simulated_gpu(lab):
    # The CUDA replacement, checked without a GPU: Inductor must compile your kernel at every site.
    result = run_simulated_gpu_check(lab, "inductor")
    assert result.returncode == 0, f"simulated-GPU compile failed:\n{result.stdout}\n{result.stderr[-3000:]}"


@pytest.mark.gpu
@pytest.mark.points(5)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_gpu_lowering_compiles_the_kernel_into_inductor_code(lab, dtype):
    run = compile_with_lowering(lab, FusableSites, device="cuda", dtype=dtype)
    assert run.replacements == len(FUSABLE_SITES)
    assert "def layernorm_gelu_kernel(" in run.code, (
        "Inductor's generated code must contain the Triton kernel itself (trace it with wrap_triton, not an opaque op)"
    )
    # Eager rounds the LayerNorm output to half before GELU; the kernel does not: one half ulp apart.
    tolerance = dict(rtol=1e-3, atol=1e-3) if dtype == torch.float16 else dict(rtol=1.6e-2, atol=1e-2)
    for site in FUSABLE_SITES:
        compiled, eager = run.compiled[site.name], run.eager[site.name]
        assert outputs_close(compiled, eager, **tolerance), f"{site.name}: {output_error(compiled, eager)}"


# --------------------------------------------------------------------------------------------
# step 7 (extension): attention in one Triton kernel
# Optional: these tests carry the `extension` marker, and the grader shows their points apart from the
# lab's main score. On CPU the kernel runs in Triton's interpreter: the shapes stay small.


@pytest.mark.extension
@pytest.mark.points(1)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", list(ATTENTION_SHAPES), ids=list(ATTENTION_SHAPES))
def test_attention_matches_sdpa_around_block_boundaries(lab, shape, causal):
    for dtype in ATTENTION_DTYPES:
        q, k, v = attention_inputs(ATTENTION_SHAPES[shape], dtype)
        assert_attention_matches(lab, q, k, v, causal, data=shape.replace("_", " "))


@pytest.mark.extension
@pytest.mark.points(2)
@pytest.mark.parametrize("dtype", ATTENTION_DTYPES, ids=["float32", "float16"])
def test_causal_attention_keeps_the_diagonal(lab, dtype):
    # The trap of the causal mask: query i sees keys 0..i, its own key included. Keeping keys j < i only
    # (`<` for `<=`) leaves query 0 no key at all (0 / 0) and every other query without its own key.
    # Query blocks of every size a kernel picks straddle the diagonal here, and with k = q the own key
    # scores |q_i|^2 (about 16, four times the spread of the other scores), so a kernel that drops it is
    # far off on every row, not only the first.
    q, _, v = attention_inputs(AttentionShape(1, 2, 40, 40, 16), dtype)
    assert_attention_matches(lab, q, q.clone(), v, causal=True, data="k = q (each query's own key scores high)")


@pytest.mark.extension
@pytest.mark.points(1)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_is_stable_for_large_scores(lab, causal):
    # Scores of several hundred (exp overflows float32 past 88): the softmax must subtract the running
    # maximum, and rescale what it accumulated each time a later key block raises that maximum.
    q, k, v = attention_inputs(AttentionShape(1, 1, 24, 100, 32), spread=4.0)
    # float32 holds a score s to within |s| * eps, and exp turns that into a relative error of each probability
    # (in SDPA too): the bound grows with the largest score. A softmax that overflows is inf or NaN, one that
    # forgets to rescale is off by the values' own magnitude.
    largest_score = (q.double() @ k.double().transpose(-1, -2)).abs().max().item()
    allowed = 4 * torch.finfo(torch.float32).eps * largest_score * v.abs().max().item()
    assert_attention_matches(
        lab, q, k, v, causal, scale=1.0, data="scores of several hundred", tolerance=dict(rtol=0.0, atol=allowed)
    )


@pytest.mark.extension
@pytest.mark.points(1)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_is_stable_when_every_score_is_far_below_zero(lab, causal):
    """Every score about -144 (q near +3, k near -3): exp(score) underflows to 0 for all keys. Only a running
    maximum that starts at -inf (the first block's maximum becomes the reference) keeps the softmax finite;
    one that starts at 0 divides 0 by 0."""
    shape = AttentionShape(1, 1, 40, 40, 16)
    q, k, v = attention_inputs(shape, spread=0.01)
    q, k = q + 3.0, k - 3.0
    assert_attention_matches(
        lab, q, k, v, causal, scale=1.0, data="every score near -144 (start the running maximum at -inf, not 0)"
    )


@pytest.mark.extension
@pytest.mark.points(3)
@settings(max_examples=10, deadline=None, derandomize=True)
@given(
    batch=st.integers(1, 2),
    heads=st.integers(1, 2),
    queries=st.integers(1, 80),
    keys=st.integers(1, 80),
    head_dim=st.integers(1, MAX_HEAD_DIM),
    causal=st.booleans(),
    dtype=st.sampled_from(ATTENTION_DTYPES),
    scale=st.one_of(st.none(), st.floats(0.05, 1.0)),
    seed=st.integers(0, 2**16),
)
def test_attention_matches_sdpa_on_generated_inputs(
    lab, batch, heads, queries, keys, head_dim, causal, dtype, scale, seed
):
    q, k, v = attention_inputs(AttentionShape(batch, heads, queries, keys, head_dim), dtype, seed=seed)
    assert_attention_matches(lab, q, k, v, causal, scale=scale)


@pytest.mark.extension
@pytest.mark.points(1)
def test_attention_takes_any_strides_and_returns_a_new_tensor(lab):
    # A projection's output, [batch, seq, heads, head_dim], viewed as [batch, heads, seq, head_dim]: no
    # dimension of q is contiguous in the kernel's order; k and v are slices of one packed tensor.
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(2, 37, 3, 24, generator=generator).transpose(1, 2)
    packed = torch.randn(2, 3, 45, 2 * 24, generator=generator)
    k, v = packed[..., :24], packed[..., 24:]
    before = [t.clone() for t in (q, k, v)]
    assert_attention_matches(lab, q, k, v, causal=True, data="transposed q, k and v sliced from one tensor")
    out = lab.fused_attention(q, k, v)
    assert out.is_contiguous(), "the output is a new contiguous tensor"
    assert all(out.data_ptr() != t.data_ptr() for t in (q, packed)), "the output must not overwrite an input"
    assert all(torch.equal(t, b) for t, b in zip((q, k, v), before)), "fused_attention modified an input"
    # Head dims that are not contiguous: each of q, k and v stored [batch, heads, head_dim, seq] and transposed,
    # so a step along the head dim is a step of seq elements (an offset written d // stride or d, not
    # d * stride, reads the wrong elements here and only here).
    q, k, v = (torch.randn(2, 3, 24, n, generator=generator).transpose(-1, -2) for n in (37, 45, 45))
    assert_attention_matches(lab, q, k, v, causal=False, data="q, k and v whose head dim has stride seq")

    # Each of q, k and v in a layout of its own, in three rounds: every stride of every pair differs in some
    # round, so a tensor read with another's strides (v loaded with k's: a copy-paste) reads the wrong elements.
    def contiguous(n):
        return torch.randn(2, 3, n, 24, generator=generator)

    def seq_major(n):
        return torch.randn(2, n, 3, 48, generator=generator)[..., :24].transpose(1, 2)

    def head_dim_major(n):
        return torch.randn(2, 3, 24, n + 3, generator=generator)[..., :n].transpose(-1, -2)

    layouts = {
        "contiguous": contiguous,
        "sliced from [batch, seq, heads, 48], transposed": seq_major,
        "sliced from [batch, heads, 24, seq + 3], transposed": head_dim_major,
    }
    names = list(layouts)
    for shift in range(len(names)):
        chosen = names[shift:] + names[:shift]
        q, k, v = (layouts[name](n) for name, n in zip(chosen, (37, 45, 45)))
        where = f"q {chosen[0]}, k {chosen[1]}, v {chosen[2]} (each tensor's own strides)"
        assert_attention_matches(lab, q, k, v, causal=shift == 1, data=where)


#: Every error ``fused_attention``'s docstring promises: (arguments, error type, words its message must hold).
ATTENTION_BAD_INPUTS = {
    "bfloat16": (lambda q, k, v: dict(q=q.bfloat16(), k=k.bfloat16(), v=v.bfloat16()), TypeError, ["bfloat16"]),
    "dtypes_differ": (lambda q, k, v: dict(q=q, k=k.half(), v=v), TypeError, ["k"]),
    "three_dims": (lambda q, k, v: dict(q=q[0], k=k[0], v=v[0]), ValueError, ["q"]),
    "v_of_another_length": (lambda q, k, v: dict(q=q, k=k, v=v[:, :, :-1]), ValueError, ["v"]),
    "head_dims_differ": (lambda q, k, v: dict(q=q[..., :8], k=k, v=v), ValueError, ["head_dim"]),
    # SDPA broadcasts these; the kernel indexes k and v by q's batch and head, so it must refuse them
    "batch_differs": (lambda q, k, v: dict(q=q, k=torch.cat([k, k]), v=torch.cat([v, v])), ValueError, ["batch"]),
    "heads_differ": (lambda q, k, v: dict(q=q, k=k[:, :1], v=v[:, :1]), ValueError, ["heads"]),
    "head_dim_too_large": (
        lambda q, k, v: dict(q=q.repeat(1, 1, 1, 9), k=k.repeat(1, 1, 1, 9), v=v.repeat(1, 1, 1, 9)),
        ValueError,
        ["head_dim"],
    ),
    "no_keys": (lambda q, k, v: dict(q=q, k=k[:, :, :0], v=v[:, :, :0]), ValueError, ["keys"]),
    "k_on_another_device": (lambda q, k, v: dict(q=q, k=k.to("meta"), v=v), ValueError, ["k", "meta"]),
    "negative_scale": (lambda q, k, v: dict(q=q, k=k, v=v, scale=-0.1), ValueError, ["scale"]),
}


@pytest.mark.extension
@pytest.mark.points(1)
@pytest.mark.parametrize("case", list(ATTENTION_BAD_INPUTS), ids=list(ATTENTION_BAD_INPUTS))
def test_attention_bad_input_gets_a_clear_error(lab, case):
    arguments, error, words = ATTENTION_BAD_INPUTS[case]
    q, k, v = attention_inputs(AttentionShape(1, 2, 5, 6, 16))
    assert_raises_as_promised(lambda: lab.fused_attention(**arguments(q, k, v)), case, error, words, "fused_attention")


@pytest.mark.extension
@pytest.mark.points(2)
def test_attention_compiles_for_a_real_gpu(lab):
    # The interpreter accepts kernels the GPU compiler rejects (a tl.dot block under 16, Python in the kernel):
    # compile every launch for sm_90 (no GPU needed).
    result = run_simulated_gpu_check(lab, "attention")
    assert result.returncode == 0, f"compiling for sm_90 failed:\n{result.stdout}\n{result.stderr[-3000:]}"


@pytest.mark.gpu
@pytest.mark.extension
@pytest.mark.points(2)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", ATTENTION_DTYPES, ids=["float32", "float16"])
def test_gpu_attention_matches_sdpa(lab, dtype, causal):
    for shape in (AttentionShape(2, 4, 1000, 1000, 64), AttentionShape(1, 2, 300, 777, 128)):
        q, k, v = attention_inputs(shape, dtype, device="cuda")
        assert_attention_matches(lab, q, k, v, causal)


# == 8. Extension: FP8 input =========================================================================
# Optional: these tests carry the `extension` marker, and the grader shows their points apart from the
# lab's main score. Triton's interpreter reads FP8 tensors on CPU, so every test runs without a GPU.
FP8_IDS = [str(d).removeprefix("torch.") for d in FP8_DTYPES]
OUT_IDS = [str(d).removeprefix("torch.") for d in FP8_OUT_DTYPES]


@pytest.mark.extension
@pytest.mark.points(1)
@pytest.mark.parametrize("out_dtype", FP8_OUT_DTYPES, ids=OUT_IDS)
@pytest.mark.parametrize("fp8", FP8_DTYPES, ids=FP8_IDS)
def test_fp8_kernel_matches_the_dequantized_reference(lab, fp8, out_dtype):
    """``gelu(layer_norm(q * scale))`` rounded once to ``out_dtype``, within one unit in its last place, for
    every affine form (weights of any float dtype), both GELU forms and leading shapes."""
    cases = [((3, 7), "weight_and_bias", torch.float32, "none"), ((2, 5, 64), "none", None, "tanh"),
             ((4, 300), "weight_only", torch.float16, "none")]  # fmt: skip
    for shape, affine, param_dtype, approximate in cases:
        q, scale = fp8_inputs(shape, fp8, scale=0.37)
        _, weight, bias = make_inputs(shape, affine, dtype=param_dtype or torch.float32)
        assert_fp8_matches(lab, q, scale, weight, bias, approximate=approximate, out_dtype=out_dtype)


@pytest.mark.extension
@pytest.mark.points(2)
@pytest.mark.parametrize("scale", [1e-3, -0.5], ids=["small", "negative"])
def test_fp8_scale_reaches_the_statistics_where_eps_matters(lab, scale):
    """LayerNorm of ``s * x`` is LayerNorm of ``x`` with ``eps / s**2``: a kernel that drops the scale is
    right whenever the variance dwarfs eps. Real values near 1e-3 (variance 1e-6 against eps 1e-5) and a
    negative scale (it flips the normalised row) tell."""
    q, scale_tensor = fp8_inputs((4, 96), torch.float8_e4m3fn, scale=scale, spread=1.0)
    why = (
        "the scale must multiply the values before the statistics: LayerNorm of s*x is LayerNorm of x with "
        f"eps/s**2 (s = {scale:g} here), so a kernel that ignores it is right only where the variance dwarfs eps"
    )
    assert_fp8_matches(lab, q, scale_tensor, out_dtype=torch.float16, why=why)


@pytest.mark.extension
@pytest.mark.points(1)
@pytest.mark.parametrize("shape", [(0, 8), (3, 0)], ids=["no_rows", "no_columns"])
def test_fp8_empty_input_keeps_the_output_dtype(lab, shape):
    """Nothing to launch, but the result is still a tensor of ``out_dtype`` shaped like the input (not x's
    FP8 dtype: ``torch.empty_like(x)`` returns that)."""
    q = torch.empty(shape, dtype=torch.float8_e4m3fn)
    out = lab.layernorm_gelu_fp8(q, torch.tensor([0.5]), out_dtype=torch.float16)
    assert out.dtype == torch.float16 and tuple(out.shape) == shape, (
        f"fp8.py: layernorm_gelu_fp8 on an empty {list(shape)} input returned {out.dtype} {list(out.shape)}; "
        f"expected torch.float16 {list(shape)} (out_dtype, even when there is nothing to compute)"
    )


@pytest.mark.extension
@pytest.mark.points(1)
@pytest.mark.parametrize("scale", [4.0, 1e-3], ids=["scale_4", "scale_1e-3"])
@pytest.mark.parametrize("fp8", FP8_DTYPES, ids=FP8_IDS)
def test_fp8_rows_longer_than_a_block(lab, fp8, scale):
    """Rows of 8195 (past any block of 8192): every pass of the loop reads FP8 and dequantizes, the shift of
    the shifted statistics included. (A scale of 4 on values of variance 9: eps is negligible. A scale of
    1e-3 makes the real variance about 1e-5, eps's size, so a value read without its scale anywhere shows.)"""
    q, scale_tensor = fp8_inputs((2, 8195), fp8, scale=scale)
    assert_fp8_matches(
        lab,
        q,
        scale_tensor,
        out_dtype=torch.float16,
        why="rows longer than a block: dequantize (multiply by the scale) every value the loop reads, in every "
        "pass, the shift of the statistics included",
    )


@pytest.mark.extension
@pytest.mark.points(1)
@pytest.mark.parametrize("fp8", FP8_DTYPES, ids=FP8_IDS)
def test_fp8_extremes_of_the_format(lab, fp8):
    """The format's largest and smallest values, a constant row and a large scale: every output finite."""
    info = torch.finfo(fp8)
    row = torch.tensor([info.max, -info.max, info.tiny, -info.tiny, info.smallest_normal, 0.0, 1.0, -1.0])
    q = torch.stack([row, torch.full_like(row, 3.0), row.flip(0)]).to(fp8)
    scale = torch.tensor([1e3])
    assert_fp8_matches(lab, q, scale, out_dtype=torch.bfloat16, why="extreme values: statistics in fp32")
    out = lab.layernorm_gelu_fp8(q, scale, out_dtype=torch.bfloat16)
    assert bool(torch.isfinite(out).all()), "a finite FP8 input gave a non-finite output"
    # bfloat16's range is float32's: outputs past float16's largest (65504) stay finite when rounded once.
    q, scale = fp8_inputs((3, 7), fp8, scale=0.37)
    why = "values past float16's range (65504): round once, to out_dtype, never through float16"
    assert_fp8_matches(lab, q, scale, torch.full((7,), 1e5), out_dtype=torch.bfloat16, why=why)


@pytest.mark.extension
@pytest.mark.points(1)
def test_fp8_reads_the_scale_in_the_kernel_whatever_its_shape(lab, monkeypatch):
    """A 0-d scale and a [1, 1] one are one-element fp32 tensors too; and the kernel reads the scale, never
    the host (``scale.item()``, ``float(scale)``: on a GPU the CPU would wait for it on every call)."""
    q, scale = fp8_inputs((3, 7), torch.float8_e4m3fn, scale=0.37)
    for shaped in (scale.reshape(()), scale.reshape(1, 1)):
        assert_fp8_matches(lab, q, shaped, out_dtype=torch.float16, why=f"a scale of shape {list(shaped.shape)}")
    host_reads = []

    def watched(name):
        original = getattr(torch.Tensor, name)

        def read(self, *args, **kwargs):
            if self.untyped_storage().data_ptr() == scale.untyped_storage().data_ptr():
                host_reads.append(name)
            return original(self, *args, **kwargs)

        return read

    for name in ("item", "tolist", "__float__", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, watched(name))
    out = lab.layernorm_gelu_fp8(q, scale, out_dtype=torch.float16)  # eps, weight, bias at their defaults
    monkeypatch.undo()
    expected = fp8_reference(q, scale, None, None, 1e-5, "none", torch.float16)
    assert bool(torch.isclose(out.double(), expected.double(), **FP8_TOLERANCE[torch.float16]).all()), (
        "layernorm_gelu_fp8(q, scale) with its defaults is not the formula with eps=1e-5 and no weight or bias"
    )
    assert not host_reads, (
        f"layernorm_gelu_fp8 read the scale on the host ({', '.join(sorted(set(host_reads)))}): pass the tensor "
        "to the kernel and load it there (tl.load(scale_ptr)), so the launch never waits for the device"
    )


FP8_BAD_INPUTS = {
    "x_not_fp8": (lambda q, s: dict(x=q.to(torch.float16), scale=s), TypeError, ["x"]),
    "scale_float64": (lambda q, s: dict(x=q, scale=s.double()), TypeError, ["scale", "float64"]),
    "scale_two_elements": (lambda q, s: dict(x=q, scale=torch.ones(2)), ValueError, ["scale"]),
    "scale_empty": (lambda q, s: dict(x=q, scale=torch.ones(0)), ValueError, ["scale"]),
    "scale_on_another_device": (lambda q, s: dict(x=q, scale=s.to("meta")), ValueError, ["scale"]),
    "out_float32": (lambda q, s: dict(x=q, scale=s, out_dtype=torch.float32), TypeError, ["out_dtype"]),
    "weight_wrong_shape": (lambda q, s: dict(x=q, scale=s, weight=torch.ones(3)), ValueError, ["weight"]),
}


@pytest.mark.extension
@pytest.mark.points(1)
def test_fp8_bad_input_gets_a_clear_error(lab):
    q, scale = fp8_inputs((2, 8), torch.float8_e4m3fn, scale=0.5)
    for case, (arguments, error, words) in FP8_BAD_INPUTS.items():
        call = lambda: lab.layernorm_gelu_fp8(**arguments(q, scale))  # noqa: E731
        assert_raises_as_promised(call, case, error, words, "layernorm_gelu_fp8")


@pytest.mark.extension
@pytest.mark.points(2)
def test_fp8_compiles_for_a_real_gpu(lab):
    # FP8 conversions need sm_89 or newer, and the interpreter accepts what the GPU compiler rejects: compile
    # every launch for sm_90 (no GPU needed; on a GPU machine the cases run there against the reference).
    result = run_simulated_gpu_check(lab, "fp8")
    assert result.returncode == 0, f"compiling for sm_90 failed:\n{result.stdout}\n{result.stderr[-3000:]}"
