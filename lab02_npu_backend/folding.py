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

# These are the imports the finished module uses; the ones marked `noqa: F401` stay unused until
# you write your code.
from typing import Any  # noqa: F401

import torch  # noqa: F401
from torch import fx
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily  # noqa: F401
from torch.fx.passes.infra.pass_base import PassResult

from lab02_npu_backend.given.coverage import FOLDED_META  # noqa: F401
from lab02_npu_backend.given.graphs import is_compute_node, target_name  # noqa: F401
from lab02_npu_backend.given.mutation import find_tensor_writes, returned_aliases  # noqa: F401

#: The names of the buffers :func:`fold_shape_constants` registers: ``_folded_constant0``, ...
FOLDED_PREFIX = "_folded_constant"


def foldable_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    """The call nodes of ``gm`` that depend only on constants and may be computed once, in graph order.

    Every rule of the module docstring but the last (a value that cannot be computed now is found
    out by :func:`fold_shape_constants`, which tries).
    """
    # guidance: begin
    # Walk the nodes in graph order with a set of constant nodes: a get_attr that is not an
    # nn.Parameter (gm.named_parameters()) starts as constant; a call_function/call_method joins when
    # set(node.all_input_nodes) is inside the set, it is not impure (node.is_impure(impure_random=True)),
    # and it is not among the nodes find_tensor_writes(gm) reports (each write's node, written and
    # aliases). Return the constant calls (not the get_attrs) that are not in returned_aliases(gm).
    # guidance: end
    # TODO(step 7)
    raise NotImplementedError("foldable_nodes")


def fold_shape_constants(gm: fx.GraphModule) -> PassResult:
    """Compute once every node of ``gm`` that depends only on shapes and constants (in place on ``gm``).

    Returns:
        ``PassResult(gm, modified)``. ``gm.meta[FOLDED_META]`` lists the folded compute nodes as
        ``(name, op)`` pairs (``op`` as :func:`~lab02_npu_backend.given.graphs.target_name` names it),
        in graph order, for the coverage report; empty when nothing was folded.
    """
    # guidance: begin
    # 1. Under `with unset_fake_temporarily(), torch.no_grad():` evaluate each candidate of
    #    foldable_nodes(gm) in graph order, and the get_attrs they read: an fx.Interpreter(gm) whose env
    #    holds the values so far runs one node with interpreter.run_node(node) (get_attr, call_function
    #    and call_method, with their keyword arguments). Save torch.get_rng_state() before each and
    #    compare after: a node that moved it drew random numbers and is not folded (restore the state
    #    with torch.set_rng_state either way).
    #    A candidate that raises, or whose input has no value, or whose value is not a real tensor
    #    (a FakeTensor, a meta tensor) or a tuple of them, is not folded; a tuple is folded only if every
    #    node that reads it is. Keep .detach().clone() of each value.
    # 2. The frontier: folded nodes that a node left in the graph reads. Register each value as a
    #    buffer (FOLDED_PREFIX + index), insert a get_attr before the node (copy node.meta to it) and
    #    node.replace_all_uses_with(get_attr, delete_user_cb=lambda user: user not in folded).
    # 3. Erase, users first (reversed graph order), the folded nodes and the get_attrs nobody reads;
    #    gm.graph.lint(); gm.recompile(). Record the folded compute nodes in gm.meta[FOLDED_META].
    # guidance: end
    # TODO(step 7)
    raise NotImplementedError("fold_shape_constants")
