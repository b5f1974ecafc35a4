"""Dead code elimination: remove nodes whose value nobody uses, unless running them matters.

A node is *dead* when it has no users. Removing a dead node is safe only when the node is
*pure*: its one effect is the value it returns. Impure nodes must stay even without users:

- **in-place ops** change a tensor someone else reads: ``x.add_(1)`` (``call_method``),
  ``torch.relu_(x)``, ``F.relu(x, inplace=True)``, ``nn.ReLU(inplace=True)``, ``aten.add_``;
- **writes through** ``out=``: ``torch.mul(x, 4.0, out=buf)`` writes ``buf``, whose later readers
  depend on it, whether or not anyone uses the call's own value (``aten.mul.out`` says so in its
  schema; a torch-level call only by its ``out`` keyword);
- **random ops** advance the random number generator, so deleting one changes every random
  number drawn after it: ``torch.rand``, ``torch.bernoulli``, ``x.bernoulli()``,
  ``F.dropout`` / ``nn.Dropout`` in training mode;
- **stateful modules and ops** update their own state: BatchNorm in training mode updates its
  running statistics;
- **side effects** PyTorch knows about: ``torch._assert``, ``operator.setitem``, functions
  registered with ``torch.fx.node.has_side_effect``, modules marked ``_is_impure``, and aten ops
  whose schema says they mutate an argument.

PyTorch's own ``Graph.eliminate_dead_code()`` checks only the last group (and never looks at
``call_method`` nodes), so it deletes an unused ``x.add_(1)``. This pass gives it a better
impurity test, :func:`is_impure`, which the later steps reuse: constant folding (step 3) must
never evaluate an impure node, and freezing (step 8) never freezes a value an impure node writes.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import fx, nn
from torch.fx.passes.infra.pass_base import PassResult

from lab01_fx_passes.given.graph_tools import call_argument
from lab01_fx_passes.given.interface import AUGMENTED_ASSIGNMENTS, RANDOM_OPS, STATEFUL_IN_TRAINING, DCEPassBase

from .op_names import op_name


def _module_is_impure(module: nn.Module) -> bool:
    if getattr(module, "_is_impure", False) or getattr(module, "inplace", False):
        return True
    if not module.training:
        return False
    if isinstance(module, nn.modules.dropout._DropoutNd):
        return module.p > 0
    if isinstance(module, nn.modules.batchnorm._NormBase):
        return module.track_running_stats
    return isinstance(module, nn.RReLU)


def is_impure(node: fx.Node, modules: Mapping[str, nn.Module]) -> bool:
    """Whether ``node`` must stay in the graph even when nothing uses its value.

    Args:
        node: any node.
        modules: ``dict(gm.named_modules())`` of the graph's module.

    Returns:
        True for placeholders and the output, for in-place, random and stateful operations and for
        calls PyTorch marks as side-effecting (see the module docstring); False for pure operations
        and ``get_attr``.
    """
    if node.op in ("placeholder", "output"):
        return True
    if node.op == "get_attr":
        return False
    if node.op == "call_module":
        return _module_is_impure(modules[node.target])
    if node.op == "call_function" and (node.is_impure() or node.target in AUGMENTED_ASSIGNMENTS):
        return True  # PyTorch's own list: side-effectful functions, mutable aten schemas, torch.rand...
    if node.kwargs.get("out") is not None:
        return True  # torch.mul(x, 4.0, out=buf): the call writes buf
    op = op_name(node, modules)
    if op is None:
        return False
    if op.in_place:
        return True
    if op.name in RANDOM_OPS:
        # F.dropout(x, training=False) and aten.dropout(x, p, train=False) are the identity.
        training = call_argument(node, "training", call_argument(node, "train", True))
        return training is not False and call_argument(node, "p", 1.0) != 0
    if op.name == "instance_norm":  # F.instance_norm(x, running_mean, running_var, use_input_stats=True)
        updates = call_argument(node, "use_input_stats", True) is not False
        return updates and call_argument(node, "running_mean") is not None
    if op.name in STATEFUL_IN_TRAINING:
        return call_argument(node, "training", False) is True
    return False


class DCEPass(DCEPassBase):
    """Remove dead pure nodes; keep impure ones (see :func:`is_impure`).

    Usage: ``result = DCEPass()(gm)``. Modifies ``gm`` in place and returns
    ``PassResult(gm, modified)``; :attr:`removed_count` says how many nodes went. Given
    (:class:`~lab01_fx_passes.given.interface.DCEPassBase`): :attr:`removed_count`, set to 0 by the
    constructor, and :meth:`apply`, the function form.
    """

    def call(self, graph_module: fx.GraphModule) -> PassResult:
        modules = dict(graph_module.named_modules())
        before = len(graph_module.graph.nodes)
        # PyTorch walks the graph backwards, so a chain of dead nodes goes in one sweep.
        graph_module.graph.eliminate_dead_code(is_impure_node=lambda node: is_impure(node, modules))
        self.removed_count = before - len(graph_module.graph.nodes)
        if self.removed_count:
            graph_module.recompile()
        return PassResult(graph_module, self.removed_count > 0)


def eliminate_dead_code(gm: fx.GraphModule) -> PassResult:
    """Function form of :class:`DCEPass`: ``PassResult(gm, modified)``, ``gm`` changed in place.

    When nothing was removed the result says so (``unchanged(gm, reason)``).
    """
    return DCEPass.apply(gm)  # given: DCEPassBase.apply
