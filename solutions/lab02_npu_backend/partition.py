"""Partition: group the nodes the NPU supports into NPU subgraphs, leave the rest on CPU.

PyTorch's own ``CapabilityBasedPartitioner`` does the grouping: it merges supported nodes into as
few partitions as it can without creating a cycle (a partition that needs its own output through
a CPU node), then fuses each partition into a ``call_module`` of a sub-``GraphModule``. What it
does *not* do is tell you whether the result is any good: this module records, for every compute
node, where it ended up and why, and warns when a graph full of compute got no NPU node at all.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase, chain, create_op_support

from lab02_npu_backend.coverage import GraphCoverage, NodeDecision, NpuCoverageWarning, collecting
from lab02_npu_backend.graphs import compute_nodes, graph_dialect, is_tuple_unpack, node_flops, target_name

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


def partition_for_npu(
    gm: fx.GraphModule,
    support: OperatorSupportBase,
    *,
    example_inputs: Sequence[Any] | None = None,
    dialect: str | None = None,
) -> NpuPartitioning:
    """Split ``gm`` into NPU partitions (fused submodules) and CPU nodes.

    Args:
        gm: a Dynamo (torch-level) or AOTAutograd (aten) graph. It is modified in place.
        support: the predicate deciding which nodes the NPU can run (it should expose
            ``fallback_reason(node)``; other predicates get a generic reason).
        example_inputs: the graph's inputs, used only to count FLOPs while coverage is collected.
        dialect: recorded in the coverage (detected from the graph when omitted).

    Returns:
        The partitioned graph and its coverage. Single-node partitions are allowed: the NPU runs
        any supported op, even alone. Each decision carries the support's ``elision_reason`` (when
        it has one): nodes that do no work are listed but outside the NPU fraction.

    Warns:
        NpuCoverageWarning: the graph has compute nodes that do work and none of them landed on the NPU.
    """
    dialect = dialect or graph_dialect(gm)
    flops = node_flops(gm, example_inputs) if collecting() and example_inputs is not None else {}
    nodes = compute_nodes(gm)
    # Reasons must be asked for before fusing: fusing moves nodes into submodules.
    reason_of = getattr(support, "fallback_reason", None)
    reasons = {n: (reason_of(n) if reason_of else None) for n in nodes}
    elision_of = getattr(support, "elision_reason", None)
    elided = {n: (elision_of(n) if elision_of else None) for n in nodes}

    retarget_tensor_indexing(gm)
    # The partitioner asks again during partitioning: answer from the verdicts taken above. A tuple
    # unpack goes wherever its producer goes, so it never splits a partition in two.
    def verdict(submodules: Any, node: fx.Node) -> bool:
        source = node.args[0] if is_tuple_unpack(node) else node
        return source in reasons and reasons[source] is None

    decided = create_op_support(verdict)
    partitioner = CapabilityBasedPartitioner(gm, chain(_calls_only, decided), allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    placed = {node for partition in partitions for node in partition.nodes}
    decisions = []
    for node in nodes:
        on_npu = node in placed
        reason = None
        if not on_npu:
            reason = reasons[node] or (
                "supported, but the partitioner left it on CPU (for example a slice of a CPU tensor)"
            )
        decisions.append(
            NodeDecision(node.name, target_name(node), on_npu, reason, flops.get(node.name, 0), elided[node])
        )
    coverage = GraphCoverage(dialect, tuple(decisions), len(partitions))
    if coverage.work_nodes and coverage.npu_nodes == 0:
        _warn_no_npu_nodes(gm, support, dialect, [n for n in nodes if elided[n] is None])

    fused = partitioner.fuse_partitions(partitions) if partitions else gm
    submodules = [n.target for n in fused.graph.nodes if n.op == "call_module" and n.target.startswith(NPU_SUBMODULE_PREFIX)]
    return NpuPartitioning(fused, submodules, coverage)


def retarget_tensor_indexing(gm: fx.GraphModule) -> int:
    """Point tensor-indexing ``operator.getitem`` nodes at ``torch.Tensor.__getitem__`` (same meaning).

    ``CapabilityBasedPartitioner`` assumes that a node whose users are all ``getitem`` returns a
    tuple, and moves those getitems into the producer's partition, or to CPU when the producer is a
    placeholder. For ``x[:, :4]`` on a graph input that would silently move a supported slice to the
    CPU. Returns how many nodes were retargeted.
    """
    count = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is operator.getitem and not is_tuple_unpack(node):
            node.target = torch.Tensor.__getitem__
            count += 1
    if count:
        gm.recompile()
    return count


def _warn_no_npu_nodes(gm: fx.GraphModule, support: OperatorSupportBase, dialect: str, nodes: list[fx.Node]) -> None:
    table_dialect = _table_dialect(getattr(support, "table", None) or {})
    seen = sorted({target_name(n) for n in nodes})[:6]
    hint = ""
    if table_dialect and table_dialect != dialect:
        hint = f" The support table is written for {table_dialect} graphs but this graph is {dialect}-level."
    warnings.warn(
        NpuCoverageWarning(
            f"npu_simulator: 0 of {len(nodes)} compute nodes run on the NPU; everything falls back to CPU."
            f"{hint} Does the support table match the graph dialect? Targets in this graph: {', '.join(seen)}"
        ),
        stacklevel=3,
    )


def _table_dialect(table: Any) -> str | None:
    """``"aten"`` when every key (but ``getitem``) is an aten ``OpOverload``, ``"torch"`` otherwise."""
    targets = [t for t in table if t is not operator.getitem]
    if not targets:
        return None
    return "aten" if all(isinstance(t, torch._ops.OpOverload) for t in targets) else "torch"
