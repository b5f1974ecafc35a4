"""Lab 3's tests catch the mistakes students make, and say what they are.

Each test plants one mistake in a copy of the reference solution, runs the graded tests meant to
catch it (Triton's interpreter on CPU, one process per mistake, ~10-20 s each), and checks that
exactly those tests fail, with a message that names the mistake.
"""

from __future__ import annotations

import re

from lab03_triton_lowering.test_lab import BAD_INPUTS
from solutions.planting import Mistake, planted_course, run_planted

PACKAGE = "lab03_triton_lowering"

#: The long-row loop accumulating in the storage dtype: every short row still passes.
HALF_ACCUMULATORS = (
    Mistake(
        "kernel.py",
        "acc = tl.zeros([ROWS_PER_PROGRAM, BLOCK_SIZE], dtype=tl.float32)",
        "acc = tl.zeros([ROWS_PER_PROGRAM, BLOCK_SIZE], dtype=x_ptr.dtype.element_ty)",
    ),
    Mistake(
        "kernel.py",
        "acc_sq = tl.zeros([ROWS_PER_PROGRAM, BLOCK_SIZE], dtype=tl.float32)",
        "acc_sq = tl.zeros([ROWS_PER_PROGRAM, BLOCK_SIZE], dtype=x_ptr.dtype.element_ty)",
    ),
    Mistake(
        "kernel.py", "            acc += d\n", "            d = d.to(x_ptr.dtype.element_ty)\n            acc += d\n"
    ),
)
#: A row that fits one block, its statistics computed in the storage dtype.
SINGLE_TILE_IN_STORAGE_DTYPE = (
    Mistake(
        "kernel.py",
        "        mean = tl.sum(x, axis=1) / n_cols  # of the shifted values\n",
        "        x = x.to(x_ptr.dtype.element_ty)\n        mean = tl.sum(x, axis=1) / n_cols\n",
    ),
)
#: check_arguments without the three checks its docstring promises and no test used to check.
UNCHECKED_ARGUMENTS = (
    Mistake("op.py",
            '    if x.dim() == 0:\n'
            '        raise ValueError("x is 0-d: it must have at least one dimension (the normalised one)")\n',
            ""),
    Mistake("op.py", '    if eps < 0:\n        raise ValueError(f"eps must be >= 0, got {eps}")\n', ""),
    Mistake("op.py",
            '        if param.device != x.device:\n'
            '            raise ValueError(f"{name} is on {param.device} but x is on {x.device}")\n',
            ""),
)  # fmt: skip


def run_with(tmp_path, mistakes, selection: str):
    return run_planted(planted_course(PACKAGE, tmp_path / "course", *mistakes), PACKAGE, "-k", selection)


def test_half_precision_accumulators_in_the_long_row_loop_fail_the_long_half_rows(tmp_path):
    run = run_with(tmp_path, HALF_ACCUMULATORS, "test_kernel_half_precision")
    assert sorted(run.failed) == [
        "test_kernel_half_precision_long_rows_accumulate_in_fp32[bfloat16]",
        "test_kernel_half_precision_long_rows_accumulate_in_fp32[float16]",
    ], run.output[-3000:]
    assert len(run.passed) == 2, "the rows that fit one block still pass: only the long rows go through the loop"
    for message in run.failed.values():
        assert "rows of 12288" in message and "accumulate in fp32" in message, message


def test_statistics_in_the_storage_dtype_fail_with_accumulate_in_fp32(tmp_path):
    run = run_with(tmp_path, SINGLE_TILE_IN_STORAGE_DTYPE, "test_kernel_half_precision_rounds_once")
    assert sorted(run.failed) == [
        "test_kernel_half_precision_rounds_once[bfloat16]",
        "test_kernel_half_precision_rounds_once[float16]",
    ], run.output[-3000:]
    for message in run.failed.values():
        assert "accumulate in fp32" in message and "round to the output dtype once" in message, message


def test_check_arguments_without_the_checks_its_docstring_promises_fails(tmp_path):
    run = run_with(tmp_path, UNCHECKED_ARGUMENTS, "test_bad_input_gets_a_clear_error")
    cases = sorted(re.search(r"\[(.*)\]", test)[1] for test in run.failed)
    assert cases == ["bias_on_another_device", "negative_eps", "weight_on_another_device", "zero_dim_input"], (
        run.output[-3000:]
    )
    assert len(run.passed) == len(BAD_INPUTS) - len(cases), "the other bad inputs still get their errors"


#: Lab 3's interfaces wrong where the earlier tests did not stand: a fake answering float32 for half
#: inputs, a previous post-grad pass kept (and restored) but never run, a cache key blind to the files.
FAKE_IN_FLOAT32 = (
    Mistake(
        "op.py",
        "return torch.empty(x.shape, dtype=x.dtype, device=x.device)",
        "return torch.empty(x.shape, dtype=torch.float32, device=x.device)",
    ),
)
PREVIOUS_PASS_NOT_RUN = (Mistake("lowering.py", "            self.previous(graph)\n", "            pass\n"),)
KEY_BLIND_TO_FILES = (
    Mistake(
        "lowering.py",
        "return get_hash_for_files(_SOURCE_FILES, extra=extra)",
        "return get_hash_for_files((), extra=extra)",
    ),
)


def test_a_fake_in_float32_fails_opcheck_on_half_inputs_only(tmp_path):
    run = run_with(tmp_path, FAKE_IN_FLOAT32, "opcheck or fake_implementation")
    assert sorted(run.failed) == [
        "test_operator_passes_opcheck_in_half_precision[bfloat16]",
        "test_operator_passes_opcheck_in_half_precision[float16]",
    ], run.output[-3000:]
    for message in run.failed.values():
        assert "register_fake must return x's shape, dtype and device" in message, message


def test_a_previous_pass_that_is_never_run_fails(tmp_path):
    run = run_with(tmp_path, PREVIOUS_PASS_NOT_RUN, "previously_installed or install_is_idempotent")
    assert sorted(run.failed) == ["test_the_pass_runs_the_previously_installed_pass"], run.output[-3000:]
    assert "must run the pass installed before it" in run.failed["test_the_pass_runs_the_previously_installed_pass"]


def test_a_cache_key_blind_to_the_files_fails(tmp_path):
    run = run_with(tmp_path, KEY_BLIND_TO_FILES, "cache_key")
    assert sorted(run.failed) == ["test_cache_key_changes_when_the_lowerings_files_change"], run.output[-3000:]
    assert (
        "must change when a file in _SOURCE_FILES changes"
        in run.failed["test_cache_key_changes_when_the_lowerings_files_change"]
    )


#: What only data beyond randn finds: the long-row loop without eps, and tanh written with exp(+2z).
LOOP_WITHOUT_EPS = (Mistake("kernel.py", "        rstd = tl.rsqrt(var + eps)", "        rstd = tl.rsqrt(var)"),)
TANH_THROUGH_EXP_2Z = (
    Mistake(
        "kernel.py",
        """    e = tl.exp(-2.0 * tl.abs(z))
    magnitude = (1.0 - e) / (1.0 + e)
    return tl.where(z >= 0, magnitude, -magnitude)""",
        """    e = tl.exp(2.0 * z)
    return (e - 1.0) / (e + 1.0)""",
    ),
)


def test_a_long_row_loop_without_eps_fails_on_constant_rows_and_small_variances(tmp_path):
    run = run_with(tmp_path, LOOP_WITHOUT_EPS, "test_kernel_matches_pytorch and (finds_bugs or longer_than_a_block)")
    assert sorted(run.failed) == [
        "test_kernel_matches_pytorch_on_data_that_finds_bugs[constant_rows]",
        "test_kernel_matches_pytorch_on_data_that_finds_bugs[variance_below_eps]",
    ], run.output[-3000:]
    assert all("shape [2, 12288]" in message for message in run.failed.values()), "the long rows, the loop's"
    assert len(run.passed) == 5, "randn rows longer than a block still pass: eps is negligible next to their variance"


def test_a_tanh_through_exp_2z_fails_on_outliers(tmp_path):
    run = run_with(tmp_path, TANH_THROUGH_EXP_2Z, "finds_bugs or edge_shapes")
    assert sorted(run.failed) == ["test_kernel_matches_pytorch_on_data_that_finds_bugs[outliers]"], run.output[-3000:]
    assert "outliers" in run.failed["test_kernel_matches_pytorch_on_data_that_finds_bugs[outliers]"]
    assert "approximate='tanh'" in run.failed["test_kernel_matches_pytorch_on_data_that_finds_bugs[outliers]"]


#: The search function normalizing over ``weight.shape`` (nn.LayerNorm's normalized_shape is its weight's shape):
#: right for every LayerNorm over the last dim, but the re-check with real shapes then accepts a LayerNorm over
#: several dims with a weight of that shape, and the kernel normalizes the last dim only.
SEARCH_OVER_WEIGHT_SHAPE = (
    Mistake("lowering.py", "F.layer_norm(x, (x.shape[-1],), weight, bias, eps)",
            "F.layer_norm(x, weight.shape, weight, bias, eps)"),
    Mistake("lowering.py", "F.layer_norm(x, (x.shape[-1],), weight, None, eps)",
            "F.layer_norm(x, weight.shape, weight, None, eps)"),
)  # fmt: skip


def test_a_pattern_over_the_weights_shape_fails_on_layernorms_over_several_dims(tmp_path):
    run = run_with(tmp_path, SEARCH_OVER_WEIGHT_SHAPE, "several_trailing_dims or leaves_non_fusable_sites_alone")
    assert sorted(run.failed) == [
        "test_lowering_refuses_layernorm_over_several_trailing_dims[weight_and_bias]",
        "test_lowering_refuses_layernorm_over_several_trailing_dims[weight_only]",
    ], run.output[-3000:]
    # The non-fusable site over two dims has no weight: it passes (the mistake earned full marks there).
    assert len(run.passed) == 2 + 5, "without a weight the search still normalizes the last dim: nothing else fires"
    for message in run.failed.values():
        assert (
            "normalized_shape=(4, 8)" in message
            and "must not fire where normalized_shape spans several dims" in message
        ), message


#: The extension's trap, the causal mask's diagonal: keys < query masked in, where is_causal keeps keys <= query.
DIAGONAL_MASKED_OUT = (Mistake("attention.py", "(keys[None, :] <= rows[:, None])", "(keys[None, :] < rows[:, None])"),)


def test_a_causal_mask_without_the_diagonal_fails_naming_the_diagonal(tmp_path):
    from lab03_triton_lowering.given.checks import ATTENTION_SHAPES

    run = run_with(tmp_path, DIAGONAL_MASKED_OUT, "keeps_the_diagonal or around_block_boundaries")
    assert sorted(run.failed) == sorted(
        [f"test_attention_matches_sdpa_around_block_boundaries[{shape}-causal]" for shape in ATTENTION_SHAPES]
        + [f"test_causal_attention_keeps_the_diagonal[{dtype}]" for dtype in ("float16", "float32")]
    ), run.output[-3000:]
    assert len(run.passed) == len(ATTENTION_SHAPES), "attention without a mask is untouched by the mistake"
    for test, message in run.failed.items():
        # One query and one key: only the NaN it leaves can tell; every longer sequence is named as the mistake.
        named = "causal attention keeps the diagonal" if "one_token" in test else "the diagonal is masked out"
        assert named in message, message


# -- step 8 (optional): FP8 input ------------------------------------------------------------------
#: The scale dropped: LayerNorm is blind to it wherever the variance dwarfs eps, as in most data.
SCALE_IGNORED = (
    Mistake("fp8.py", "approximate, scale=scale, out_dtype=out_dtype)", "approximate, out_dtype=out_dtype)"),
)
#: The long-row loop's second pass reads the stored values without the scale.
SECOND_PASS_UNSCALED = (
    Mistake(
        "kernel.py",
        "            x = _load_fp32(x_rows + cols[None, :], mask, x_scale, HAS_SCALE, MASKED)",
        "            x = _load_fp32(x_rows + cols[None, :], mask, x_scale, False, MASKED)",
    ),
)


def test_an_fp8_kernel_that_ignores_the_scale_fails_only_where_eps_matters(tmp_path):
    run = run_with(tmp_path, SCALE_IGNORED, "test_fp8")
    assert sorted(run.failed) == [
        "test_fp8_rows_longer_than_a_block[float8_e4m3fn-scale_1e-3]",  # long rows where eps matters too
        "test_fp8_rows_longer_than_a_block[float8_e5m2-scale_1e-3]",
        "test_fp8_scale_reaches_the_statistics_where_eps_matters[negative]",
        "test_fp8_scale_reaches_the_statistics_where_eps_matters[small]",
    ], run.output[-3000:]
    for test, message in run.failed.items():
        why = "LayerNorm of s*x is LayerNorm of x with eps/s**2" if "eps_matters" in test else "multiply by the scale"
        assert why in message, message


def test_an_unscaled_second_pass_fails_the_long_rows(tmp_path):
    run = run_with(tmp_path, SECOND_PASS_UNSCALED, "test_fp8_rows_longer_than_a_block or test_kernel_matches")
    assert sorted(run.failed) == [
        "test_fp8_rows_longer_than_a_block[float8_e4m3fn-scale_1e-3]",
        "test_fp8_rows_longer_than_a_block[float8_e4m3fn-scale_4]",
        "test_fp8_rows_longer_than_a_block[float8_e5m2-scale_1e-3]",
        "test_fp8_rows_longer_than_a_block[float8_e5m2-scale_4]",
    ], run.output[-3000:]
    for message in run.failed.values():
        assert "dequantize (multiply by the scale) every value the loop reads, in every pass" in message, message


#: The scale read on the host and passed as a fresh tensor: right numbers, a device sync on every call.
SCALE_READ_ON_THE_HOST = (
    Mistake("fp8.py", "approximate, scale=scale, out_dtype=out_dtype)",
            "approximate, scale=torch.full((1,), scale.item()), out_dtype=out_dtype)"),
)  # fmt: skip
#: Written through float16 first: float16's range (65504) cuts bfloat16 outputs, and rounds twice.
THROUGH_FLOAT16 = (
    Mistake("fp8.py", "approximate, scale=scale, out_dtype=out_dtype)",
            "approximate, scale=scale, out_dtype=torch.float16).to(out_dtype)"),
)  # fmt: skip
#: The device check dropped: a scale on another device reaches the launch instead of a clear error.
NO_DEVICE_CHECK = (Mistake("fp8.py", "    if scale.device != x.device:", "    if False:"),)


def test_an_fp8_scale_read_on_the_host_is_named(tmp_path):
    run = run_with(tmp_path, SCALE_READ_ON_THE_HOST, "test_fp8")
    assert sorted(run.failed) == ["test_fp8_reads_the_scale_in_the_kernel_whatever_its_shape"], run.output[-3000:]
    assert "read the scale on the host (item)" in next(iter(run.failed.values()))


def test_an_fp8_output_written_through_float16_fails_past_its_range(tmp_path):
    run = run_with(tmp_path, THROUGH_FLOAT16, "test_fp8_extremes")
    assert sorted(run.failed) == [f"test_fp8_extremes_of_the_format[{d}]" for d in ("float8_e4m3fn", "float8_e5m2")], (
        run.output[-3000:]
    )
    for message in run.failed.values():
        assert "never through float16" in message or "non-finite" in message, message


def test_an_fp8_scale_on_another_device_without_a_check_is_named(tmp_path):
    run = run_with(tmp_path, NO_DEVICE_CHECK, "test_fp8_bad_input")
    assert sorted(run.failed) == ["test_fp8_bad_input_gets_a_clear_error"], run.output[-3000:]
    assert "scale_on_another_device" in next(iter(run.failed.values()))
