"""The given write finder (``given/mutation.py``) reads a call's written argument however the call spells it."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F
from torch import fx

from lab02_npu_backend.given.mutation import written_arguments


def _call(target, args=(), kwargs=None, op="call_function"):
    """A graph with placeholders ``x``, ``y`` and one call of ``target`` on them: ``(graph's call node, x, y)``."""
    graph = fx.Graph()
    x, y = graph.placeholder("x"), graph.placeholder("y")
    named = {"x": x, "y": y}
    resolve = lambda value: named.get(value, value) if isinstance(value, str) else value  # noqa: E731
    node = graph.create_node(
        op, target, tuple(resolve(a) for a in args), {k: resolve(v) for k, v in (kwargs or {}).items()}
    )
    return node, x, y


@pytest.mark.parametrize(
    ("target", "args", "kwargs", "op"),
    [
        (F.relu, ("x",), {"inplace": True}, "call_function"),
        (F.relu, (), {"input": "x", "inplace": True}, "call_function"),
        (F.hardtanh, ("x", -0.5, 0.5, True), {}, "call_function"),
        (F.hardtanh, (), {"input": "x", "min_val": -0.5, "max_val": 0.5, "inplace": True}, "call_function"),
        ("add_", ("x", "y"), {}, "call_method"),
        (operator.setitem, ("x", 0, "y"), {}, "call_function"),
        (operator.iadd, ("x", "y"), {}, "call_function"),
    ],
    ids=["relu-keyword-flag", "relu-all-named", "hardtanh-positional", "hardtanh-all-named", "add_", "setitem", "+="],
)
def test_the_written_input_is_found_by_position_or_name(target, args, kwargs, op):
    node, x, _ = _call(target, args, kwargs, op)
    if target is operator.iadd:
        x.meta["example_value"] = torch.zeros(2)  # x += y writes a tensor only (on a number it rebinds)
    assert written_arguments(node) == [x]


def test_a_call_out_of_place_writes_nothing():
    node, _, _ = _call(F.relu, (), {"input": "x", "inplace": False})
    assert written_arguments(node) == []
