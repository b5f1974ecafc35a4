"""Extension: fold at compile time what depends only on shapes and constants.

A graph Dynamo hands a backend (``dynamic=False``) knows every size: ``torch.arange(12)``, a causal
mask built from two index vectors, T5's relative-position buckets or the ``ones`` OPT builds its
position ids from are the same on every call. Computed per call they are host work (int64 index
arithmetic the NPU does not have); computed once, when the graph is compiled, they are constants the
NPU partitions read like weights. This is lab 1's constant folding, run by a backend.

A node is folded when

- it is a call (``call_function`` or ``call_method``) whose inputs are all constants: literals,
  ``get_attr`` tensors, or nodes folded already. Nothing it reads comes from a graph input (under
  ``dynamic=True`` a size is a ``sym_size`` of an input, so nothing that depends on it is folded). In
  the graphs a backend receives, parameters and buffers are graph inputs, and a ``get_attr`` is a
  tensor the tracer made (``_tensor_constant0``: a ``torch.tensor(...)`` literal of the model's
  code); a ``get_attr`` of an ``nn.Parameter`` (a graph that keeps its weights as attributes) is
  never a constant: an optimizer step changes it between calls;
- it is pure: no side effects and no random numbers. ``node.is_impure(impure_random=True)`` knows
  the aten random ops and ``torch.rand``, not every spelling (a ``call_method`` such as
  ``t.bernoulli()``, or ``F.dropout(..., training=True)``, looks pure to it), so each value is also
  computed with the random generator watched: a node that draws from it (its state moved) is random,
  and is computed per call. And it writes nothing in place;
- nothing writes its value in place, nor any tensor that shares its memory
  (:func:`~lab02_npu_backend.given.mutation.find_tensor_writes` lists each write's aliases): BART's
  ``new_zeros`` that two ``setitem`` then fill is not a constant, and a folded buffer would keep the
  writes from one call to the next;
- its value is a real tensor (or a tuple of them, which is folded only with the nodes that unpack
  it), computed without error now, and the graph does not return it, nor a view of it
  (:func:`~lab02_npu_backend.given.mutation.returned_aliases`): the caller would receive the buffer
  itself, and a write to it would change every later call.

Only the *frontier* needs a buffer: a folded node that a node left in the graph reads. Each becomes a
``get_attr`` of a new buffer (``_folded_constant0``, ...) holding its value; the folded nodes and the
``get_attr`` constants no node reads any more are removed. A backend may be called inside the
compiler's fake-tensor mode (AOTAutograd calls its forward compiler there): the values are computed
with real tensors (``unset_fake_temporarily``), or they would be fakes with no data.

The coverage report lists each folded node as *elided*, with the reason
:data:`~lab02_npu_backend.given.coverage.FOLDED_AT_COMPILE_TIME`: it does no work per call, so it is
outside the NPU fraction, and the report says so instead of hiding it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
from torch.fx.passes.infra.pass_base import PassResult

from lab02_npu_backend.given.coverage import FOLDED_META
from lab02_npu_backend.given.graphs import is_compute_node, target_name
from lab02_npu_backend.given.mutation import find_tensor_writes, returned_aliases

#: The names of the buffers :func:`fold_shape_constants` registers: ``_folded_constant0``, ...
FOLDED_PREFIX = "_folded_constant"


def is_pure(node: fx.Node) -> bool:
    """No side effect and no random numbers: the same inputs give the same value, and computing it changes nothing."""
    return not node.is_impure(impure_random=True)


def foldable_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    """The call nodes of ``gm`` that depend only on constants and may be computed once, in graph order.

    Every rule of the module docstring but the last (a value that cannot be computed now is found
    out by :func:`fold_shape_constants`, which tries).
    """
    written = {alias for write in find_tensor_writes(gm) for alias in (write.node, write.written, *write.aliases)}
    parameters = {name for name, _ in gm.named_parameters()}
    returned = returned_aliases(gm)
    constant: set[fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op == "get_attr" and node.target not in parameters:
            constant.add(node)
        elif (
            node.op in ("call_function", "call_method")
            and set(node.all_input_nodes) <= constant
            and node not in written
            and is_pure(node)
        ):
            constant.add(node)
    return [node for node in gm.graph.nodes if node in constant and node.op != "get_attr" and node not in returned]


def fold_shape_constants(gm: fx.GraphModule) -> PassResult:
    """Compute once every node of ``gm`` that depends only on shapes and constants (in place on ``gm``).

    Returns:
        ``PassResult(gm, modified)``. ``gm.meta[FOLDED_META]`` lists the folded compute nodes as
        ``(name, op)`` pairs (``op`` as :func:`~lab02_npu_backend.given.graphs.target_name` names it),
        in graph order, for the coverage report; empty when nothing was folded.
    """
    candidates = foldable_nodes(gm)
    values = _constant_values(gm, set(candidates))
    folded = [node for node in candidates if node in values]
    while True:  # a tuple cannot be a buffer: one that a node left in the graph reads is computed per call
        folded_set = set(folded)
        kept = [n for n in folded if isinstance(values[n], tuple) and any(u not in folded_set for u in n.users)]
        if not kept:
            break
        folded = [node for node in folded if node not in kept]
    gm.meta[FOLDED_META] = [(node.name, target_name(node)) for node in folded if is_compute_node(node)]
    if not folded:
        return PassResult(gm, False)
    frontier = [node for node in folded if any(user not in folded_set for user in node.users)]
    for index, node in enumerate(frontier):
        name = f"{FOLDED_PREFIX}{index}"
        gm.register_buffer(name, values[node])
        with gm.graph.inserting_before(node):
            buffer = gm.graph.get_attr(name)
        buffer.meta.update(node.meta)  # the same value: its recorded example too
        node.replace_all_uses_with(buffer, delete_user_cb=lambda user: user not in folded_set)
    for node in reversed(gm.graph.nodes):  # users before what they read
        removable = node in folded_set or (node.op == "get_attr" and not node.target.startswith(FOLDED_PREFIX))
        if removable and not node.users:
            gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()
    return PassResult(gm, True)


def _constant_values(gm: fx.GraphModule, candidates: set[fx.Node]) -> dict[fx.Node, Any]:
    """Each candidate's value, computed now with real tensors; a candidate that cannot be computed (or
    whose inputs could not), or that draws random numbers, is left out, and runs per call as before."""
    values: dict[fx.Node, Any] = {}
    interpreter = fx.Interpreter(gm)  # runs one node at a time on the values in its env: ours
    interpreter.env = values
    with unset_fake_temporarily(), torch.no_grad():
        for node in gm.graph.nodes:  # graph order: inputs before their users
            needed = node in candidates or (node.op == "get_attr" and any(user in candidates for user in node.users))
            if not needed or any(source not in values for source in node.all_input_nodes):
                continue
            generator = torch.get_rng_state()
            try:
                value = interpreter.run_node(node)
            except Exception:  # noqa: BLE001 - what cannot be computed now is computed per call, as before
                continue
            finally:
                drew = drew_random_numbers(generator)
                torch.set_rng_state(generator)  # folding draws nothing from the caller's random stream
            if not drew:
                values[node] = value
        return {node: _copy(value) for node, value in values.items() if node in candidates and _is_data(value)}


def drew_random_numbers(state_before: torch.Tensor) -> bool:
    """Whether something drew from torch's default generator since its state was ``state_before``."""
    return not torch.equal(state_before, torch.get_rng_state())


def _is_data(value: Any) -> bool:
    """A real tensor with its elements (not a fake or meta tensor, not a number), or a tuple of them."""
    if isinstance(value, tuple):
        return bool(value) and all(_is_data(item) for item in value)
    return isinstance(value, torch.Tensor) and not isinstance(value, FakeTensor) and value.device.type != "meta"


def _copy(value: Any) -> Any:
    """A tensor (or tuple of tensors) of its own: a folded buffer shares memory with nothing the graph reads."""
    return tuple(_copy(item) for item in value) if isinstance(value, tuple) else value.detach().clone()
