"""The given write finder (``given/mutation.py``) reads a call's written argument however the call spells it."""

from __future__ import annotations

import copy
import operator

import pytest
import torch
import torch.nn.functional as F
from torch import fx
from torch.utils.checkpoint import checkpoint

from lab02_npu_backend.given.checks import TOLERANCE, backend_for, compile_and_run
from lab02_npu_backend.given.graphs import capture_graphs
from lab02_npu_backend.given.mutation import written_arguments
from labkit.fx_nodes import node_value
from labkit.impl import load_lab
from labkit.numerics import output_error, outputs_close


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


# ------------------------------------------------------------------ writes no spelling shows
def batch_norm_stats_read_before(x, running_mean, running_var):
    """Training batch norm updates its running statistics; ``r`` reads them before the update."""
    r = running_mean * 2
    return F.batch_norm(x, running_mean, running_var, training=True, momentum=0.5) + r


def embedding_renorm_read_before(indices, weight):
    """``max_norm`` rescales the looked-up rows of ``weight`` in place; ``a`` reads them before."""
    a = weight * 3
    return F.embedding(indices, weight, max_norm=1.0) + a[:3]


def foreach_add_read_before(x, y):
    """``torch._foreach_add_`` writes every tensor of its list; ``c`` reads the first before."""
    a, b = x.clone(), y.clone()
    c = a * 2
    torch._foreach_add_([a, b], 1.0)
    return c + a, b * 2


def max_into_an_out_tuple(x):
    """``out=(m, i)`` writes both tensors of the tuple; ``c`` reads ``m`` before."""
    m, i = torch.zeros(3), torch.zeros(3, dtype=torch.long)
    c = m + 1
    torch.max(x, 1, out=(m, i))
    return c + m * 2, i


#: case -> (function, inputs, the graph inputs or intermediates it writes, by the names Dynamo gives them)
UNSPELLED_WRITES = {
    "batch-norm-training": (
        batch_norm_stats_read_before,
        lambda: (torch.randn(4, 3), torch.randn(3), torch.rand(3) + 0.5),
        ["l_running_mean_", "l_running_var_"],
    ),
    "embedding-max-norm": (
        embedding_renorm_read_before, lambda: (torch.tensor([0, 2, 2]), torch.randn(4, 3) * 3), ["l_weight_"]
    ),
    "foreach-add": (foreach_add_read_before, lambda: (torch.randn(3), torch.randn(3)), ["a", "b"]),
    "out-tuple": (max_into_an_out_tuple, lambda: (torch.randn(3, 4),), ["m", "i"]),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(UNSPELLED_WRITES))
def test_writes_no_spelling_shows_are_found_by_running_the_call(case):
    """Each case writes a tensor in place without ``_``, ``inplace=`` or a single ``out=`` node in its spelling:
    running the call on its recorded fake values finds the written inputs."""
    fn, make_inputs, expected = UNSPELLED_WRITES[case]
    torch._dynamo.reset()
    gm = capture_graphs(fn, *make_inputs()).torch[0]
    written = {w.name for node in gm.graph.nodes for w in written_arguments(node)}
    assert written == set(expected), f"{case}: the finder names {sorted(written)} written, not {expected}"


@pytest.mark.parametrize("dialect", ["torch", "aten"])
@pytest.mark.parametrize("case", sorted(UNSPELLED_WRITES))
def test_the_reference_keeps_reads_before_writes_no_spelling_shows(case, dialect):
    """Through the reference backend, a read of the written tensor placed before the write keeps eager's value
    (the partitioner would otherwise fuse it with a node after the write, and run it there)."""
    fn, make_inputs, _ = UNSPELLED_WRITES[case]
    inputs = make_inputs()
    with torch.no_grad():
        expected = fn(*copy.deepcopy(inputs))
        actual, _ = compile_and_run(backend_for(load_lab("lab02_npu_backend", "solution"), dialect), fn, *inputs)
    assert outputs_close(actual, expected, rtol=TOLERANCE, atol=TOLERANCE), (
        f"{case} ({dialect} graphs): the reference differs from eager by {output_error(actual, expected)}"
    )


def test_running_a_call_leaves_the_recorded_values_as_they_were():
    """``a.unsqueeze_(0)`` and ``b.t_()`` write shapes, not elements: the finder records such a write without
    performing it, so the graph's example values (already the shapes after the write) stay as Dynamo left them."""

    def writes_shapes(x):
        a, b = x.clone(), x.clone()
        a.unsqueeze_(0)
        b.t_()
        return a * 2, b + 1

    gm = capture_graphs(writes_shapes, torch.randn(3, 4)).torch[0]
    shapes = lambda: {n.name: tuple(node_value(n).shape) for n in gm.graph.nodes if n.op != "output"}  # noqa: E731
    before = shapes()
    written = {n.name: [w.name for w in written_arguments(n)] for n in gm.graph.nodes}
    assert written["unsqueeze_"] == ["a"] and written["t_"] == ["b"]
    assert shapes() == before, f"finding the writes changed the recorded shapes: {before} -> {shapes()}"


# ------------------------------------------------------------------ writes the recorded values hide
def batch_norm_then_unsqueeze_(x, running_mean, running_var):
    """``h.unsqueeze_(0)`` after the batch norm leaves ``h``'s recorded value 3-D: the norm no longer runs on it."""
    h = x * 1
    r = running_mean * 2
    y = F.batch_norm(h, running_mean, running_var, training=True, momentum=0.5)
    s = r + running_mean
    h.unsqueeze_(0)
    return y, s, h * 1


def write_through_a_view_then_set_(x, y):
    """``a.set_(y)`` leaves ``a``'s recorded value on ``y``'s storage: ``b += 3`` looked like nobody else's write."""
    a = x.clone()
    b = a[0]
    b += 3
    s = a * 2
    a.set_(y)
    return s


def checkpointed_batch_norm(x, running_mean, running_var):
    """A higher-order operator (checkpoint's) runs a subgraph: it cannot be run on recorded values alone."""
    r = running_mean * 2
    y = checkpoint(lambda h: F.batch_norm(h, running_mean, running_var, training=True), x, use_reentrant=False)
    return y + r, running_mean + r


def checkpoint_writes_a_constant(x):
    """A write inside a checkpoint into a tensor built from constants: folding it once would carry the write over."""
    c = torch.zeros(3)
    z = checkpoint(lambda h: c.add_(h) * 1, x, use_reentrant=False)
    return z + c


def vmap_sine(x):
    """torch.vmap's graphs call functions without parameters (``lazy_load_decompositions()``)."""
    return torch.vmap(torch.sin)(x) * 2


#: case -> (function, inputs): each compiled once and called twice, like eager each time.
HIDDEN_WRITES = {
    "batch-norm-then-unsqueeze_": (
        batch_norm_then_unsqueeze_, lambda: (torch.randn(4, 3), torch.randn(3), torch.rand(3) + 0.5)
    ),
    "write-through-a-view-then-set_": (write_through_a_view_then_set_, lambda: (torch.randn(2, 3), torch.randn(2, 3))),
    "checkpointed-batch-norm": (
        checkpointed_batch_norm, lambda: (torch.randn(4, 3), torch.randn(3), torch.rand(3) + 0.5)
    ),
    "checkpoint-writes-a-constant": (checkpoint_writes_a_constant, lambda: (torch.randn(3),)),
    "vmap-sine": (vmap_sine, lambda: (torch.randn(2, 3),)),
}  # fmt: skip


@pytest.mark.parametrize("dialect", ["torch", "aten"])
@pytest.mark.parametrize("case", sorted(HIDDEN_WRITES))
def test_the_reference_gives_eagers_answer_where_recorded_values_hide_a_write(case, dialect):
    """Each call of the compiled function gives eager's outputs and writes the caller's tensors as eager does."""
    fn, make_inputs = HIDDEN_WRITES[case]
    backend = backend_for(load_lab("lab02_npu_backend", "solution"), dialect)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=backend)
    for call in range(2):
        inputs = make_inputs()
        eager_inputs = copy.deepcopy(inputs)
        with torch.no_grad():
            expected, actual = fn(*eager_inputs), compiled(*inputs)
        assert outputs_close(actual, expected, rtol=TOLERANCE, atol=TOLERANCE), (
            f"{case} ({dialect} graphs), call {call + 1}: the reference differs from eager by "
            f"{output_error(actual, expected)}"
        )
        assert outputs_close(inputs, eager_inputs, rtol=TOLERANCE, atol=TOLERANCE), (
            f"{case} ({dialect} graphs), call {call + 1}: the caller's tensors differ from eager's after the call"
        )
