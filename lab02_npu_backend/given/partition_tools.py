"""What partitioning is given (harness: do not edit): the result type and two PyTorch workarounds.

:mod:`lab02_npu_backend.partition` (yours) decides where every node runs and fuses the NPU
partitions; this module holds what is given, once, for your code and the reference alike:

- :class:`NpuPartitioning`: what :func:`~lab02_npu_backend.partition.partition_for_npu` returns;
- :data:`NPU_SUBMODULE_PREFIX`: how the fused NPU submodules are named;
- :data:`calls_only`: the predicate that keeps placeholders and the output out of every partition;
- :func:`retarget_tensor_indexing`: a PyTorch quirk about ``getitem``, not the lesson.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
from torch import fx
from torch.fx.passes.operator_support import create_op_support

from lab02_npu_backend.given.coverage import GraphCoverage
from lab02_npu_backend.given.graphs import is_tuple_unpack

#: Name prefix ``CapabilityBasedPartitioner.fuse_partitions`` gives the fused NPU submodules.
NPU_SUBMODULE_PREFIX = "fused_"

#: Only calls may join a partition: a predicate that said yes to a placeholder or the output
#: would pull graph inputs into the partition and break the fused module.
calls_only = create_op_support(lambda submodules, node: node.op in ("call_function", "call_method"))


@dataclass
class NpuPartitioning:
    """The result of :func:`~lab02_npu_backend.partition.partition_for_npu`.

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

    ``CapabilityBasedPartitioner`` assumes that a node whose users are all ``getitem`` returns a
    tuple, and moves those getitems into the producer's partition, or to CPU when the producer is a
    placeholder. For ``x[:, :4]`` on a graph input that would silently move a supported slice to the
    CPU. Call this *after* classifying the nodes (the support table knows ``operator.getitem``; the
    lowering must then accept ``torch.Tensor.__getitem__`` too). Returns how many nodes were retargeted.
    """
    count = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is operator.getitem and not is_tuple_unpack(node):
            node.target = torch.Tensor.__getitem__
            count += 1
    if count:
        gm.recompile()
    return count
