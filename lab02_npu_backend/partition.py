"""Partition: group the nodes the NPU supports into NPU subgraphs, leave the rest on CPU.

PyTorch's own ``CapabilityBasedPartitioner`` does the grouping: it merges supported nodes into as
few partitions as it can without creating a cycle (a partition that needs its own output through
a CPU node), then fuses each partition into a ``call_module`` of a sub-``GraphModule``. What it
does *not* do is tell you whether the result is any good: this module records, for every compute
node, where it ended up and why, and warns when a graph full of compute got no NPU node at all.

Nor does it see writes in place. Its edges are data only: ``x[:, 1:] = y`` (``operator.setitem``)
returns nothing, so no later reader of ``x`` depends on it (a setitem is not even a node with a
value: :func:`~lab02_npu_backend.given.graphs.compute_nodes` counts it because it copies elements), and
fusing puts each partition where its last node was. A partition holding a read of ``x`` from
before the write and a node from after it runs that read after the write: a silently wrong answer
(an encoder-decoder's shifted decoder input, embedded before it was shifted). This is the
partitioning twin of lab 1's single-user check: a node may move into a partition only when no other
reader can see the difference. :mod:`lab02_npu_backend.given.mutation` (given) finds every write, the
nodes whose value is the written tensor or a view of it, and whether anyone else can observe the
write (``private``).

Given (:mod:`lab02_npu_backend.given.partition_tools`): the result type :class:`NpuPartitioning`, the
submodule prefix :data:`NPU_SUBMODULE_PREFIX`, the predicate :data:`calls_only` and
:func:`retarget_tensor_indexing` (a PyTorch quirk, not the lesson).
"""

from __future__ import annotations

# These are the imports the finished module uses; the ones marked `noqa: F401` stay unused until
# you write your code.
import bisect  # noqa: F401
import operator  # noqa: F401
import warnings  # noqa: F401
from collections.abc import Sequence
from typing import Any

import torch  # noqa: F401
from torch import fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner, Partition  # noqa: F401
from torch.fx.passes.operator_support import OperatorSupportBase, chain, create_op_support  # noqa: F401

from lab02_npu_backend.given.coverage import GraphCoverage, NodeDecision, NpuCoverageWarning, collecting  # noqa: F401
from lab02_npu_backend.given.graphs import compute_nodes, graph_dialect, is_tuple_unpack, node_flops, target_name  # noqa: F401
from lab02_npu_backend.given.mutation import TensorWrite, find_tensor_writes  # noqa: F401
from lab02_npu_backend.given.partition_tools import (  # noqa: F401
    NPU_SUBMODULE_PREFIX,
    NpuPartitioning,
    calls_only,
    retarget_tensor_indexing,
)


def pin_cpu_writes(
    writes: Sequence[TensorWrite], reasons: dict[fx.Node, str | None], order: dict[fx.Node, int]
) -> dict[fx.Node, str]:
    """The nodes that writes in place keep on the CPU, each with its (fallback) reason.

    Args:
        writes: ``find_tensor_writes(gm)``.
        reasons: the support's fallback reason of every compute node (``None``: the NPU can run it).
        order: every node's position in the graph.

    Returns:
        node -> reason, for: every write that is not ``private`` (say that it writes in place, and
        ``shared_because``); and, for every write that runs on the CPU (not private, or private but
        unsupported), every call node among its ``aliases`` that comes before it: the written tensor
        must be a CPU tensor when the CPU writes it (on the NPU a view is a copy that misses the
        write, and an elided ``clone`` returns its very input). A private write the NPU can run needs
        nothing: out of place, nobody can tell the difference.
    """
    # TODO
    raise NotImplementedError("pin_cpu_writes")


def split_at_writes(
    partitions: Sequence[Partition], cpu_writes: Sequence[fx.Node], order: dict[fx.Node, int]
) -> list[Partition]:
    """Cut every partition at the writes that run on the CPU, so that no partition spans one.

    Returns new ``Partition(id=..., nodes=[...])`` objects: the nodes of each partition grouped by
    the stretch between two CPU writes they lie in (by ``order``). A tuple unpack
    (``is_tuple_unpack``) stays with the node it unpacks. Without CPU writes: the partitions as they are.
    Why it is enough: fusing puts a partition where its last node was, and PyTorch's stable
    topological sort keeps every node on its side of every write.
    """
    # TODO
    raise NotImplementedError("split_at_writes")


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
        Single-node partitions are allowed (``allows_single_node_partition``). The fused graph
        computes what ``gm`` computed: writes in place keep their order against every node (they
        and what they pin run on the CPU, and no partition spans a write that runs on the CPU).

    Warns:
        NpuCoverageWarning: the graph has compute nodes that do work (not elided) and none of them
            is on the NPU. The message
            must contain the word "dialect" and should say which dialect the table looks written for
            (aten tables have ``torch._ops.OpOverload`` keys) and which targets the graph has.
    """
    # guidance: begin
    # Steps:
    # 1. ask ``support`` about every compute node *before* changing the graph (its fallback reason
    #    and its elision reason); then ``find_tensor_writes(gm)`` and ``pin_cpu_writes``: a pinned
    #    node's reason replaces the support's;
    # 2. ``retarget_tensor_indexing(gm)``;
    # 3. ``CapabilityBasedPartitioner(gm, chain(calls_only, <your verdicts>), allows_single_node_partition=True)``,
    #    ``propose_partitions()``; then ``split_at_writes`` with the writes that are in no partition;
    #    a node is on the NPU when it is in some partition's ``nodes``;
    # 4. build the coverage, warn if nothing is on the NPU;
    # 5. ``fuse_partitions(partitions)`` (when there are any); the NPU submodules are the
    #    ``call_module`` nodes whose target starts with :data:`NPU_SUBMODULE_PREFIX`.
    # guidance: end
    # TODO: implement partition_for_npu.
    raise NotImplementedError("partition_for_npu")
