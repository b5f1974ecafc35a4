"""Operator replacement: swap one activation function for another, in the graph's own dialect.

Why: an accelerator may lack an operator the model uses. A mobile NPU with a fast ``hardswish``
unit and no ``relu`` lookup, say, runs ``{"relu": "hardswish"}``. Unlike the other passes of the
lab, this one **changes what the model computes** (``hardswish(x) != relu(x)``): it declares so
(``changes_semantics = True``) and the pass manager reports the deviation instead of failing.

A replacement is built in the dialect of the node it replaces, so the graph stays uniform:

================================  ===============================================================
original node                     replacement
================================  ===============================================================
``call_module`` ``nn.ReLU``       ``call_module`` on a new ``nn.Hardswish`` (``inplace`` kept)
``call_function`` ``F.relu`` /    ``call_function`` ``F.hardswish`` (``inplace=True`` kept), or
``torch.relu``                    ``torch.hardswish`` where ``F`` has no such function
``call_method`` ``x.relu()``      ``x.hardswish()`` if ``Tensor`` has that method, else the
                                  ``call_function`` above
``aten.relu.default`` /           ``aten.hardswish.default`` / ``aten.hardswish_.default``
``aten.relu_.default``
================================  ===============================================================

Only unary activations (:data:`ACTIVATIONS`) can be swapped: the replacement receives the
original's input tensor and nothing else (``gelu``'s ``approximate`` or ``elu``'s ``alpha`` are
dropped, the new op's defaults apply). An in-place original gets an in-place replacement, because
later nodes may rely on the input having been overwritten; where the new op has no in-place form
the pass raises instead of silently changing that behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch  # noqa: F401
import torch.nn.functional as F  # noqa: F401
from torch import fx
from torch.fx.passes.infra.pass_base import PassResult

from lab01_fx_passes.given.graph_tools import add_attribute, call_input  # noqa: F401
from lab01_fx_passes.given.interface import ACTIVATIONS, OpReplacerBase  # noqa: F401  (given: the activations it can swap)

from .op_names import op_name  # noqa: F401


class OpReplacer(OpReplacerBase):
    """Replace activation functions by name, e.g. ``OpReplacer({"relu": "hardswish"})(gm)``.

    The mapping applies to the graph as it was given, all at once: each node is replaced at most once,
    so ``{"relu": "hardswish", "hardswish": "relu"}`` swaps the two.

    Modifies ``gm`` in place and returns ``PassResult(gm, modified)``; :attr:`replaced_count` says
    how many nodes were replaced. The pass changes the model's outputs on purpose:
    ``changes_semantics`` is True, which is how :class:`~.pass_manager.PassManager` knows. Given
    (:class:`~lab01_fx_passes.given.interface.OpReplacerBase`): ``changes_semantics`` and :attr:`name`.

    Raises:
        TypeError: if ``mapping`` is not a mapping of strings to strings.
        ValueError: if it names an activation not in :data:`ACTIVATIONS`, or is empty.
    """

    def __init__(self, mapping: Mapping[str, str]) -> None:
        super().__init__()
        # TODO(step 4): validate `mapping` (raise TypeError / ValueError naming what is wrong),
        #  then keep it in self.mapping (a dict) and set self.replaced_count = 0.
        raise NotImplementedError("OpReplacer: validate and store the mapping")

    def call(self, graph_module: fx.GraphModule) -> PassResult:
        # TODO(step 4): replace every node whose op_name(...) is a key of self.mapping.
        # guidance: begin
        #  Insert the replacement in the node's own dialect (see the table in the module docstring), give it
        #  the node's meta, node.replace_all_uses_with(replacement), erase the node.
        #  - the replacement takes the node's input tensor only;
        #  - keep in-place-ness (F.hardswish(x, inplace=True), nn.Hardswish(inplace=True),
        #    aten.hardswish_.default); raise ValueError where the new op has no in-place form;
        #  - register new modules with add_attribute: never modify the traced model's modules.
        # guidance: end
        raise NotImplementedError("OpReplacer.call: replace the mapped activations")


def replace_ops(gm: fx.GraphModule, mapping: Mapping[str, str]) -> PassResult:
    """Function form of :class:`OpReplacer`: ``replace_ops(gm, {"relu": "hardswish"})``."""
    return OpReplacer(mapping)(gm)
