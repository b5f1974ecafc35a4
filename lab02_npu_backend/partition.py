"""Partition: group the nodes the NPU supports into NPU subgraphs, leave the rest on CPU.

PyTorch's own ``CapabilityBasedPartitioner`` does the grouping: it merges supported nodes into as
few partitions as it can without creating a cycle (a partition that needs its own output through
a CPU node), then fuses each partition into a ``call_module`` of a sub-``GraphModule``. What it
does *not* do is tell you whether the result is any good: this module records, for every compute
node, where it ended up and why, and warns when a graph full of compute got no NPU node at all.
"""

from __future__ import annotations

# These are the imports the finished module uses; the ones marked `noqa: F401` stay unused until
# you write your code.

import operator
import warnings  # noqa: F401
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner  # noqa: F401
from torch.fx.passes.operator_support import OperatorSupportBase, chain, create_op_support  # noqa: F401

from lab02_npu_backend.coverage import GraphCoverage, NodeDecision, NpuCoverageWarning, collecting  # noqa: F401
from lab02_npu_backend.graphs import compute_nodes, graph_dialect, is_tuple_unpack, node_flops, target_name  # noqa: F401

#: Name prefix ``CapabilityBasedPartitioner.fuse_partitions`` gives the fused NPU submodules.
NPU_SUBMODULE_PREFIX = "fused_"

#: Only calls may join a partition: a predicate that said yes to a placeholder or the output
#: would pull graph inputs into the partition and break the fused module.
_calls_only = create_op_support(lambda submodules, node: node.op in ("call_function", "call_method"))


@dataclass
class NpuPartitioning:
    """The result of :func:`partition_for_npu`.

    Attributes:
        graph_module: the graph with every NPU partition fused into a ``call_module`` submodule.
        npu_submodules: names of those submodules (attributes of ``graph_module``).
        coverage: where every compute node of the *original* graph runs, and why.
    """

    graph_module: fx.GraphModule
    npu_submodules: list[str]
    coverage: GraphCoverage


def retarget_tensor_indexing(gm: fx.GraphModule) -> int:
    """Point tensor-indexing ``operator.getitem`` nodes at ``torch.Tensor.__getitem__`` (same meaning).

    (Given: a PyTorch quirk, not the lesson.) ``CapabilityBasedPartitioner`` assumes that a node whose
    users are all ``getitem`` returns a tuple, and moves those getitems into the producer's partition,
    or to CPU when the producer is a placeholder. For ``x[:, :4]`` on a graph input that would
    silently move a supported slice to the CPU. Call this *after* classifying the nodes (the support
    table knows ``operator.getitem``; your lowering must then accept ``torch.Tensor.__getitem__`` too).
    Returns how many nodes were retargeted.
    """
    count = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is operator.getitem and not is_tuple_unpack(node):
            node.target = torch.Tensor.__getitem__
            count += 1
    if count:
        gm.recompile()
    return count


def partition_for_npu(
    gm: fx.GraphModule,
    support: OperatorSupportBase,
    *,
    example_inputs: Sequence[Any] | None = None,
    dialect: str | None = None,
) -> NpuPartitioning:
    """Split ``gm`` into NPU partitions (fused submodules) and CPU nodes.

    Args:
        gm: a Dynamo (torch-level) or AOTAutograd (aten) graph. It may be modified in place.
        support: the predicate deciding which nodes the NPU can run (an ``NpuOperatorSupport``
            exposes ``fallback_reason(node)``; for other predicates use a generic reason).
        example_inputs: the graph's inputs, used only to count FLOPs (``node_flops``) while
            coverage is being collected (``collecting()``): counting costs a trace.
        dialect: recorded in the coverage (``graph_dialect(gm)`` when omitted).

    Returns:
        ``NpuPartitioning``: the fused graph, the names of its NPU submodules, and a
        ``GraphCoverage`` with one ``NodeDecision`` per compute node (``compute_nodes(gm)``, in graph
        order, named as in the original graph, ``op=target_name(node)``). ``on_npu`` means "inside an
        NPU partition", not merely "supported": a supported node the partitioner left out is on CPU
        and needs a reason too. ``elided`` is the support's ``elision_reason(node)`` (``None`` for
        predicates without one): a node that does no work is listed, but outside the NPU fraction.
        Single-node partitions are allowed (``allows_single_node_partition``).

    Warns:
        NpuCoverageWarning: the graph has compute nodes that do work (not elided) and none of them
            is on the NPU. The message
            must contain the word "dialect" and should say which dialect the table looks written for
            (aten tables have ``torch._ops.OpOverload`` keys) and which targets the graph has.

    Steps:
        1. ask ``support`` about every compute node *before* changing the graph (its fallback reason
           and its elision reason);
        2. ``retarget_tensor_indexing(gm)``;
        3. ``CapabilityBasedPartitioner(gm, chain(_calls_only, <your verdicts>), allows_single_node_partition=True)``,
           ``propose_partitions()``; a node is on the NPU when it is in some partition's ``nodes``;
        4. build the coverage, warn if nothing is on the NPU;
        5. ``fuse_partitions(partitions)`` (when there are any); the NPU submodules are the
           ``call_module`` nodes whose target starts with :data:`NPU_SUBMODULE_PREFIX`.
    """
    # TODO: implement the steps above.
    raise NotImplementedError("partition_for_npu")
