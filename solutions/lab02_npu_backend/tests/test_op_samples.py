"""The OpInfo samples lab 2 grades with (``given/op_samples.py``) test what they claim to test.

- Every name in :data:`COURSE_OPS` is an OpInfo of the pinned PyTorch (an older one skips what it lacks).
- Every operator's samples reach the backend (a frame Dynamo runs eagerly would test nothing), and together
  they put every aten target of the reference's table on the NPU but those listed in :data:`NOT_REACHED`,
  each with the reason OpInfo never gives the form the reference lowers (the hand-written tests do).
- The reference gives eager's answer on the reference inputs too (infinities, NaN, scalars on both sides).
- Mistakes the reference once made are caught, with a message naming the call.
"""

from __future__ import annotations

import functools

import pytest
import torch

import lab02_npu_backend.test_lab as graded
from lab02_npu_backend.given.checks import TOLERANCE
from lab02_npu_backend.given.graphs import target_name
from lab02_npu_backend.given.op_samples import COURSE_OPS, known_op_names, op_samples, samples_off_eager
from labkit.impl import load_lab

aten = torch.ops.aten

#: Aten targets of the reference's table no OpInfo sample puts on the NPU, and why (a hand-written test covers each).
NOT_REACHED = {
    aten.div.Tensor: "OpInfo divides by tensors; the NPU divides only by a constant",
    aten.clamp.default: "OpInfo's clamp bounds are tensors; the NPU clamps to constants",
    aten._to_copy.default: "the samples are float32 and a conversion to float32 is traced away",
    aten.alias.default: "AOTAutograd records no alias for these samples",
    aten.reshape.default: "AOTAutograd records reshape as view or _unsafe_view",
}


@pytest.fixture(scope="module")
def reference():
    return load_lab("lab02_npu_backend", "solution")


def test_every_course_op_is_an_opinfo_of_the_pinned_pytorch():
    assert set(COURSE_OPS) <= known_op_names(), sorted(set(COURSE_OPS) - known_op_names())


@pytest.mark.parametrize("dialect", ["torch", "aten"])
def test_every_operators_samples_reach_the_backend_and_the_npu(reference, dialect):
    on_npu, silent = set(), []
    for name in COURSE_OPS:
        wrong, graphs = samples_off_eager(reference, dialect, op_samples([name]), tolerance=TOLERANCE)
        assert not wrong, wrong
        if not graphs:
            silent.append(name)
        on_npu |= {decision.op for graph in graphs for decision in graph.decisions if decision.on_npu}
    assert not silent, f"these operators' samples never reached the backend (Dynamo ran them eagerly): {silent}"
    if dialect == "aten":
        expected = {str(target) for target in reference.ATEN_SUPPORT if target not in NOT_REACHED}
        assert expected <= on_npu, f"no sample puts these on the NPU: {sorted(expected - on_npu)}"
        reached_anyway = {str(target) for target in NOT_REACHED} & on_npu
        assert not reached_anyway, f"NOT_REACHED lists targets the samples do reach: {sorted(reached_anyway)}"


@pytest.mark.parametrize("dialect", ["torch", "aten"])
def test_the_reference_gives_eagers_answer_on_the_reference_inputs_of_arithmetic(reference, dialect):
    """Scalars on both sides (``add(2.0, 3.0)`` is a call on numbers alone: it stays on the host), infinities."""
    samples = op_samples(["add", "sub", "mul", "div.no_rounding_mode", "pow", "rsqrt", "tanh"], reference_inputs=True)
    wrong, _ = samples_off_eager(reference, dialect, samples, tolerance=TOLERANCE)
    assert not wrong, wrong


def test_dims_wrapped_by_the_rank_alone_fail_on_a_0_dim_tensor(reference, monkeypatch):
    """``dim % ndim`` divides by zero on a 0-dim tensor, whose dims 0 and -1 PyTorch accepts."""
    few = functools.partial(op_samples, ["mean", "softmax", "transpose"])
    monkeypatch.setattr(graded, "op_samples", few)
    graded.test_every_sample_pytorch_tests_its_operators_with_gives_eagers_answer(reference, "aten")
    monkeypatch.setattr(reference.lowering, "_wrapped", lambda dim, ndim: int(dim) % ndim)
    with pytest.raises(AssertionError, match=r"mean\(Tensor\[\], dim=.*ZeroDivisionError.*support.py must refuse"):
        graded.test_every_sample_pytorch_tests_its_operators_with_gives_eagers_answer(reference, "aten")


def test_a_check_that_reads_the_input_by_position_alone_fails_on_a_call_that_names_it(reference, monkeypatch):
    """``torch.div(input=x, other=2.0)`` is a call a model may write: a support check reading ``node.args[0]``
    raises on it (the reference's division check and the given ``pow_check`` once did)."""
    few = functools.partial(op_samples, ["div.no_rounding_mode", "mul"])  # mul: something on the NPU
    monkeypatch.setattr(graded, "op_samples", few)
    graded.test_every_sample_pytorch_tests_its_operators_with_gives_eagers_answer(reference, "torch")
    by_position = lambda node: None if isinstance(node.args[0], torch.fx.Node) else "a number"  # noqa: E731
    monkeypatch.setitem(reference.support.CONSTRAINTS, torch.div, by_position)
    with pytest.raises(AssertionError, match=r"div\(Tensor.*\[spelled: keywords\] \(raised IndexError"):
        graded.test_every_sample_pytorch_tests_its_operators_with_gives_eagers_answer(reference, "torch")


def test_target_names_are_what_the_coverage_records():
    """The aten check above compares ``str(target)`` with the coverage's op names: they must be one spelling."""

    class Node:
        op, target = "call_function", aten.add.Tensor

    assert target_name(Node()) == str(aten.add.Tensor)


def test_loading_the_samples_leaves_torch_backends_flags_settable():
    """PyTorch's test utilities freeze ``torch.backends``' flags on import; a lab that sets one after the OpInfo
    test ran in the same process (``torch.backends.mkldnn.enabled = ...``) must not raise."""
    op_samples(["neg"])
    assert not torch.backends.flags_frozen()
    enabled = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = enabled
