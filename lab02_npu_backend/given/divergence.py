"""Where does a compiled graph first differ from the graph it came from? (provided, not an exercise)

When a model compiled with the backend does not match eager, the output alone says nothing about
where it went wrong. :func:`first_divergence` runs the original graph and the compiled one (NPU
partitions on the simulator) side by side on the same inputs, records every node's value *when it
is computed* (a write in place changes a tensor later; the record keeps what it was), and names
the first node of the original graph, in its order, whose value differs:

- on the CPU: the node, and whether every NPU partition still matches its own CPU subgraph (if they
  all do, nothing was lowered wrongly: the fused graph runs something in a different order);
- in an NPU partition: the partition, and the first node of that partition whose lowered value
  differs from the partition's CPU subgraph run on the same inputs (the partition is lowered once
  more, returning every intermediate value).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch.utils._pytree import tree_flatten

from lab02_npu_backend.given.graphs import target_name
from labkit.numerics import output_error

#: A node's value differs when ``max |got - want| > RELATIVE_TOLERANCE * max(|want|, ABSOLUTE_FLOOR)``.
RELATIVE_TOLERANCE = 1e-4
ABSOLUTE_FLOOR = 1e-2


@dataclass(frozen=True)
class Divergence:
    """The first node whose value differs, and what that points to.

    Attributes:
        node: the node's name in the original graph.
        where: ``"CPU"`` or the NPU partition's submodule name.
        max_abs: how far its value is from the original graph's.
        explanation: one paragraph a student can act on.
    """

    node: str
    where: str
    max_abs: float
    explanation: str

    def describe(self) -> str:
        return f"first node to differ: {self.node} ({self.where}), max abs {self.max_abs:.3g}. {self.explanation}"


def _snapshot(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_snapshot(v) for v in value)
    return value


def _differs(got: Any, want: Any) -> float | None:
    """The max abs error when ``got`` differs from ``want`` beyond the tolerance, else None."""
    try:
        error = output_error(got, want)
    except ValueError:  # a shape, dtype or structure changed
        return float("inf")
    tensors = [t for t in tree_flatten(want)[0] if isinstance(t, torch.Tensor)]
    magnitudes = [t.detach().abs().max().item() for t in tensors if t.numel() and t.is_floating_point()]
    scale = max([ABSOLUTE_FLOOR, *magnitudes])
    exact = not magnitudes
    return error.max_abs if (error.max_abs > 0 if exact else error.max_abs > RELATIVE_TOLERANCE * scale) else None


class _Recorder(fx.Interpreter):
    """Runs a graph and keeps a snapshot of every node's value, by node name."""

    def __init__(self, gm: fx.GraphModule) -> None:
        super().__init__(gm, garbage_collect_values=False)
        self.values: dict[str, Any] = {}
        self.partitions: dict[str, tuple[Any, tuple[Any, ...]]] = {}  # submodule -> (module, inputs)

    def run_node(self, n: fx.Node) -> Any:
        if n.op == "call_module" and hasattr(self.fetch_attr(n.target), "graph_module"):
            args = _snapshot(tuple(self.map_nodes_to_values(n.args, n)))
        result = super().run_node(n)
        if n.op == "call_module" and hasattr(self.fetch_attr(n.target), "graph_module"):
            module = self.fetch_attr(n.target)
            self.partitions[n.target] = (module, args)
            outputs = result if isinstance(result, (tuple, list)) else (result,)
            for name, value in zip(_output_names(module.graph_module), outputs):
                self.values[name] = _snapshot(value)
        elif n.op not in ("placeholder", "output"):
            self.values[n.name] = _snapshot(result)
        return result


def _output_names(gm: fx.GraphModule) -> list[str]:
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    values = output.args[0] if isinstance(output.args[0], (tuple, list)) else (output.args[0],)
    return [v.name if isinstance(v, fx.Node) else repr(v) for v in values]


def first_divergence(
    lab: Any, original: fx.GraphModule, compiled: fx.GraphModule, inputs: Sequence[Any]
) -> Divergence | None:
    """The first node of ``original`` whose value ``compiled`` computes differently, or None.

    Args:
        lab: the lab's public API (``lower_to_program`` and ``NpuSimulator`` re-run a partition).
        original: the graph the backend received (it is run on a copy of ``inputs``).
        compiled: what the backend returned for it: NPU partitions are submodules with a
            ``graph_module`` attribute (:class:`NpuPartition`), every other node is the original's.
        inputs: the graph's example inputs.
    """
    want = _Recorder(original)
    want.run(*_snapshot(tuple(inputs)))
    got = _Recorder(compiled)
    got.run(*_snapshot(tuple(inputs)))
    own = {name: _partition_error(*entry) for name, entry in got.partitions.items()}
    owner = {n: name for name, (module, _) in got.partitions.items() for n in _output_names(module.graph_module)}
    for node in original.graph.nodes:
        if node.name not in want.values or node.name not in got.values:
            continue
        error = _differs(got.values[node.name], want.values[node.name])
        if error is None:
            continue
        label = f"{node.name} ({target_name(node)})"
        if node.name in owner:
            name = owner[node.name]
            return Divergence(
                label, f"NPU partition {name}", error, _explain_partition(lab, name, *got.partitions[name], own[name])
            )
        wrong = {name: e for name, e in own.items() if e is not None}
        if wrong:
            explanation = (
                f"NPU partitions that differ from their own CPU subgraph on the same inputs: "
                f"{', '.join(f'{k} (max abs {v:.3g})' for k, v in wrong.items())}."
            )
        else:
            explanation = (
                f"Every NPU partition ({len(own)}) matches its own CPU subgraph on the same inputs: nothing "
                "was lowered wrongly; the fused graph computes in another order (a read moved across a "
                "write in place?)."
            )
        return Divergence(label, "CPU", error, explanation)
    return None


def _partition_error(module: Any, args: tuple[Any, ...]) -> float | None:
    """How far the partition's NPU result is from its own CPU subgraph's, on the inputs it got (None: not at all)."""
    return _differs(module(*_snapshot(args)), module.graph_module(*_snapshot(args)))


def _explain_partition(lab: Any, name: str, module: Any, args: tuple[Any, ...], error: float | None) -> str:
    if error is None:
        return (
            f"{name} matches its own CPU subgraph on the inputs it got: its inputs were already different "
            "(an earlier CPU node, or the order of the fused graph)."
        )
    inner = _first_wrong_lowered_node(lab, module.graph_module, args)
    where = f" The first node of {name} whose lowered value differs: {inner}." if inner else ""
    return f"{name} differs from its own CPU subgraph on the same inputs (max abs {error:.3g}): a lowering bug.{where}"


def _first_wrong_lowered_node(lab: Any, gm: fx.GraphModule, args: tuple[Any, ...]) -> str | None:
    """Lower the partition once more with every tensor-valued node as an output; compare each with the CPU subgraph.

    (Returning intermediate values can change what a lowering fuses, e.g. an RMSNorm chain: then no
    single node is found.)
    """
    want = _Recorder(gm)
    want.run(*_snapshot(args))
    probe = copy.deepcopy(gm)
    named = [
        n
        for n in probe.graph.nodes
        if n.op in ("call_function", "call_method") and isinstance(want.values.get(n.name), torch.Tensor)
    ]
    output = next(n for n in reversed(probe.graph.nodes) if n.op == "output")
    output.args = (tuple(named),)
    probe.recompile()
    try:
        program = lab.lower_to_program(probe, list(args), name="diagnosis")
        results = lab.NpuSimulator().run(program, [a for a in args if isinstance(a, torch.Tensor)])
    except Exception as error:  # noqa: BLE001 - a diagnosis must not hide the failure it explains
        return f"(not isolated: lowering every intermediate value failed: {type(error).__name__}: {error})"
    for node, value in zip(named, results):
        if _differs(value, want.values[node.name]) is not None:
            return f"{node.name} ({target_name(node)})"
    return None


def diagnose_model(lab: Any, model: Any, inputs: Sequence[Any], dialect: str) -> str:
    """For a model whose compiled output differs from eager: capture its graph of ``dialect``, compile it
    with the lab's ``compile_graph`` and say where it first differs (one line, for a failure message)."""
    from lab02_npu_backend.given.graphs import capture_graphs

    torch._dynamo.reset()
    captured = capture_graphs(model, *inputs)
    graphs = {"torch": (captured.torch, captured.torch_inputs), "aten": (captured.aten, captured.aten_inputs)}[dialect]
    lines = []
    for index, (gm, graph_inputs) in enumerate(zip(*graphs)):
        compiled = lab.compile_graph(copy.deepcopy(gm), graph_inputs, dialect=dialect)
        divergence = first_divergence(lab, gm, compiled, graph_inputs)
        if divergence is not None:
            lines.append(f"graph {index} ({dialect}): {divergence.describe()}")
    return "\n".join(lines) or "(no node of the captured graphs differs beyond the tolerance when compiled alone)"
