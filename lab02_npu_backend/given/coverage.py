"""Coverage bookkeeping: which nodes ran on the NPU, which fell back to CPU, and why.

The backend produces one :class:`GraphCoverage` per FX graph it compiles (Dynamo may hand it
several graphs when the model has graph breaks) and hands it to :func:`record`. A
:class:`PartitionReport` aggregates them: node counts, FLOPs, fallback reasons per op, partitions
and graph breaks. This is the lab's version of Torch-TensorRT's "N total operators, M supported"
summary and ExecuTorch's ``get_delegation_info`` table.

The counts are honest both ways. A node that does no work anywhere (eval-mode dropout, a ``.to``
that keeps the dtype, a view to the same shape, a tensor with no elements), or none per call (a
constant folded when the graph was compiled, optional step 7: :func:`with_folded`), is *elided*: it is
listed, with the reason, but it is outside the NPU fraction, so that identities cannot pad the NPU side.
Every node that does work (a multiply by 1 included) stays in the denominator.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

#: The dialects a graph can be in: Dynamo's torch-level graphs, or aten graphs from AOTAutograd.
DIALECTS = ("torch", "aten")


#: Where a backend that folds constants (optional step 7) lists what it folded: ``gm.meta[FOLDED_META]``,
#: ``(name, op)`` pairs.
FOLDED_META = "npu_folded"
#: Why a folded node is outside the NPU fraction (see :func:`with_folded`).
FOLDED_AT_COMPILE_TIME = "folded: computed once when the graph was compiled (it depends only on shapes and constants)"


class NpuCoverageWarning(UserWarning):
    """A graph full of compute ran with no node on the NPU: usually a support table of the wrong dialect."""


class NpuTrainingUnsupported(RuntimeError):
    """Raised by a backend that cannot give correct gradients, instead of returning wrong ones."""


@dataclass(frozen=True)
class NodeDecision:
    """Where one compute node of an FX graph runs.

    Attributes:
        name: the node's name in the graph.
        op: a readable name of its target (see :func:`lab02_npu_backend.given.graphs.target_name`).
        on_npu: True when the node is inside an NPU partition (not merely "supported").
        reason: why it falls back to CPU (``None`` when ``on_npu``).
        flops: floating-point operations of the node on the example inputs (0 when unknown).
        elided: why the node does no work anywhere (its result is one of its inputs, unchanged, or
            has no elements), or ``None`` when it does work. An elided node is reported but never
            counted: it is outside both the NPU and the CPU side of the fraction.
    """

    name: str
    op: str
    on_npu: bool
    reason: str | None = None
    flops: int = 0
    elided: str | None = None

    @property
    def does_work(self) -> bool:
        """Whether the node counts in coverage numbers (it is not elided)."""
        return self.elided is None


@dataclass(frozen=True)
class GraphCoverage:
    """The decisions for every compute node of one FX graph, and how many NPU partitions it became."""

    dialect: str
    decisions: tuple[NodeDecision, ...]
    num_partitions: int

    @property
    def work_nodes(self) -> int:
        """Nodes that do work: the denominator of the NPU fraction."""
        return sum(d.does_work for d in self.decisions)

    @property
    def npu_nodes(self) -> int:
        """Nodes that do work and run on the NPU (elided nodes never count)."""
        return sum(d.on_npu and d.does_work for d in self.decisions)

    @property
    def elided_nodes(self) -> int:
        return len(self.decisions) - self.work_nodes


def with_folded(coverage: GraphCoverage, folded: Sequence[tuple[str, str]]) -> GraphCoverage:
    """``coverage`` with a decision for each node folded before partitioning (``(name, op)`` pairs), first.

    A folded node did its work once, when the graph was compiled, and none per call: it is listed as
    elided (:data:`FOLDED_AT_COMPILE_TIME`), outside both sides of the NPU fraction, never hidden.
    """
    decisions = tuple(NodeDecision(name, op, on_npu=False, elided=FOLDED_AT_COMPILE_TIME) for name, op in folded)
    return replace(coverage, decisions=decisions + coverage.decisions)


@dataclass(frozen=True)
class GraphBreak:
    """One graph break Dynamo reported (``torch._dynamo.explain``)."""

    reason: str
    location: str = ""


@dataclass(frozen=True)
class OpCoverage:
    """Per-op totals: how many nodes of this op ran on the NPU, fell back, or were elided, and why."""

    op: str
    npu: int
    cpu: int
    reasons: tuple[str, ...]
    elided: int = 0
    elided_reasons: tuple[str, ...] = ()


@dataclass
class PartitionReport:
    """Coverage of a whole compiled model, aggregated over every graph Dynamo produced.

    ``total_nodes`` counts the compute nodes that do work; ``npu_nodes + cpu_nodes == total_nodes``
    and ``npu_fraction = npu_nodes / total_nodes``. ``elided_nodes`` (listed in ``elided``) do no
    work anywhere and are outside all three counts.
    """

    model: str
    dialect: str
    graphs: int
    total_nodes: int
    npu_nodes: int
    cpu_nodes: int
    npu_fraction: float
    npu_flop_fraction: float
    total_flops: int
    num_partitions: int
    by_op: dict[str, OpCoverage]
    fallbacks: list[NodeDecision] = field(default_factory=list)
    graph_breaks: list[GraphBreak] = field(default_factory=list)
    elided_nodes: int = 0
    elided: list[NodeDecision] = field(default_factory=list)

    @classmethod
    def from_graphs(
        cls,
        graphs: list[GraphCoverage],
        graph_breaks: list[GraphBreak] | None = None,
        *,
        model: str = "model",
    ) -> PartitionReport:
        """Aggregate per-graph coverage into one report.

        Raises:
            ValueError: when ``graphs`` is empty (nothing was compiled: the backend never ran).
        """
        if not graphs:
            raise ValueError("no compiled graphs to report on: did the backend run (and record its coverage)?")
        dialects = sorted({g.dialect for g in graphs})
        every = [d for g in graphs for d in g.decisions]
        decisions = [d for d in every if d.does_work]
        elided = [d for d in every if not d.does_work]
        npu = sum(d.on_npu for d in decisions)
        total_flops = sum(d.flops for d in decisions)
        npu_flops = sum(d.flops for d in decisions if d.on_npu)
        counts: dict[str, Counter] = {}
        reasons: dict[str, list[str]] = {}
        elided_reasons: dict[str, list[str]] = {}
        for d in every:
            where = "elided" if not d.does_work else "npu" if d.on_npu else "cpu"
            counts.setdefault(d.op, Counter())[where] += 1
            why, seen = (d.elided, elided_reasons) if where == "elided" else (d.reason, reasons)
            if why and why not in seen.setdefault(d.op, []):
                seen[d.op].append(why)
        by_op = {
            op: OpCoverage(
                op, c["npu"], c["cpu"], tuple(reasons.get(op, ())), c["elided"], tuple(elided_reasons.get(op, ()))
            )
            for op, c in sorted(counts.items(), key=lambda item: (-sum(item[1].values()), item[0]))
        }
        return cls(
            model=model,
            dialect="+".join(dialects),
            graphs=len(graphs),
            total_nodes=len(decisions),
            npu_nodes=npu,
            cpu_nodes=len(decisions) - npu,
            npu_fraction=npu / len(decisions) if decisions else 1.0,
            npu_flop_fraction=npu_flops / total_flops if total_flops else 1.0,
            total_flops=total_flops,
            num_partitions=sum(g.num_partitions for g in graphs),
            by_op=by_op,
            fallbacks=[d for d in decisions if not d.on_npu],
            graph_breaks=list(graph_breaks or []),
            elided_nodes=len(elided),
            elided=elided,
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (every field; ``by_op`` keyed by op name)."""
        data = asdict(self)
        data["by_op"] = {
            op: asdict(c) | {"reasons": list(c.reasons), "elided_reasons": list(c.elided_reasons)}
            for op, c in self.by_op.items()
        }
        return data

    def to_markdown(self) -> str:
        """A human-readable summary: totals, then one row per op, then fallbacks and graph breaks."""
        lines = [
            f"## NPU coverage: {self.model} ({self.dialect} graphs)",
            "",
            f"- compute nodes that do work: **{self.total_nodes}** in {self.graphs} graph(s), "
            f"{len(self.graph_breaks)} graph break(s)",
            f"- on NPU: **{self.npu_nodes}** ({self.npu_fraction:.1%} by node count, "
            f"{self.npu_flop_fraction:.1%} by FLOPs) in {self.num_partitions} partition(s)",
            f"- CPU fallback: **{self.cpu_nodes}**",
            f"- elided (no work anywhere, outside the fraction): **{self.elided_nodes}**",
            "",
            "| op | NPU | CPU | elided | fallback reason / why elided |",
            "| --- | ---: | ---: | ---: | --- |",
        ]
        for c in self.by_op.values():
            lines.append(f"| `{c.op}` | {c.npu} | {c.cpu} | {c.elided} | {'; '.join(c.reasons + c.elided_reasons)} |")
        if self.graph_breaks:
            lines += ["", "Graph breaks:"]
            lines += [f"- {b.reason}" + (f" ({b.location})" if b.location else "") for b in self.graph_breaks]
        return "\n".join(lines) + "\n"


_collectors: list[list[GraphCoverage]] = []


def record(coverage: GraphCoverage) -> None:
    """Hand one compiled graph's coverage to every active :func:`collect` block (no-op otherwise)."""
    for collected in _collectors:
        collected.append(coverage)


def collecting() -> bool:
    """Whether some :func:`collect` block is listening (the backend may skip costly FLOP counting otherwise)."""
    return bool(_collectors)


@contextlib.contextmanager
def collect() -> Iterator[list[GraphCoverage]]:
    """Collect the :class:`GraphCoverage` of every graph compiled inside the ``with`` block."""
    collected: list[GraphCoverage] = []
    _collectors.append(collected)
    try:
        yield collected
    finally:
        _collectors.remove(collected)
