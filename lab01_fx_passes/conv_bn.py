"""Fold an eval-mode BatchNorm into the convolution that feeds it.

The math. In eval mode BatchNorm is a fixed per-channel affine map of the convolution's output
``y = W * x + b`` (``*`` is convolution; ``c`` indexes output channels)::

    BN(y)_c = gamma_c * (y_c - mean_c) / sqrt(var_c + eps) + beta_c
            = s_c * y_c + (beta_c - s_c * mean_c)          with  s_c = gamma_c / sqrt(var_c + eps)
            = (s_c * W_c) * x + (s_c * (b_c - mean_c) + beta_c)

so ``Conv(W, b)`` followed by ``BN`` equals one convolution with weight ``s_c * W_c`` (each output
channel's filter scaled) and bias ``s_c * (b_c - mean_c) + beta_c``. The BN node disappears; the
convolution costs the same as before. ``torch.nn.utils.fusion.fuse_conv_bn_weights`` computes the
two new tensors.

When folding is wrong, and this pass refuses:

- BN in **training** mode normalises with the statistics of the current batch, not fixed numbers;
- BN without running statistics (``track_running_stats=False``) always uses batch statistics;
- the convolution's output has **another user** besides the BN (it needs the un-normalised value);
- transposed convolutions (their weight is laid out ``[in, out, ...]``: not handled here);
- in Dynamo graphs the weights are graph inputs (placeholders), unknown until the graph runs.

Dialects handled: ``symbolic_trace`` (``call_module`` Conv/BN pairs: the pair becomes one
``call_module`` on a new fused convolution) and aten graphs (``aten.convolution`` / ``aten.conv2d``
followed by ``aten._native_batch_norm_legit_no_training``, ``aten.native_batch_norm`` or
``aten.batch_norm``, with ``get_attr`` weights: the pair becomes one convolution reading new
``get_attr`` constants). The pass never modifies a module or tensor in place: the traced model
shares them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx, nn  # noqa: F401
from torch.fx.passes.infra.pass_base import PassResult
from torch.nn.utils.fusion import fuse_conv_bn_weights  # noqa: F401  (computes the fused weight and bias)

from lab01_fx_passes.graph_tools import add_attribute, call_argument  # noqa: F401

aten = torch.ops.aten
#: aten convolutions: ``convolution`` (core aten, has a ``transposed`` flag) and ``convNd`` (export).
ATEN_CONVOLUTIONS = (aten.convolution.default, aten.conv1d.default, aten.conv2d.default, aten.conv3d.default)
#: aten batch norms that return a tuple ``(output, saved_mean, saved_rstd)`` read through ``getitem``.
ATEN_TUPLE_BATCH_NORMS = (
    aten._native_batch_norm_legit_no_training.default,
    aten.native_batch_norm.default,
    aten._native_batch_norm_legit.default,
)
#: aten batch norms returning the output tensor directly.
ATEN_TENSOR_BATCH_NORMS = (aten.batch_norm.default,)


class ConvBNFuser(fx.Transformer):
    """Fold every eval-mode BatchNorm that directly follows a convolution into that convolution.

    Usage::

        fuser = ConvBNFuser(gm)
        fused_gm = fuser.transform()   # a new GraphModule; gm's graph is left as it was
        fuser.fused_count              # how many Conv+BN pairs were folded

    Being an ``fx.Transformer``, it re-emits every node of ``gm`` into a new graph; for a folded
    pair it emits the fused convolution in place of the convolution and maps the BN (and its
    ``getitem``) to that convolution's output. New modules and constants are registered on ``gm``
    under fresh names (``gm``'s own forward does not use them).
    """

    def __init__(self, module: fx.GraphModule) -> None:
        super().__init__(module)
        self.fused_count = 0
        # TODO(step 1): find the foldable Conv -> BN pairs of module.graph now (self.fused_count
        #  must be right before transform() runs), in both dialects:
        #  - symbolic_trace: call_module BatchNorm (eval mode, with running stats) whose input is a
        #    call_module convolution (not transposed) with exactly ONE user;
        #  - aten: one of the ATEN_*_BATCH_NORMS with training False, whose input is one of the
        #    ATEN_CONVOLUTIONS with exactly one user, all weights get_attr constants
        #    (self.fetch_attr(node.target) reads them). For tuple-returning BNs only getitem(bn, 0)
        #    may be used.
        #  Compute the fused weight and bias with fuse_conv_bn_weights (under torch.no_grad()).
        raise NotImplementedError("ConvBNFuser: find the foldable Conv+BN pairs")

    def run_node(self, node: fx.Node) -> Any:
        """Re-emit ``node`` into the new graph (``fx.Transformer`` calls this for every node in order).

        TODO(step 1): for a folded pair,
          - the convolution: emit the fused convolution instead. Register the new module (or new
            weight/bias tensors for aten graphs) with add_attribute(self.module, ...), never modify the
            original module: the traced model shares it. Then
            self.tracer.create_proxy("call_module" or "call_function", target, args, kwargs),
            with args, kwargs = self.fetch_args_kwargs_from_env(conv_node);
          - the BN (and its getitem(0)): return the fused convolution's value (self.env holds the
            values already emitted, by node; it drops a value once its last user has run, so look
            up getitem(0)'s value through the BN, the BN's through the conv);
          - nodes that must not be re-emitted (the BN's unused getitem(1)/(2)): return None;
          - anything else: super().run_node(node).
        Tip: copy node.meta onto the emitted node (result.node.meta): fx.Transformer drops the
        recorded values (meta["val"]) that later passes read.
        """
        return super().run_node(node)


def fuse_conv_bn(gm: fx.GraphModule) -> PassResult:
    """Fold every foldable Conv+BN pair of ``gm`` (see :class:`ConvBNFuser`).

    Returns:
        ``PassResult(new_graph_module, True)`` when at least one pair was folded, else
        ``PassResult(gm, False)``.
    """
    fuser = ConvBNFuser(gm)
    if not fuser.fused_count:
        return PassResult(gm, False)
    return PassResult(fuser.transform(), True)
