"""Fold an eval-mode BatchNorm into the convolution that feeds it.

The math. In eval mode BatchNorm is a fixed per-channel affine map of the convolution's output
``y = W * x + b`` (``*`` is convolution; ``c`` indexes output channels)::

    BN(y)_c = gamma_c * (y_c - mean_c) / sqrt(var_c + eps) + beta_c
            = s_c * y_c + (beta_c - s_c * mean_c)          with  s_c = gamma_c / sqrt(var_c + eps)
            = (s_c * W_c) * x + (s_c * (b_c - mean_c) + beta_c)

so ``Conv(W, b)`` followed by ``BN`` equals one convolution with weight ``s_c * W_c`` (each output
channel's filter scaled) and bias ``s_c * (b_c - mean_c) + beta_c``. The BN node disappears; the
convolution costs the same as before. ``torch.nn.utils.fusion.fuse_conv_bn_weights`` computes the
two new tensors. A BN without a learned scale and shift (``affine=False``; ``F.batch_norm`` called
without ``weight`` and ``bias``) folds too, with ``gamma = 1`` and ``beta = 0``.

When folding is wrong, and this pass refuses:

- BN in **training** mode normalises with the statistics of the current batch, not fixed numbers
  (a module in training mode, or a call given ``training=True``, functional ones included);
- BN without running statistics (``track_running_stats=False``) always uses batch statistics;
- the convolution's output has **another user** besides the BN (it needs the un-normalised value);
- transposed convolutions (their weight is laid out ``[in, out, ...]``: not handled here);
- the weights are graph **inputs** (placeholders): in Dynamo graphs every parameter and buffer is
  one, unknown until the graph runs. The freezing step (``freezing.py``) turns them into constants
  first; without it the pass cannot fire, and says so.
- ``eps`` is a **graph value**, not a number: under ``torch.compile(..., dynamic=True)`` Dynamo
  does not specialise a module's float attributes, so ``bn.eps`` arrives as a 0-d tensor input read
  by ``.item()`` and the call's ``eps`` argument is that node (:data:`EPS_IS_A_GRAPH_VALUE`). The fold
  needs the number; arithmetic on the node fails (``Tensor + Node``), so check before you compute.

Dialects handled: ``symbolic_trace`` (``call_module`` Conv/BN pairs: the pair becomes one
``call_module`` on a new fused convolution; functional ``F.conv2d`` -> ``F.batch_norm`` calls appear
there as in Dynamo graphs), Dynamo (``torch.conv1d/2d/3d`` followed by
``torch.nn.functional.batch_norm``; a convolution call may stop after its weight, ``F.conv2d(x, w)``,
with no bias argument at all) and aten graphs (``aten.convolution`` / ``aten.conv2d``
followed by ``aten._native_batch_norm_legit_no_training``, ``aten.native_batch_norm`` or
``aten.batch_norm``); in the last two the weights must be ``get_attr`` constants, and the pair
becomes one convolution reading new ``get_attr`` constants. The pass never modifies a module or
tensor in place: the traced model shares them.

A pass that changes nothing says why (:func:`~lab01_fx_passes.given.pass_report.unchanged`): the
fuser counts every pair it refused, by reason (:attr:`ConvBNFuser.skipped`). The targets it
matches, the reasons and the fuser's counters are given (:mod:`lab01_fx_passes.given.interface`).
"""

from __future__ import annotations

import copy
import operator
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx, nn
from torch.fx.passes.infra.pass_base import PassResult
from torch.nn.utils.fusion import fuse_conv_bn_weights

from lab01_fx_passes.given.graph_tools import add_attribute, call_argument
from lab01_fx_passes.given.interface import (
    ATEN_CONVOLUTIONS,
    ATEN_TENSOR_BATCH_NORMS,
    ATEN_TUPLE_BATCH_NORMS,
    EPS_IS_A_GRAPH_VALUE,
    SHARED_OUTPUT,
    TORCH_BATCH_NORMS,
    TORCH_CONVOLUTIONS,
    TRAINING_MODE,
    TRANSPOSED,
    WEIGHTS_ARE_INPUTS,
    ConvBNFuserBase,
)


@dataclass
class _Fold:
    """A Conv -> BN pair to fold, and the nodes the fused convolution replaces."""

    conv: fx.Node
    bn: fx.Node
    weight: torch.Tensor
    bias: torch.Tensor
    bn_output: fx.Node  # the node whose value the BN produced (the BN, or its getitem(0))


def _fused_weights(conv_w, conv_b, mean, var, eps, bn_w, bn_b) -> tuple[nn.Parameter, nn.Parameter]:
    with torch.no_grad():
        return fuse_conv_bn_weights(conv_w, conv_b, mean, var, eps, bn_w, bn_b)


class ConvBNFuser(ConvBNFuserBase):
    """Fold every eval-mode BatchNorm that directly follows a convolution into that convolution.

    Usage::

        fuser = ConvBNFuser(gm)
        fused_gm = fuser.transform()   # a new GraphModule; gm's graph is left as it was
        fuser.fused_count              # how many Conv+BN pairs were folded
        fuser.skipped                  # reason -> how many pairs were refused for it

    Being an ``fx.Transformer``, it re-emits every node of ``gm`` into a new graph; for a folded
    pair it emits the fused convolution in place of the convolution and maps the BN (and its
    ``getitem``) to that convolution's output. New modules and constants are registered on ``gm``
    under fresh names (``gm``'s own forward does not use them).

    The constructor finds the pairs (``fused_count`` is right before :meth:`transform` runs) and
    counts in ``skipped``, under the reasons of :mod:`~lab01_fx_passes.given.interface`, every BatchNorm
    fed by a convolution that it refuses to fold: :meth:`why_unchanged` turns them into the reason
    :func:`fuse_conv_bn` gives when nothing was folded. Given
    (:class:`~lab01_fx_passes.given.interface.ConvBNFuserBase`): the two counters, :meth:`why_unchanged`
    and :meth:`apply`, the function form.
    """

    def __init__(self, module: fx.GraphModule) -> None:
        super().__init__(module)  # given: self.fused_count = 0, self.skipped = Counter()
        self._folds: dict[fx.Node, _Fold] = {}  # conv node -> its fold
        self._forward: dict[fx.Node, fx.Node] = {}  # folded BN -> conv, its getitem(0) -> BN
        self._skip: set[fx.Node] = set()  # nodes not re-emitted: unused getitems, dead constants
        self._modules = dict(module.named_modules())
        for node in module.graph.nodes:
            fold = self._match_module_pair(node) or self._match_function_pair(node)
            if fold is not None:
                self._plan(fold)

    # -- matching --------------------------------------------------------------------------
    def _conv_feeding(self, bn: fx.Node) -> fx.Node | None:
        """The BN's input if it is a convolution (any dialect) read by the BN alone; else None.

        A convolution with another user is counted in :attr:`skipped` (the fold would change it).
        """
        source = bn.args[0] if bn.op == "call_module" else call_argument(bn, "input")
        if not isinstance(source, fx.Node) or not self._is_convolution(source):
            return None
        if len(source.users) != 1:
            self.skipped[SHARED_OUTPUT] += 1
            return None
        return source

    def _is_convolution(self, node: fx.Node) -> bool:
        if node.op == "call_module":
            return isinstance(self._modules[node.target], nn.modules.conv._ConvNd)
        return node.op == "call_function" and node.target in ATEN_CONVOLUTIONS + TORCH_CONVOLUTIONS

    def _match_module_pair(self, bn: fx.Node) -> _Fold | None:
        if bn.op != "call_module" or not isinstance(self._modules[bn.target], nn.modules.batchnorm._BatchNorm):
            return None
        norm = self._modules[bn.target]
        conv = self._conv_feeding(bn)
        if conv is None or conv.op != "call_module" or len(bn.args) != 1 or bn.kwargs:
            return None
        if norm.training or norm.running_mean is None:
            self.skipped[TRAINING_MODE] += 1
            return None
        conv_module = self._modules[conv.target]
        if conv_module.transposed:
            self.skipped[TRANSPOSED] += 1
            return None
        if conv_module.out_channels != norm.num_features:
            return None
        weight, bias = _fused_weights(
            conv_module.weight, conv_module.bias, norm.running_mean, norm.running_var, norm.eps,
            norm.weight, norm.bias,
        )  # fmt: skip
        return _Fold(conv, bn, weight, bias, bn_output=bn)

    def _match_function_pair(self, bn: fx.Node) -> _Fold | None:
        """A Dynamo or aten Conv -> BN pair (``call_function`` nodes, weights as arguments)."""
        batch_norms = ATEN_TUPLE_BATCH_NORMS + ATEN_TENSOR_BATCH_NORMS + TORCH_BATCH_NORMS
        if bn.op != "call_function" or bn.target not in batch_norms:
            return None
        conv = self._conv_feeding(bn)
        if conv is None or conv.op != "call_function":
            return None
        if call_argument(bn, "training", False) is not False:
            self.skipped[TRAINING_MODE] += 1
            return None
        if conv.target in ATEN_CONVOLUTIONS and call_argument(conv, "transposed", False) is not False:
            self.skipped[TRANSPOSED] += 1
            return None
        bn_output = bn
        if bn.target in ATEN_TUPLE_BATCH_NORMS:
            # Only the normalised output (index 0) may be read; saved statistics must be unused.
            outputs = [user for user in bn.users if user.target is operator.getitem and user.args[1] == 0]
            others = [user for user in bn.users if user not in outputs]
            if len(outputs) != 1 or any(user.target is not operator.getitem or user.users for user in others):
                return None
            bn_output = outputs[0]
        try:
            # Every convolution here takes (input, weight, bias, ...): aten schemas and torch.convNd alike.
            conv_w, conv_b = (self._constant(call_argument(conv, name)) for name in ("weight", "bias"))
            bn_w, bn_b, mean, var = (self._constant(call_argument(bn, name)) for name in
                                     ("weight", "bias", "running_mean", "running_var"))  # fmt: skip
        except LookupError:  # weights that are graph inputs (Dynamo before freezing, lifted export) are unknown
            self.skipped[WEIGHTS_ARE_INPUTS] += 1
            return None
        if mean is None or var is None or conv_w.shape[0] != mean.shape[0]:
            if mean is None or var is None:  # no running statistics: batch statistics, as in training
                self.skipped[TRAINING_MODE] += 1
            return None
        eps = call_argument(bn, "eps", 1e-5)
        if not isinstance(eps, (int, float)):  # a node: Dynamo's float left symbolic (dynamic=True)
            self.skipped[EPS_IS_A_GRAPH_VALUE] += 1
            return None
        weight, bias = _fused_weights(conv_w, conv_b, mean, var, eps, bn_w, bn_b)
        return _Fold(conv, bn, weight, bias, bn_output=bn_output)

    def _constant(self, argument: Any) -> torch.Tensor | None:
        """The tensor a ``get_attr`` argument reads (None stays None: no bias, no affine)."""
        if argument is None:
            return None
        if not (isinstance(argument, fx.Node) and argument.op == "get_attr"):
            raise LookupError(f"{argument} is not a constant")
        return self.fetch_attr(argument.target)

    def _plan(self, fold: _Fold) -> None:
        self._folds[fold.conv] = fold
        self._forward[fold.bn] = fold.conv
        if fold.bn_output is not fold.bn:
            self._forward[fold.bn_output] = fold.bn
            self._skip.update(user for user in fold.bn.users if user is not fold.bn_output)
        # Constants read only by the folded pair are not needed any more: do not re-emit them.
        pair = {fold.conv, fold.bn}
        for node in [*fold.conv.all_input_nodes, *fold.bn.all_input_nodes]:
            if node.op == "get_attr" and set(node.users) <= pair:
                self._skip.add(node)
        self.fused_count += 1

    # -- rewriting -------------------------------------------------------------------------
    def run_node(self, node: fx.Node) -> Any:
        if node in self._skip:
            return None
        if node in self._forward:  # the BN is now the identity on the fused convolution's output
            return self.env[self._forward[node]]
        result = self._emit_fused_conv(self._folds[node]) if node in self._folds else super().run_node(node)
        if isinstance(result, fx.Proxy):
            # fx.Transformer does not carry recorded values (meta["val"]) over; later passes read them.
            for key, value in node.meta.items():
                result.node.meta.setdefault(key, value)
        return result

    def _emit_fused_conv(self, fold: _Fold) -> fx.Proxy:
        conv = fold.conv
        args, kwargs = self.fetch_args_kwargs_from_env(conv)
        if conv.op == "call_module":
            fused = copy.deepcopy(self._modules[conv.target])
            fused.weight, fused.bias = fold.weight, fold.bias
            name = add_attribute(self.module, f"{conv.target}_bn_fused", fused)
            return self.tracer.create_proxy("call_module", name, args, kwargs)
        stem = f"{call_argument(conv, 'weight').target}_bn_fused"
        weight = add_attribute(self.module, stem, fold.weight.detach())
        bias = add_attribute(self.module, f"{stem}_bias", fold.bias.detach())
        args, kwargs = list(args), dict(kwargs)
        for position, name, target in ((1, "weight", weight), (2, "bias", bias)):
            proxy = self.tracer.create_proxy("get_attr", target, (), {})
            if position < len(args):  # the call passed it by position: replace it there
                args[position] = proxy
            else:  # by name, or left out (a convolution without bias): pass it by name
                kwargs[name] = proxy
        return self.tracer.create_proxy("call_function", conv.target, tuple(args), kwargs)


def fuse_conv_bn(gm: fx.GraphModule) -> PassResult:
    """Fold every foldable Conv+BN pair of ``gm`` (see :class:`ConvBNFuser`).

    Returns:
        ``PassResult(new_graph_module, True)`` when at least one pair was folded, else
        ``unchanged(gm, reason)``: a ``PassResult(gm, False)`` saying why (:meth:`ConvBNFuser.why_unchanged`).
    """
    return ConvBNFuser.apply(gm)  # given: ConvBNFuserBase.apply
