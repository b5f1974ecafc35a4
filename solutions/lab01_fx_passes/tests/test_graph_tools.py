"""The given argument readers (``call_argument``, ``call_input``, ``binary_operands``) on every spelling.

Students are told to read arguments with them; a reader that misses one spelling would make a correct
pass fail (or a wrong one pass) on the graphs that spell it so.
"""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F
from torch import fx

from lab01_fx_passes.given.graph_tools import binary_operands, call_argument, call_input

aten = torch.ops.aten


def call(target, args=(), kwargs=None, method=False) -> tuple[fx.Node, list[fx.Node]]:
    graph = fx.Graph()
    x, y = graph.placeholder("x"), graph.placeholder("y")
    resolve = {"x": x, "y": y}
    args = tuple(resolve.get(a, a) if isinstance(a, str) else a for a in args)
    kwargs = {k: resolve.get(v, v) if isinstance(v, str) else v for k, v in (kwargs or {}).items()}
    node = graph.call_method(target, args, kwargs) if method else graph.call_function(target, args, kwargs)
    return node, [x, y]


@pytest.mark.parametrize(
    ("target", "args", "kwargs"),
    [
        (torch.conv2d, ("x", "y", None, 2), {}),
        (torch.conv2d, ("x",), {"weight": "y", "stride": 2}),
        (torch.conv2d, (), {"input": "x", "weight": "y", "stride": 2}),
        (aten.convolution.default, ("x", "y", None, [2, 2], [0, 0], [1, 1], False, [0, 0], 1), {}),
    ],
)
def test_call_argument_reads_positions_names_and_defaults_of_builtins_and_aten_ops(target, args, kwargs):
    node, (x, y) = call(target, args, kwargs)
    assert call_argument(node, "weight") is y and call_input(node) is x
    assert call_argument(node, "stride") in (2, [2, 2])
    assert call_argument(node, "groups", "absent") == 1, "a default the call left out is the signature's"


def test_call_argument_falls_back_to_the_given_default_without_a_signature():
    node, _ = call("relu", ("x",), method=True)
    assert call_argument(node, "inplace", "given") == "given" and call_input(node).name == "x"


@pytest.mark.parametrize(
    ("target", "args", "kwargs", "method"),
    [
        (operator.add, ("x", "y"), {}, False),
        (torch.add, ("x", "y"), {}, False),
        (aten.add.Tensor, ("x", "y"), {"alpha": 2}, False),
        (aten.add.Tensor, ("x",), {"other": "y"}, False),
        (torch.sub, (), {"input": "x", "other": "y"}, False),
        ("add", ("x", "y"), {}, True),
    ],
)
def test_binary_operands_in_every_spelling(target, args, kwargs, method):
    node, (x, y) = call(target, args, kwargs, method)
    assert binary_operands(node) == (x, y)


def test_binary_operands_of_a_unary_call_is_none():
    node, _ = call(F.relu, ("x",))
    assert binary_operands(node) is None
