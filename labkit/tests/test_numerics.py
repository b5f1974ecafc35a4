"""The distance measure every transform is judged by."""

import pytest
import torch

from labkit.numerics import output_error, outputs_close


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
