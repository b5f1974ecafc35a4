"""Partition: group the nodes the NPU supports into NPU subgraphs, leave the rest on CPU.

PyTorch's own ``CapabilityBasedPartitioner`` does the grouping: it merges supported nodes into as
few partitions as it can without creating a cycle (a partition that needs its own output through
a CPU node), then fuses each partition into a ``call_module`` of a sub-``GraphModule``. What it
does *not* do is tell you whether the result is any good: this module records, for every compute
node, where it ended up and why, and warns when a graph full of compute got no NPU node at all.

Nor does it see writes in place. Its edges are data only: ``x[:, 1:] = y`` returns nothing, so no
later reader of ``x`` depends on it, and fusing moves every partition to the place of its last
node. A partition that holds a read of ``x`` from before the write and a node from after it would
run that read after the write: a silently wrong answer. So the writes of a graph pin what touches
them (the partitioning twin of lab 1's single-user check: a node joins a partition only when no
other reader can see the difference):

1. a *shared* write (one that someone else can observe, :mod:`lab02_npu_backend.given.mutation`) runs on
   the CPU, and so does every node whose value is the written tensor (or a view of it) before the
   write: on the NPU a view is a copy, and a copy does not see a later write;
2. no partition spans a write that runs on the CPU: the partitioner's proposals are cut there, so
   every read stays on its side of every write.

A *private* write (``F.relu(x, inplace=True)`` on a fresh intermediate nobody reads again) is an
ordinary op: the NPU runs it out of place.
"""

from __future__ import annotations

import bisect
import operator
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner, Partition
from torch.fx.passes.operator_support import OperatorSupportBase, chain, create_op_support

from lab02_npu_backend.given.coverage import GraphCoverage, NodeDecision, NpuCoverageWarning, collecting
from lab02_npu_backend.given.graphs import compute_nodes, graph_dialect, is_tuple_unpack, node_flops, target_name
from lab02_npu_backend.given.mutation import TensorWrite, find_tensor_writes
from lab02_npu_backend.given.partition_tools import (
    NPU_SUBMODULE_PREFIX,
    NpuPartitioning,
    calls_only,
    retarget_tensor_indexing,
)


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
        it has one): nodes that do no work are listed but outside the NPU fraction. Writes in place
        keep their order against every node (see the module docstring): the fused graph computes
        what ``gm`` computed.

    Warns:
        NpuCoverageWarning: the graph has compute nodes that do work and none of them landed on the NPU.
    """
    dialect = dialect or graph_dialect(gm)
    flops = node_flops(gm, example_inputs) if collecting() and example_inputs is not None else {}
    nodes = compute_nodes(gm)
    order = {node: index for index, node in enumerate(gm.graph.nodes)}
    # Reasons must be asked for before fusing: fusing moves nodes into submodules.
    reason_of = getattr(support, "fallback_reason", None)
    reasons = {n: (reason_of(n) if reason_of else None) for n in nodes}
    writes = find_tensor_writes(gm)
    reasons |= pin_cpu_writes(writes, reasons, order)
    elision_of = getattr(support, "elision_reason", None)
    elided = {n: (elision_of(n) if elision_of else None) for n in nodes}

    retarget_tensor_indexing(gm)

    # The partitioner asks again during partitioning: answer from the verdicts taken above. A tuple
    # unpack goes wherever its producer goes, so it never splits a partition in two.
    def verdict(submodules: Any, node: fx.Node) -> bool:
        source = node.args[0] if is_tuple_unpack(node) else node
        return source in reasons and reasons[source] is None

    decided = create_op_support(verdict)
    partitioner = CapabilityBasedPartitioner(gm, chain(calls_only, decided), allows_single_node_partition=True)
    proposed = partitioner.propose_partitions()
    placed = {node for partition in proposed for node in partition.nodes}
    partitions = split_at_writes(proposed, [write.node for write in writes if write.node not in placed], order)
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
    submodules = [
        n.target for n in fused.graph.nodes if n.op == "call_module" and n.target.startswith(NPU_SUBMODULE_PREFIX)
    ]
    return NpuPartitioning(fused, submodules, coverage)


def pin_cpu_writes(
    writes: Sequence[TensorWrite], reasons: dict[fx.Node, str | None], order: dict[fx.Node, int]
) -> dict[fx.Node, str]:
    """The nodes that writes in place keep on the CPU, each with its reason.

    A write runs on the CPU when it is shared, or when it is private but the NPU cannot run it
    (``reasons``, the support's verdicts, says so). A write on the CPU writes into a CPU tensor:
    every node whose value is the written tensor (or a view of it) before the write stays on the
    CPU too. (On the NPU a view is a copy that would miss the write, and an NPU result may even be
    its input itself: an elided ``clone``.)
    """
    pinned: dict[fx.Node, str] = {}
    for write in writes:
        if write.private and write.node not in pinned and reasons.get(write.node) is None:
            continue  # the NPU runs it out of place: nobody can tell the difference
        if not write.private:
            pinned.setdefault(
                write.node,
                f"writes {write.written.name} in place ({write.shared_because}): "
                "a write runs on the CPU, in program order",
            )
        for alias in write.aliases:
            if order[alias] < order[write.node] and alias.op in ("call_function", "call_method"):
                pinned.setdefault(
                    alias,
                    f"holds the tensor that {write.node.name} writes in place later, on the CPU: "
                    "it stays on the CPU before the write",
                )
    return pinned


def split_at_writes(
    partitions: Sequence[Partition], cpu_writes: Sequence[fx.Node], order: dict[fx.Node, int]
) -> list[Partition]:
    """Cut every partition at the writes that run on the CPU, so that no partition spans one.

    Fusing puts a partition where its last node was; a partition wholly on one side of every write
    keeps every read of a written tensor on the side of the write it was on. A tuple unpack stays
    with the node it unpacks.
    """
    cuts = sorted(order[node] for node in cpu_writes)
    if not cuts:
        return list(partitions)
    pieces: dict[tuple[int, int], list[fx.Node]] = {}
    for index, partition in enumerate(partitions):
        for node in partition.nodes:
            source = node.args[0] if is_tuple_unpack(node) else node
            pieces.setdefault((index, bisect.bisect(cuts, order[source])), []).append(node)
    return [Partition(id=i, nodes=nodes) for i, nodes in enumerate(pieces.values())]


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
