"""Half-precision round trips in Inductor's graphs, and how to match patterns with or without them
(harness: do not edit).

Traced in float16, ``F.gelu(F.layer_norm(x))`` decomposes into LayerNorm computed in fp32, its
output rounded to fp16 (``convert_element_type``), and GELU converting it straight back to fp32::

    x16 -> fp32 -> [LayerNorm] -> fp16 -> fp32 -> [GELU] -> fp16
                                  ^^^^^^^^^^^^^ the round trip

Whether the model's graph still holds that round trip when a post-grad pass sees it depends on
the PyTorch release: Inductor's joint-graph pass ``pointless_convert`` folds it away on 2.11 (the
result is no longer rounded in between) and keeps it on 2.14 (a narrowing round trip changes the
result). A pattern traced with the round trip never matches a graph without it, and the other way
round. So half-precision patterns are registered in both forms: as traced, and traced with
:func:`fwd_only_folding_round_trips`, which folds the round trips out of the traced pattern exactly
as ``pointless_convert`` does to the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._inductor.pattern_matcher import fwd_only

_CONVERT = torch.ops.prims.convert_element_type.default


def fold_round_trips(graph: torch.fx.Graph) -> int:
    """Replace each ``convert(convert(a, narrower), dtype_of_a)`` by ``a``; return how many were folded.

    Nodes need ``meta["val"]`` (as traced graphs and Inductor's graphs have) to know the dtypes.
    """
    folded = 0
    for node in list(graph.nodes):
        inner = node.args[0] if node.target is _CONVERT else None
        if not (isinstance(inner, torch.fx.Node) and inner.target is _CONVERT):
            continue
        source = inner.args[0]
        source_val = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
        inner_val = inner.meta.get("val")
        if not (isinstance(source_val, torch.Tensor) and isinstance(inner_val, torch.Tensor)):
            continue
        narrowing = inner_val.dtype.itemsize < source_val.dtype.itemsize
        if narrowing and node.args[1] == source_val.dtype:
            node.replace_all_uses_with(source)
            graph.erase_node(node)
            if not inner.users:
                graph.erase_node(inner)
            folded += 1
    return folded


def fwd_only_folding_round_trips(fn: Callable, args: Sequence[Any], **kwargs: Any) -> torch.fx.GraphModule:
    """``fwd_only`` (how ``register_replacement`` traces patterns), then :func:`fold_round_trips` on the result.

    Pass it as ``register_replacement``'s ``trace_fn`` to register the folded form of a pattern.
    """
    graph_module = fwd_only(fn, args, **kwargs)
    if fold_round_trips(graph_module.graph):
        graph_module.recompile()
    return graph_module
