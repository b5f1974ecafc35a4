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

from typing import Any

import torch  # noqa: F401  (torch.no_grad())
from torch import fx, nn  # noqa: F401
from torch.fx.passes.infra.pass_base import PassResult
from torch.nn.utils.fusion import fuse_conv_bn_weights  # noqa: F401  (computes the fused weight and bias)

from lab01_fx_passes.given.graph_tools import add_attribute, call_argument  # noqa: F401
from lab01_fx_passes.given.interface import (  # noqa: F401  (given: the targets to match, the reasons to count)
    ATEN_CONVOLUTIONS,
    ATEN_TENSOR_BATCH_NORMS,
    ATEN_TUPLE_BATCH_NORMS,
    EPS_IS_A_GRAPH_VALUE,
    NO_PAIRS,
    SHARED_OUTPUT,
    TORCH_BATCH_NORMS,
    TORCH_CONVOLUTIONS,
    TRAINING_MODE,
    TRANSPOSED,
    WEIGHTS_ARE_INPUTS,
    ConvBNFuserBase,
)


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
        # TODO(step 1): find the foldable Conv -> BN pairs of module.graph, in every dialect.
        # guidance: begin
        #  - symbolic_trace: call_module BatchNorm (eval mode, with running stats) whose input is a
        #    call_module convolution (not transposed) with exactly ONE user;
        #  - Dynamo and aten (and functional calls in symbolic_trace): a call_function batch norm
        #    (TORCH_BATCH_NORMS, ATEN_*_BATCH_NORMS) with training False, whose input is one of
        #    TORCH_CONVOLUTIONS / ATEN_CONVOLUTIONS with exactly one user. Every one of those
        #    convolutions takes (input, weight, bias, ...), but a call may stop after the weight
        #    (F.conv2d(x, w): no bias at all, and the fused call needs one) or name bias=;
        #    torch.conv2d has no Python signature, so read node.args by position; F.batch_norm and
        #    the aten batch norms are read by name with call_argument(node, "running_mean").
        #    All weights must be get_attr constants (self.fetch_attr(node.target) reads them); a
        #    placeholder weight (Dynamo before freezing) is a pair skipped as WEIGHTS_ARE_INPUTS.
        #    For tuple-returning BNs only getitem(bn, 0) may be used.
        #    eps (call_argument(bn, "eps", 1e-5)) must be a Python number: under dynamic=True it
        #    is a node (a pair skipped as EPS_IS_A_GRAPH_VALUE).
        #  - count every refused pair in self.skipped[REASON] (TRAINING_MODE, SHARED_OUTPUT, ...).
        #  Compute the fused weight and bias with fuse_conv_bn_weights (under torch.no_grad()).
        # guidance: end
        raise NotImplementedError("ConvBNFuser: find the foldable Conv+BN pairs")

    def run_node(self, node: fx.Node) -> Any:
        """Re-emit ``node`` into the new graph (``fx.Transformer`` calls this for every node in order).

        A folded convolution becomes the fused convolution; its BN (and the BN's ``getitem(0)``)
        become that convolution's value; the BN's unused ``getitem(1)``/``(2)`` are not emitted;
        every other node is re-emitted as it is. Never modifies the original modules or tensors.
        """
        # TODO(step 1): emit the fused convolution for a folded pair.
        # guidance: begin
        #  - the convolution: register the new module (or new weight/bias tensors for function
        #    graphs) with add_attribute(self.module, ...), never modify the original module: the
        #    traced model shares it. Then self.tracer.create_proxy("call_module" or
        #    "call_function", target, args, kwargs), with args, kwargs = self.fetch_args_kwargs_from_env(conv_node);
        #  - the BN (and its getitem(0)): return the fused convolution's value (self.env holds the
        #    values already emitted, by node; it drops a value once its last user has run, so look
        #    up getitem(0)'s value through the BN, the BN's through the conv);
        #  - nodes that must not be re-emitted (the BN's unused getitem(1)/(2)): return None;
        #  - anything else: super().run_node(node).
        #  Tip: copy node.meta onto the emitted node (result.node.meta): fx.Transformer drops the
        #  recorded values (meta["val"]) that later passes read.
        # guidance: end
        return super().run_node(node)


def fuse_conv_bn(gm: fx.GraphModule) -> PassResult:
    """Fold every foldable Conv+BN pair of ``gm`` (see :class:`ConvBNFuser`).

    Returns:
        ``PassResult(new_graph_module, True)`` when at least one pair was folded, else
        ``unchanged(gm, reason)``: a ``PassResult(gm, False)`` saying why (:meth:`ConvBNFuser.why_unchanged`).
    """
    return ConvBNFuser.apply(gm)  # given: ConvBNFuserBase.apply
