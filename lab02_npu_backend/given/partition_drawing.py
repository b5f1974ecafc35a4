"""Pictures of partitioned graphs: where each node runs, in which NPU partition, and why the rest fall back.

``python -m lab02_npu_backend.given.report --model resnet18 --draw`` draws, for every graph the backend
receives, the graph as it arrived, with:

- each **NPU partition** (a fused submodule of ``partition_for_npu``) in a box of its own, its
  nodes filled in one of the partition colours, the box labelled with the submodule's name;
- each **CPU fallback** filled red and labelled with its fallback reason (the coverage report's);
- each **elided** node (it does no work anywhere: outside the NPU fraction) grey, with the reason;
- everything else (inputs, outputs, parameters, tuple unpacking) white.

The graphs are captured once more for the picture (:func:`lab02_npu_backend.given.graphs.capture_graphs`,
the graphs a backend receives in each dialect) and partitioned by the selected implementation's
``partition_for_npu`` with its ``support_for_dialect`` table, exactly as its ``compile_graph`` does,
on a copy: the picture shows the graph before partitioning, coloured by what partitioning decided.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import fx

from lab02_npu_backend.given.coverage import GraphCoverage, NpuCoverageWarning
from lab02_npu_backend.given.graphs import capture_graphs
from labkit.graph_drawing import Cluster, Drawing, NodeStyle, write_graph

#: Fills of the NPU partitions' nodes, in turn: shades of the NPU's green (neighbouring partitions differ).
NPU_FILLS = ("#a1d99b", "#c7e9c0", "#74c476", "#e5f5e0")
#: Border of an NPU partition's box.
NPU_BORDER = "#31a354"
CPU_FILL = "#fc9272"
ELIDED_FILL = "#d9d9d9"


@dataclass(frozen=True)
class PartitionedGraph:
    """One graph the backend received, and what partitioning decided for it.

    Attributes:
        dialect: ``"torch"`` or ``"aten"``.
        graph_module: the graph as the backend received it (not partitioned).
        partitions: NPU submodule name -> the names of the nodes it holds (in ``graph_module``).
        coverage: the partitioning's :class:`~lab02_npu_backend.given.coverage.GraphCoverage`.
        weights: the placeholders that bring the model's parameters and buffers (collapsed in pictures).
    """

    dialect: str
    graph_module: fx.GraphModule
    partitions: dict[str, tuple[str, ...]]
    coverage: GraphCoverage
    weights: frozenset[str] = frozenset()


def partition_graphs(lab: Any, model: Any, example_inputs: tuple[Any, ...], dialect: str) -> list[PartitionedGraph]:
    """Capture the graphs of ``model(*example_inputs)`` in ``dialect`` and partition a copy of each with ``lab``."""
    if dialect not in ("torch", "aten"):
        raise ValueError(f"unknown dialect {dialect!r}; expected 'torch' or 'aten'")
    torch._dynamo.reset()
    captured = capture_graphs(model, *example_inputs)
    graphs = (captured.torch, captured.torch_inputs) if dialect == "torch" else (captured.aten, captured.aten_inputs)
    results = []
    for gm, inputs in zip(*graphs):
        with warnings.catch_warnings():  # the report itself has already said it, once per graph
            warnings.simplefilter("ignore", NpuCoverageWarning)
            partitioning = lab.partition_for_npu(
                copy.deepcopy(gm), lab.support_for_dialect(dialect), example_inputs=inputs, dialect=dialect
            )
        names = {node.name for node in gm.graph.nodes}
        partitions = {}
        for submodule in partitioning.npu_submodules:
            inner = getattr(partitioning.graph_module, submodule).graph.nodes
            partitions[submodule] = tuple(
                n.name for n in inner if n.op not in ("placeholder", "output") and n.name in names
            )
        state = {id(tensor) for tensor in (*model.parameters(), *model.buffers())}
        placeholders = [node.name for node in gm.graph.nodes if node.op == "placeholder"]
        weights = frozenset(
            name
            for name, value in zip(placeholders, inputs)
            if isinstance(value, torch.nn.Parameter) or id(value) in state
        )
        results.append(PartitionedGraph(dialect, gm, partitions, partitioning.coverage, weights))
    return results


def partition_styles(graph: PartitionedGraph) -> dict[str, NodeStyle]:
    """Node name -> style: NPU nodes by partition, CPU fallbacks with their reason, elided nodes with theirs."""
    styles: dict[str, NodeStyle] = {}
    for index, (submodule, nodes) in enumerate(graph.partitions.items()):
        for name in nodes:
            styles[name] = NodeStyle(fill=NPU_FILLS[index % len(NPU_FILLS)], border=NPU_BORDER)
    for decision in graph.coverage.decisions:
        if decision.elided is not None:
            where = "NPU" if decision.on_npu else "CPU"
            styles[decision.name] = NodeStyle(fill=ELIDED_FILL, note=f"elided ({where}): {decision.elided}")
        elif not decision.on_npu:
            styles[decision.name] = NodeStyle(fill=CPU_FILL, note=f"CPU: {decision.reason}", bold=True)
    return styles


LEGEND = (
    *(
        (
            f"NPU: one box per partition (fused submodule); shade {index + 1} of {len(NPU_FILLS)}, in turn",
            NodeStyle(fill=fill, border=NPU_BORDER),
        )
        for index, fill in enumerate(NPU_FILLS)
    ),
    ("CPU fallback: the reason is in the node", NodeStyle(fill=CPU_FILL, bold=True)),
    ("elided: does no work anywhere, outside the NPU fraction", NodeStyle(fill=ELIDED_FILL)),
    ("not a compute node (inputs, parameters, outputs)", NodeStyle()),
)


def draw_partitioned(graph: PartitionedGraph, title: str, stem: Path) -> Drawing:
    """Draw one partitioned graph (:func:`partition_styles`, a box per NPU partition) to ``stem.*``."""
    coverage = graph.coverage
    title = (
        f"{title}: {coverage.npu_nodes}/{coverage.work_nodes} nodes that do work on the NPU, "
        f"{len(graph.partitions)} NPU partition(s), {coverage.work_nodes - coverage.npu_nodes} CPU fallback(s)"
    )
    clusters = [
        Cluster(f"NPU partition {name} ({len(nodes)} nodes)", nodes, NPU_BORDER)
        for name, nodes in graph.partitions.items()
        if nodes
    ]
    return write_graph(
        graph.graph_module,
        title,
        stem,
        styles=partition_styles(graph),
        clusters=clusters,
        legend=LEGEND,
        weights=graph.weights,
    )


def draw_model(
    lab: Any, name: str, model: Any, example_inputs: tuple[Any, ...], dialect: str, out: Path
) -> list[Drawing]:
    """Draw every graph of ``model`` in ``dialect``: ``out/partitions-<name>-<dialect>[-graph<i>].*``."""
    graphs = partition_graphs(lab, model, example_inputs, dialect)
    drawings = []
    for index, graph in enumerate(graphs):
        suffix = f"-graph{index}" if len(graphs) > 1 else ""
        title = f"{name}, {dialect} graph" + (f" {index} of {len(graphs)}" if len(graphs) > 1 else "")
        drawings.append(draw_partitioned(graph, title, out / f"partitions-{name}-{dialect}{suffix}"))
    return drawings
