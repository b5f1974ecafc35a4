"""Lab 2's graded tests catch the mistakes students make: each mistake is planted in the reference
solution, and the graded test that must catch it fails, with a message that names it.

Each test first runs the graded test on the untouched reference (it passes), then plants the mistake.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import lab02_npu_backend.test_lab as graded
from lab02_npu_backend.given.graphs import node_arg
from lab02_npu_backend.given.ir import ProgramError
from labkit.impl import load_lab


@pytest.fixture
def reference(monkeypatch):
    monkeypatch.setenv("LABKIT_IMPL", "solution")  # backend="npu_simulator" dispatches through it
    return load_lab("lab02_npu_backend")


def _softmax_without_max_subtraction(ops, attrs):
    """exp(x) / sum(exp(x)): right on small scores, NaN once exp overflows (softmax([100, 0, -5]))."""
    x, dim = ops[0], attrs["dim"]
    if attrs["causal"]:
        x = x.masked_fill(torch.ones(x.shape[-2], x.shape[-1], dtype=torch.bool).triu(1), float("-inf"))
    exp = x.exp()
    return exp / exp.sum(dim, keepdim=True)


def test_a_softmax_without_max_subtraction_fails_the_isa_tests(reference, monkeypatch):
    graded.test_softmax_handles_large_scores_and_boolean_masks(reference)
    graded.test_simulator_runs_every_isa_op_like_pytorch(lab=reference)
    monkeypatch.setitem(reference.simulator.KERNELS, "softmax", _softmax_without_max_subtraction)
    with pytest.raises(AssertionError, match=r"softmax of \[\[100.0, 0.0, -5.0\].*nan.*subtracted"):
        graded.test_softmax_handles_large_scores_and_boolean_masks(reference)
    with pytest.raises(AssertionError, match="softmax"):
        graded.test_simulator_runs_every_isa_op_like_pytorch(lab=reference)


@pytest.mark.parametrize("case", sorted(graded.WRITE_CASES))
def test_a_partitioner_that_ignores_writes_in_place_fails(reference, monkeypatch, case):
    graded.test_partitions_keep_writes_in_place_in_order(reference, case)
    monkeypatch.setattr(reference.partition, "pin_cpu_writes", lambda writes, reasons, order: {})
    monkeypatch.setattr(reference.partition, "split_at_writes", lambda partitions, cpu_writes, order: list(partitions))
    with pytest.raises(AssertionError, match="moved a read of a tensor across a write in place"):
        graded.test_partitions_keep_writes_in_place_in_order(reference, case)


def test_a_backend_that_puts_nothing_on_the_npu_is_told_to_check_its_dialect(reference, monkeypatch):
    """The backend ran (coverage recorded) but its table matches nothing: not "did not reach your backend"."""
    graded.test_backend_is_registered_and_routes_to_your_backend(reference)
    monkeypatch.setattr(
        reference.backend,
        "support_for_dialect",
        lambda dialect, isa=None: reference.NpuOperatorSupport(reference.ATEN_SUPPORT, isa),
    )
    with pytest.warns(UserWarning), pytest.raises(AssertionError, match="check your table's dialect"):
        graded.test_backend_is_registered_and_routes_to_your_backend(reference)


def _gelu_as_relu(b, out, input, approximate="none"):
    return b.emit("activation", [input], function="relu")


@pytest.mark.parametrize("dialect", ["torch", "aten"])
def test_a_wrong_lowering_is_named_with_its_partition_and_node(reference, monkeypatch, dialect):
    from lab02_npu_backend.given.divergence import diagnose_model
    from lab02_npu_backend.given.models import build_model

    case = build_model("mlp")
    assert "no node" in diagnose_model(reference, case.model, case.example_inputs, dialect)
    for target in (torch.nn.functional.gelu, torch.ops.aten.gelu.default):
        monkeypatch.setitem(reference.lowering.LOWERINGS, target, _gelu_as_relu)
    message = diagnose_model(reference, case.model, case.example_inputs, dialect)
    assert (
        "NPU partition fused_" in message
        and "a lowering bug" in message
        and "gelu" in message.split("lowered value differs")[1]
    )


def test_an_ordering_bug_is_named_on_the_cpu_with_every_partition_right(reference, monkeypatch):
    from lab02_npu_backend.given.divergence import diagnose_model

    monkeypatch.setattr(reference.partition, "pin_cpu_writes", lambda writes, reasons, order: {})
    monkeypatch.setattr(reference.partition, "split_at_writes", lambda partitions, cpu_writes, order: list(partitions))
    make_fn, make_inputs = graded.WRITE_CASES["shift-right"]
    message = diagnose_model(reference, make_fn(), make_inputs(), "torch")
    assert "(CPU)" in message and "matches its own CPU subgraph" in message and "another order" in message


@pytest.mark.parametrize("dialect", ["torch"])
def test_a_reversed_subtraction_from_a_number_fails_the_arithmetic_test(reference, monkeypatch, dialect):
    """``c - y`` lowered as ``y - c``: right whenever the tensor comes first, off by 2c otherwise.

    Only Dynamo's graphs put the number first (``operator.sub(2.5, x)``); AOTAutograd's decompositions
    turn ``rsub`` into tensor-first aten ops, so the aten graphs never reach this branch."""
    graded.test_arithmetic_keeps_operand_order_alpha_and_type_promotion(reference, dialect)
    lowering = reference.lowering

    def reversed_sub(b, out, input, other, alpha=1):
        if not isinstance(input, lowering.Ref):  # a number first: the mistake
            return b.emit("add", [other, -alpha * input])
        return original(b, out, input, other, alpha)

    original = lowering.LOWERINGS[torch.sub]
    for target in [t for t, rule in lowering.LOWERINGS.items() if rule is original]:
        monkeypatch.setitem(lowering.LOWERINGS, target, reversed_sub)
    with pytest.raises(AssertionError, match=r"2\.5 - x .*operand order"):
        graded.test_arithmetic_keeps_operand_order_alpha_and_type_promotion(reference, dialect)


@pytest.mark.parametrize("dialect", graded.DIALECTS)
def test_a_dtype_check_of_the_result_alone_fails_the_arithmetic_test(reference, monkeypatch, dialect):
    """A support table that checks only the node's result dtype sends ``x * mask`` (float x bool) to the NPU."""
    graded.test_arithmetic_keeps_operand_order_alpha_and_type_promotion(reference, dialect)
    support = reference.support
    monkeypatch.setattr(
        support, "boolean_mask_inputs", lambda node: [arg for arg in node.all_input_nodes]
    )  # every input skipped: the result alone
    with pytest.raises(AssertionError, match="dtype bool.*support.py must check the dtype of every operand"):
        graded.test_arithmetic_keeps_operand_order_alpha_and_type_promotion(reference, dialect)


@pytest.mark.parametrize("dialect", graded.DIALECTS)
def test_an_attention_that_ignores_its_scale_fails_the_attention_test(reference, monkeypatch, dialect):
    """``scaled_dot_product_attention``'s ``scale`` dropped: right on every model that leaves it at None."""
    graded.test_attention_honours_scale_causality_and_masks(reference, dialect)
    lowering = reference.lowering
    attention = lowering.attention
    monkeypatch.setattr(
        lowering,
        "attention",
        lambda b, q, k, v, *, mask, causal, scale: attention(b, q, k, v, mask=mask, causal=causal, scale=None),
    )
    with pytest.raises(AssertionError, match=r"scale=0\.3 .*scale=2\.0 .*passes scale"):
        graded.test_attention_honours_scale_causality_and_masks(reference, dialect)


@pytest.mark.parametrize("dialect", graded.DIALECTS)
def test_a_gelu_lowered_without_its_approximate_argument_fails(reference, monkeypatch, dialect):
    """``gelu(x, approximate="tanh")`` lowered to the exact GELU: off by up to 4.7e-4, right on every model
    of the course (none asks for the tanh form through ``gelu``; GPT-2 writes it out with ``tanh``)."""
    graded.test_gelu_honours_its_approximate_argument(reference, dialect)

    def exact_gelu(b, out, input, approximate="none"):  # the mistake: approximate ignored
        return b.emit("activation", [input], function="gelu")

    for target in (torch.nn.functional.gelu, torch.ops.aten.gelu.default):
        monkeypatch.setitem(reference.lowering.LOWERINGS, target, exact_gelu)
    with pytest.raises(
        AssertionError,
        match=r"differ from eager: gelu\(x, approximate='tanh'\) \(off by 0\.00047\d*\)\. "
        r"lowering.py must honour gelu's approximate",
    ):
        graded.test_gelu_honours_its_approximate_argument(reference, dialect)


@pytest.mark.parametrize("dialect", graded.DIALECTS)
def test_a_layer_norm_over_the_last_dim_only_fails(reference, monkeypatch, dialect):
    """``normalized_shape`` read as "the last dim": right for every LayerNorm of the course's models
    (all over one dim); ``nn.LayerNorm((4, 8))`` without affine comes out wrong, with affine the
    (4, 8) weight does not fit the one-dim layernorm instruction."""
    graded.test_layer_norm_normalizes_over_every_dim_of_normalized_shape(reference, dialect)
    lowering = reference.lowering

    def last_dim_only(b, out, input, normalized_shape, weight=None, bias=None, eps=1e-5):
        return b.emit("layernorm", [input, weight, bias], normalized_ndim=1, eps=float(eps))  # the mistake

    monkeypatch.setitem(lowering.LOWERINGS, torch.nn.functional.layer_norm, last_dim_only)
    monkeypatch.setattr(lowering, "_layer_norm", last_dim_only)  # aten's native_layer_norm goes through it
    with pytest.raises(
        AssertionError,
        match=r"normalized_shape=\(4, 8\), no weight, no bias \(off by .*"
        r"normalize over every dim of normalized_shape",
    ) as raised:
        graded.test_layer_norm_normalizes_over_every_dim_of_normalized_shape(reference, dialect)
    assert "normalized_shape=(8,)" not in str(raised.value), "a LayerNorm over the last dim is still right"


# -- step 6 (optional): profiling mode -----------------------------------------------------------
def test_matmul_flops_without_the_factor_of_two_fail_the_cost_model_test(reference, monkeypatch):
    graded.test_traffic_and_flops_follow_the_cost_model(reference)
    real = reference.profiling.instruction_flops

    def one_per_multiply_add(op, operands, attrs, result):
        return result.numel() * operands[0].shape[-1] if op == "matmul" else real(op, operands, attrs, result)

    monkeypatch.setattr(reference, "instruction_flops", one_per_multiply_add)
    with pytest.raises(AssertionError, match=r"matmul: 120 FLOPs, expected 240"):
        graded.test_traffic_and_flops_follow_the_cost_model(reference)


def test_traffic_that_skips_a_list_operand_fails_the_cost_model_test(reference, monkeypatch):
    monkeypatch.setattr(
        reference,
        "instruction_traffic",
        lambda operands, result: (sum(o.nbytes for o in operands if isinstance(o, torch.Tensor)), result.nbytes),
    )
    with pytest.raises(AssertionError, match=r"concat: traffic \(0, 48\), expected \(48, 48\)"):
        graded.test_traffic_and_flops_follow_the_cost_model(reference)


def test_recording_without_a_profile_block_fails(reference, monkeypatch):
    """A profiled program that records into one global profile, whether or not a block is open."""
    from lab02_npu_backend.given.profiling_tools import NpuProfile

    always = NpuProfile()
    graded.test_profiling_records_every_instruction_and_keeps_the_answer(reference, "mlp")
    monkeypatch.setattr(reference.profiling, "active_profile", lambda: always)
    with pytest.raises(AssertionError, match="records for the"):
        graded.test_profiling_records_every_instruction_and_keeps_the_answer(reference, "mlp")


def test_profiled_outputs_that_alias_an_input_fail(reference, monkeypatch):
    graded.test_a_profiled_program_keeps_the_simulators_contract(reference, monkeypatch)

    class Aliasing(reference.ProfiledProgram):
        def __call__(self, *inputs):
            outputs = super().__call__(*inputs)
            return [inputs[0].reshape(out.shape) if out.numel() == inputs[0].numel() else out for out in outputs]

    monkeypatch.setattr(reference, "ProfiledProgram", Aliasing)
    with pytest.raises(AssertionError, match="shares memory with its input"):
        graded.test_a_profiled_program_keeps_the_simulators_contract(reference, monkeypatch)


def test_omitted_operands_not_filled_with_none_fail(reference, monkeypatch):
    monkeypatch.setattr(reference.profiling, "_read", lambda names, arity, values: [values[n] for n in names])
    with pytest.raises(ProgramError, match="conv2d"):
        graded.test_a_profiled_program_keeps_the_simulators_contract(reference, monkeypatch)


# -- step 7: folding at compile time ---------------------------------------------------------------------
def _fold_ignoring(reference, monkeypatch, *, writes: bool = False, impurity: bool = False, outputs: bool = False):
    """Plant a folder that forgets one rule of ``foldable_nodes`` (writes in place, randomness, or outputs)."""
    folding = reference.folding
    if writes:
        monkeypatch.setattr(folding, "find_tensor_writes", lambda gm: [])
    if impurity:  # neither the schema's tags nor the generator's state
        monkeypatch.setattr(folding, "is_pure", lambda node: not node.is_impure(impure_random=False))
        monkeypatch.setattr(folding, "drew_random_numbers", lambda state_before: False)
    if outputs:
        real = folding.foldable_nodes

        def with_outputs(gm):
            output = next(node for node in reversed(gm.graph.nodes) if node.op == "output")
            kept = set(real(gm))
            return [
                node
                for node in gm.graph.nodes
                if node in kept or (node in output.all_input_nodes and set(node.all_input_nodes) <= kept)
            ]

        monkeypatch.setattr(folding, "foldable_nodes", with_outputs)


@pytest.mark.parametrize(
    ("forgets", "dialects", "message"),
    [
        ("writes", ["torch"], r"torch graph's \w+ call differs.*written in place"),
        ("impurity", ["torch", "aten"], r"draw random numbers: never fold them"),
        ("outputs", ["torch", "aten"], r"graph's \w+ call differs.*returns may be written by its caller"),
    ],
)
def test_a_folder_that_forgets_a_rule_fails_with_it_named(reference, monkeypatch, forgets, dialects, message):
    for dialect in dialects:
        graded.test_folding_leaves_random_written_and_returned_values(reference, dialect)
    _fold_ignoring(reference, monkeypatch, **{forgets: True})
    for dialect in dialects:
        with pytest.raises(AssertionError, match=message):
            graded.test_folding_leaves_random_written_and_returned_values(reference, dialect)


def test_a_backend_that_never_folds_fails_the_coverage_test(reference, monkeypatch):
    graded.test_backend_lists_folded_nodes_outside_the_fraction(reference, "torch")
    monkeypatch.setattr(reference.backend, "fold_shape_constants", lambda gm: None)
    with pytest.raises(AssertionError, match=r"backend.py: compile_graph must fold before partitioning"):
        graded.test_backend_lists_folded_nodes_outside_the_fraction(reference, "torch")


def test_folding_under_the_compilers_fake_mode_fails_through_aot_autograd(reference, monkeypatch):
    """AOTAutograd calls the forward compiler inside its fake-tensor mode: without ``unset_fake_temporarily``
    the folded values are fakes with no data, and the compiled model fails on its first call."""
    graded.test_backend_lists_folded_nodes_outside_the_fraction(reference, "aten")
    monkeypatch.setattr(reference.folding, "unset_fake_temporarily", contextlib.nullcontext)
    with pytest.raises(Exception):  # noqa: B017, PT011 - whatever fails first, the run does not pass
        graded.test_backend_lists_folded_nodes_outside_the_fraction(reference, "aten")


# -- arguments other than the defaults (step 5's forms) ---------------------------------------------------
def _softmax_over_the_last_dim(b, out, input, dim, *_, **__):
    return b.emit("softmax", [input], dim=input.ndim - 1)


def _dropout_trained_only_when_asked(node):
    active = node_arg(node, 2, "training", False) and node_arg(node, 1, "p", 0.5) != 0  # the default is True
    return "active dropout needs a random number generator" if active else None


@pytest.mark.parametrize("dialect", ["torch", "aten"])
def test_a_softmax_over_the_last_dim_only_fails_the_arguments_test(reference, monkeypatch, dialect):
    graded.test_arguments_other_than_the_defaults_give_eagers_answer(reference, dialect)
    for target, rule in list(reference.lowering.LOWERINGS.items()):
        if rule is reference.lowering._softmax:
            monkeypatch.setitem(reference.lowering.LOWERINGS, target, _softmax_over_the_last_dim)
    with pytest.raises(
        AssertionError, match=r"torch.softmax\(x, dim=1\) \(off by .*lowering.py must pass each argument"
    ):
        graded.test_arguments_other_than_the_defaults_give_eagers_answer(reference, dialect)


def test_a_dropout_read_as_untrained_by_default_fails_the_dropout_test(reference, monkeypatch):
    graded.test_dropout_in_training_is_never_elided(reference, "torch")
    for target, check in list(reference.support.CONSTRAINTS.items()):
        if check is reference.support._dropout_check:
            monkeypatch.setitem(reference.support.CONSTRAINTS, target, _dropout_trained_only_when_asked)
    with pytest.raises(AssertionError, match=r"real default, True"):
        graded.test_dropout_in_training_is_never_elided(reference, "torch")


def test_a_program_cache_keyed_on_tensors_alone_fails_the_reuse_test(reference, monkeypatch):
    graded.test_a_program_is_never_reused_for_other_argument_values(reference)
    forward = reference.backend.NpuPartition.forward

    def keyed_on_tensors(self, *args):
        key = tuple((tuple(a.shape), a.dtype) for a in args if isinstance(a, torch.Tensor))
        if key in self.programs:  # the first program for these tensor shapes, whatever the other arguments
            loaded = self.programs[key]
            outputs = loaded(*(a for a in args if isinstance(a, torch.Tensor)))
            return tuple(outputs) if self._returns_tuple else outputs[0]
        result = forward(self, *args)
        self.programs[key] = next(reversed(self.programs.values()))
        return result

    monkeypatch.setattr(reference.backend.NpuPartition, "forward", keyed_on_tensors)
    with pytest.raises(AssertionError, match=r"n = 3: .*cache must key on every argument"):
        graded.test_a_program_is_never_reused_for_other_argument_values(reference)


def _square_whatever_the_exponent(b, out, input, exponent):
    return b.emit("mul", [input, input])


@pytest.mark.parametrize("dialect", ["torch", "aten"])
def test_a_power_lowered_as_a_square_fails_the_samples(reference, monkeypatch, dialect):
    """OpInfo's ``pow`` samples raise to 2 alone among the exponents the NPU lowers: a lowering that squares
    whatever the exponent passed them. WRITTEN_SAMPLES raise to 3 and -1 (the argument audit found the gap)."""
    from lab02_npu_backend.given.checks import TOLERANCE
    from lab02_npu_backend.given.op_samples import op_samples, samples_off_eager

    assert samples_off_eager(reference, dialect, op_samples(["pow"]), tolerance=TOLERANCE)[0] == []
    for target, rule in list(reference.lowering.LOWERINGS.items()):
        if rule is reference.lowering._pow:
            monkeypatch.setitem(reference.lowering.LOWERINGS, target, _square_whatever_the_exponent)
    wrong, _ = samples_off_eager(reference, dialect, op_samples(["pow"]), tolerance=TOLERANCE)
    assert any("x ** 3" in message for message in wrong), wrong


# ------------------------------------------------------------------ shortcuts that well-behaved data hides
def _plant_relu_as_a_product(reference, monkeypatch):
    """``x * (x > 0)``: relu on every finite number, nan at -inf (-inf * 0)."""
    monkeypatch.setitem(reference.simulator._ACTIVATIONS, "relu", lambda x: x * (x > 0))


def _plant_mean_as_sum_over_count(reference, monkeypatch):
    """``sum / n``: the mean, until the sum leaves the dtype's range (float16's ends at 65504)."""

    def mean(ops, attrs):
        count = 1
        for dim in attrs["dims"]:
            count *= ops[0].shape[dim]
        return torch.sum(ops[0], attrs["dims"], attrs["keepdim"]) / count

    monkeypatch.setitem(reference.simulator.KERNELS, "mean", mean)


def _plant_negation_by_a_float(reference, monkeypatch):
    """``x * -1.0``: ``-x`` on floats; on integers a float result."""
    for target, rule in list(reference.lowering.LOWERINGS.items()):
        if rule is reference.lowering._neg:
            monkeypatch.setitem(
                reference.lowering.LOWERINGS, target, lambda b, out, input: b.emit("mul", [input, -1.0])
            )


def _plant_mask_as_a_finite_fill(reference, monkeypatch):
    """A boolean mask as ``-1e4`` added to the scores (as some models write it): a masked key whose score is
    more than 1e4 above the others still wins."""
    softmax = reference.simulator.KERNELS["softmax"]

    def finite_fill(ops, attrs):
        if len(ops) < 2:
            return softmax(ops, attrs)
        x, mask = ops
        return softmax([x + torch.zeros_like(mask, dtype=x.dtype).masked_fill_(mask.logical_not(), -1e4)], attrs)

    monkeypatch.setitem(reference.simulator.KERNELS, "softmax", finite_fill)


def _plant_scale_or_default(reference, monkeypatch):
    """``scale or 1 / sqrt(E)``: the default scale for ``scale=0.0`` too (0.0 is falsy)."""
    attention = reference.lowering.attention

    def scale_or_default(b, q, k, v, *, mask, causal, scale):
        return attention(b, q, k, v, mask=mask, causal=causal, scale=scale or None)

    monkeypatch.setattr(reference.lowering, "attention", scale_or_default)


def _plant_eps_or_default(reference, monkeypatch):
    """``eps or 1e-5``: LayerNorm's default eps for ``eps=0.0`` too."""
    layernorm = reference.simulator.KERNELS["layernorm"]
    monkeypatch.setitem(
        reference.simulator.KERNELS,
        "layernorm",
        lambda ops, attrs: layernorm(ops, {**attrs, "eps": attrs["eps"] or 1e-5}),
    )


def _plant_zero_dim_tensors_as_numbers(reference, monkeypatch):
    """A support table that leaves 0-dim tensors out of its dtype check, as if they were numbers; but
    ``x * torch.tensor(2)`` makes the NPU multiply by an int64 tensor, and type promotion treats a 0-dim tensor
    as a tensor of its own category (``float16 + tensor(0.5)`` stays float16: the NPU never converts)."""
    tensors_in = reference.support.tensors_in
    monkeypatch.setattr(reference.support, "tensors_in", lambda value: [t for t in tensors_in(value) if t.ndim > 0])


def _plant_bounds_or_none(reference, monkeypatch):
    """``min or None``: a clamp to 0 (``x.clamp(min=0)``) read as no bound at all."""
    clamp = reference.lowering.clamp
    monkeypatch.setattr(reference.lowering, "clamp", lambda b, x, low, high: clamp(b, x, low or None, high or None))


def _plant_alpha_or_one(reference, monkeypatch):
    """``alpha or 1``: ``x.add(y, alpha=0)`` read as ``x + y``."""
    add = reference.lowering._add
    for target, rule in list(reference.lowering.LOWERINGS.items()):
        if rule is add:
            monkeypatch.setitem(
                reference.lowering.LOWERINGS,
                target,
                lambda b, out, input, other, alpha=1: add(b, out, input, other, alpha or 1),
            )


#: Mistakes each found by one written sample of ``given/op_samples.py`` and no other test: the OpInfo whose
#: samples run, how to plant the mistake, the sample that must catch it, and the dialects that reach it (an aten
#: graph gives scaled_dot_product_attention an additive float mask, never the softmax unit's boolean one).
SAMPLE_MISTAKES = {
    "relu as x * (x > 0)": ("nn.functional.relu", _plant_relu_as_a_product, "on -inf, inf and nan", ("torch", "aten")),
    "mean as sum / n": ("mean", _plant_mean_as_sum_over_count, "float16 over 1000 values", ("torch", "aten")),
    "neg as x * -1.0": ("neg", _plant_negation_by_a_float, "-x on int32", ("torch", "aten")),
    "a boolean mask filled with -1e4": (
        "nn.functional.scaled_dot_product_attention",
        _plant_mask_as_a_finite_fill,
        "a masked key scoring far above",
        ("torch",),
    ),
    "scale or its default": (
        "nn.functional.scaled_dot_product_attention",
        _plant_scale_or_default,
        "scale=0.0",
        ("torch", "aten"),
    ),
    "layer_norm's eps or its default": (
        "nn.functional.layer_norm",
        _plant_eps_or_default,
        "eps=0.0",
        ("torch", "aten"),
    ),
    "clamp's bounds or None": ("clamp", _plant_bounds_or_none, "x.clamp(min=0)", ("torch", "aten")),
    "add's alpha or 1": ("add", _plant_alpha_or_one, "alpha=0", ("torch", "aten")),
    "0-dim tensors left out of the dtype check": (
        "mul",
        _plant_zero_dim_tensors_as_numbers,
        "torch.tensor(2)",
        ("torch", "aten"),
    ),
}


@pytest.mark.parametrize("mistake", sorted(SAMPLE_MISTAKES))
def test_a_shortcut_that_well_behaved_data_hides_fails_the_samples(reference, monkeypatch, mistake):
    """Each shortcut gives eager's answer on ``randn`` data, so OpInfo's sample inputs pass it; the written
    samples give the data (infinities, float16 sums past its range, int32, a zero scale or eps, a masked key far
    ahead, 0-dim operands of another dtype) where it shows."""
    from lab02_npu_backend.given.checks import TOLERANCE
    from lab02_npu_backend.given.op_samples import op_samples, samples_off_eager

    op, plant, caught_by, dialects = SAMPLE_MISTAKES[mistake]
    samples = [sample for sample in op_samples([op]) if caught_by in sample.description]  # the graded test runs all
    assert samples, f"no sample of {op} is described with {caught_by!r}"
    assert samples_off_eager(reference, dialects[0], samples, tolerance=TOLERANCE)[0] == []
    plant(reference, monkeypatch)
    for dialect in dialects:
        wrong, _ = samples_off_eager(reference, dialect, samples, tolerance=TOLERANCE)
        assert any(caught_by in message for message in wrong), (dialect, wrong)
