"""Conv+BN folds that are wrong on purpose: what a pass manager must catch (harness: do not edit).

Each is a pass (``GraphModule -> PassResult``) for ``symbolic_trace`` graphs that folds every
eval-mode BatchNorm into the convolution feeding it, the way :func:`fuse_conv_bn` does, except for
one classic mistake in the arithmetic (see ``conv_bn.py`` for the right formula,
``W' = s * W``, ``b' = s * (b - mean) + beta`` with ``s = gamma / sqrt(var + eps)``):

=================  ==========================================================
``forgets_eps``    ``s = gamma / sqrt(var)``: the subtlest, ~5e-6 per layer
``forgets_mean``   ``b' = s * b + beta``
``divides_by_var`` ``s = gamma / (var + eps)``: variance for standard deviation
``forgets_shift``  ``b' = s * (b - mean)``: no ``beta``
``forgets_scale``  ``s = 1 / sqrt(var + eps)``: no ``gamma``
=================  ==========================================================

The tests run them through your :class:`PassManager`, on a small model and on a ResNet-50 whose
logits are of order 1e4: each must be stopped and named, however large the outputs are. Try
``PassManager([wrong_fold("forgets_eps")], example_inputs=...)`` on your own models.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import fx, nn
from torch.fx.passes.infra.pass_base import PassResult
from torch.nn.utils.fusion import fuse_conv_bn_weights

from lab01_fx_passes.given.graph_tools import add_attribute

#: BN statistics ``(mean, var, eps, gamma, beta)`` -> what the wrong fold uses instead.
Statistics = tuple[torch.Tensor, torch.Tensor, float, torch.Tensor, torch.Tensor]
MISTAKES: dict[str, Callable[..., Statistics]] = {
    "forgets_eps": lambda mean, var, eps, gamma, beta: (mean, var, 0.0, gamma, beta),
    "forgets_mean": lambda mean, var, eps, gamma, beta: (torch.zeros_like(mean), var, eps, gamma, beta),
    # s = gamma / (var + eps) is what sqrt sees when given (var + eps)^2 - eps
    "divides_by_var": lambda mean, var, eps, gamma, beta: (mean, (var + eps) ** 2 - eps, eps, gamma, beta),
    "forgets_shift": lambda mean, var, eps, gamma, beta: (mean, var, eps, gamma, torch.zeros_like(beta)),
    "forgets_scale": lambda mean, var, eps, gamma, beta: (mean, var, eps, torch.ones_like(gamma), beta),
}


def _foldable_pairs(gm: fx.GraphModule) -> list[tuple[fx.Node, fx.Node]]:
    modules = dict(gm.named_modules())
    pairs = []
    for node in gm.graph.nodes:
        if node.op != "call_module" or not isinstance(modules[node.target], nn.modules.batchnorm._BatchNorm):
            continue
        conv = node.args[0]
        norm = modules[node.target]
        if (isinstance(conv, fx.Node) and conv.op == "call_module" and len(conv.users) == 1
                and isinstance(modules[conv.target], nn.modules.conv._ConvNd) and norm.affine
                and not norm.training and norm.running_mean is not None):  # fmt: skip
            pairs.append((conv, node))
    return pairs


def wrong_fold(mistake: str) -> Callable[[fx.GraphModule], PassResult]:
    """A Conv+BN folding pass that makes ``mistake`` (a key of :data:`MISTAKES`) on every pair.

    Raises:
        ValueError: for an unknown mistake.
    """
    if mistake not in MISTAKES:
        raise ValueError(f"unknown mistake {mistake!r}; expected one of {', '.join(MISTAKES)}")

    def fold(gm: fx.GraphModule) -> PassResult:
        modules = dict(gm.named_modules())
        pairs = _foldable_pairs(gm)
        for conv, bn in pairs:
            norm = modules[bn.target]
            statistics = MISTAKES[mistake](norm.running_mean, norm.running_var, norm.eps, norm.weight, norm.bias)
            fused = copy.deepcopy(modules[conv.target])
            with torch.no_grad():
                fused.weight, fused.bias = fuse_conv_bn_weights(fused.weight, fused.bias, *statistics)
            name = add_attribute(gm, f"{conv.target}_wrongly_fused", fused)
            with gm.graph.inserting_before(conv):
                replacement = gm.graph.call_module(name, conv.args, conv.kwargs)
            bn.replace_all_uses_with(replacement)
            gm.graph.erase_node(bn)
            gm.graph.erase_node(conv)
        gm.recompile()
        return PassResult(gm, bool(pairs))

    fold.__name__ = f"wrong_fold_{mistake}"
    return fold
