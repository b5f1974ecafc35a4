"""The distance measure every transform is judged by."""

import pytest
import torch

from labkit.numerics import fresh_copies, output_error, outputs_close


def test_identical_outputs_have_zero_error():
    x = torch.randn(4, 5)
    error = output_error((x, {"y": x * 2}), (x.clone(), {"y": x * 2}))
    assert error.max_abs == 0.0 and error.max_rel == 0.0 and error.elements == 40


def test_reports_worst_absolute_and_relative_error():
    expected = torch.tensor([1.0, 100.0])
    actual = torch.tensor([1.5, 100.5])
    error = output_error(actual, expected)
    assert error.max_abs == pytest.approx(0.5)
    assert error.max_rel == pytest.approx(0.5)


def test_changed_shape_or_dtype_is_an_error():
    with pytest.raises(ValueError, match="changed"):
        output_error(torch.zeros(2, 3), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="changed"):
        output_error(torch.zeros(2, dtype=torch.float64), torch.zeros(2))
    with pytest.raises(ValueError, match="structure"):
        output_error((torch.zeros(1),), (torch.zeros(1), torch.zeros(1)))


def test_nan_mismatch_is_infinite_error():
    assert output_error(torch.tensor([float("nan")]), torch.tensor([0.0])).max_abs == float("inf")


def test_outputs_close_is_elementwise_allclose():
    expected = torch.tensor([1.0, 1000.0])
    assert outputs_close(expected + torch.tensor([1e-6, 1e-3]), expected, rtol=1e-5, atol=1e-5)
    assert not outputs_close(expected + torch.tensor([1e-3, 0.0]), expected, rtol=1e-5, atol=1e-5)
    assert not outputs_close((expected,), (expected, expected), rtol=1, atol=1)


# -- ReferenceOutputs: the budget is what float32 can promise on the program at hand ---------------
from torch import fx, nn  # noqa: E402

from labkit.numerics import TOLERANCE_FACTOR, ReferenceOutputs, run_in_float64  # noqa: E402


def deep_product(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """A chain of matmuls whose float32 result drifts measurably from the exact one."""
    for weight in weights:
        x = x @ weight
    return x


def chain_inputs(scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return (torch.randn(8, 64, generator=generator) * scale, torch.randn(6, 64, 64, generator=generator) / 8)


def test_the_budget_is_a_multiple_of_float32s_own_error_and_scales_with_the_outputs():
    for scale in (1.0, 1e4):
        inputs = chain_inputs(scale)
        reference = ReferenceOutputs.measure(deep_product, inputs)
        exact = deep_product(*(value.double() for value in inputs))
        own = (reference.outputs.double() - exact).abs().max().item()
        assert own > 0
        same = reference.compare(reference.outputs.clone())
        assert same.ok and same.error.max_abs == 0 and same.own_error == pytest.approx(own)
        assert same.worst_budget == pytest.approx(TOLERANCE_FACTOR * own)
        # moved by 3x float32's own error: within; by 6x: beyond, at any output scale
        direction = torch.sign(torch.randn(reference.outputs.shape, generator=torch.Generator().manual_seed(1)))
        assert reference.compare(reference.outputs + 3 * own * direction).ok
        verdict = reference.compare(reference.outputs + 6 * own * direction)
        assert not verdict.ok and "float32's own error" in verdict.describe()


def test_each_output_tensor_has_its_own_budget():
    def two_scales(x, weights):
        return deep_product(x, weights), deep_product(x, weights) * 1e-6

    reference = ReferenceOutputs.measure(two_scales, chain_inputs(1.0))
    large, small = reference.outputs
    assert reference.compare((large, small)).ok
    # an error the large output's budget would absorb is far beyond the small output's
    assert not reference.compare((large, small + large.abs().max() * 1e-7)).ok


def test_a_program_float32_computes_exactly_gets_a_one_ulp_floor():
    x = torch.tensor([1.0, 2.0, 4.0])
    reference = ReferenceOutputs.measure(lambda v: v * 2, (x,))
    assert reference.compare(x * 2).ok
    assert reference.compare(x * 2 + torch.tensor([0.0, 0.0, 8 * 4 * 1.2e-7])).ok  # 4 ulps of 8
    assert not reference.compare(x * 2 + torch.tensor([0.0, 0.0, 1e-4])).ok


def test_modules_run_in_float64_with_parameters_buffers_and_plain_tensor_attributes():
    class WithConstants(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 4)
            self.register_buffer("shift", torch.ones(4))
            self.plain = torch.full((4,), 0.5)  # like the _tensor_constant attributes of aten graphs

        def forward(self, x):
            return self.linear(x) + self.shift + self.plain

    model = fx.symbolic_trace(WithConstants())
    x = torch.randn(2, 4)
    exact = run_in_float64(model, [x])
    assert exact.dtype == torch.float64
    assert model.linear.weight.dtype == torch.float32 and model.plain.dtype == torch.float32, (
        "the original is untouched"
    )
    assert torch.allclose(exact.float(), model(x), atol=1e-6)


def test_integer_outputs_must_not_change_and_a_program_without_float64_falls_back():
    reference = ReferenceOutputs.measure(lambda v: (v.argmax(dim=1), v * 3), (torch.randn(4, 5),))
    indices, values = reference.outputs
    assert reference.compare((indices, values)).ok
    assert not reference.compare(((indices + 1) % 5, values)).ok

    def insists_on_float32(v):
        return v @ torch.ones(3, 3, dtype=torch.float32)

    fallback = ReferenceOutputs.measure(insists_on_float32, (torch.randn(2, 3),))
    assert fallback.exact is None and "dtype" in fallback.float64_failure
    verdict = fallback.compare(fallback.outputs * (1 + 1e-6))
    assert verdict.ok and verdict.own_error is None and "no float64 run" in verdict.describe()
    assert not fallback.compare(fallback.outputs * 1.001).ok


def test_compare_refuses_changed_structure_and_a_bad_factor():
    reference = ReferenceOutputs.measure(lambda v: v + 1, (torch.zeros(3),))
    with pytest.raises(ValueError, match="changed"):
        reference.compare(torch.zeros(4))
    with pytest.raises(ValueError, match="factor"):
        reference.compare(torch.ones(3), factor=0)
    assert not reference.compare(torch.tensor([1.0, float("nan"), 1.0])).ok


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_program_that_writes_its_input_is_measured_twice_from_the_same_values(dtype):
    """``x.add_(1)`` writes its input: the float32 and float64 runs each start from fresh copies, so both
    see x (the float64 one used to see x + 1, a float64 input not even copied by ``.to``), and the
    caller's x is never written."""
    x = torch.arange(4, dtype=dtype)
    measured = ReferenceOutputs.measure(lambda t: t.add_(1), [x])
    assert torch.equal(x, torch.arange(4, dtype=dtype)), "the caller's input was written"
    assert torch.equal(measured.outputs, torch.arange(1, 5, dtype=dtype))
    assert torch.equal(measured.exact, torch.arange(1, 5, dtype=torch.float64))
    copies = fresh_copies([x, 3, None])
    assert copies[1:] == (3, None) and torch.equal(copies[0], x) and copies[0].data_ptr() != x.data_ptr()
