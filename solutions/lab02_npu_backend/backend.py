"""The ``npu_simulator`` torch.compile backend: classify, partition, lower, simulate.

A ``torch.compile`` backend is a function ``(GraphModule, example_inputs) -> callable``. Ours:

1. picks the support table of the graph's dialect (torch-level from Dynamo; aten through AOTAutograd),
   and computes once what depends only on shapes and constants (:mod:`.folding`, optional step 7);
2. partitions the graph (:mod:`.partition`): NPU partitions become ``call_module`` submodules;
3. replaces each partition with an :class:`NpuPartition` that lowers it to an NPU program on first
   use for each input shape (:mod:`.lowering`) and runs it on the :class:`~.simulator.NpuSimulator`;
4. records the graph's coverage (:func:`lab02_npu_backend.given.coverage.record`) for reports, the
   folded nodes listed as elided (:func:`~lab02_npu_backend.given.coverage.with_folded`).

Training: the simulator's outputs carry no autograd history, so a plain backend would return
tensors whose gradients are silently missing. When gradients are needed the backend goes through
AOTAutograd instead: the NPU runs the (aten) forward graph, PyTorch's CPU kernels run the backward.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx, nn
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

from lab02_npu_backend.given import coverage
from lab02_npu_backend.given.coverage import FOLDED_META, GraphBreak, PartitionReport, with_folded

from .folding import fold_shape_constants
from .lowering import lower_to_program
from .partition import partition_for_npu
from .simulator import LoadedProgram, NpuSimulator
from .support import support_for_dialect

#: The name ``torch.compile(model, backend=...)`` knows the backend by.
BACKEND_NAME = "npu_simulator"


class NpuPartition(nn.Module):
    """Runs one NPU partition on the simulator, with one lowered program per input signature."""

    def __init__(self, graph_module: fx.GraphModule, simulator: NpuSimulator, name: str) -> None:
        super().__init__()
        self.graph_module = graph_module
        self.simulator = simulator
        self.program_name = name
        self.programs: dict[tuple, LoadedProgram] = {}
        output = next(n for n in reversed(graph_module.graph.nodes) if n.op == "output")
        self._returns_tuple = isinstance(output.args[0], (tuple, list))

    def forward(self, *args: Any) -> Any:
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args)
        loaded = self.programs.get(key)
        if loaded is None:
            program = lower_to_program(self.graph_module, args, name=self.program_name)
            loaded = self.programs[key] = self.simulator.load(program)
        outputs = loaded(*(a for a in args if isinstance(a, torch.Tensor)))
        return tuple(outputs) if self._returns_tuple else outputs[0]


@functools.cache
def _simulator() -> NpuSimulator:
    return NpuSimulator()


def compile_graph(
    gm: fx.GraphModule, example_inputs: Sequence[Any], *, dialect: str = "torch", support: Any = None
) -> Callable[..., Any]:
    """Partition ``gm`` for the NPU and return it with every NPU partition running on the simulator."""
    support = support if support is not None else support_for_dialect(dialect)
    fold_shape_constants(gm)  # optional step 7: what depends only on shapes and constants, computed once
    partitioned = partition_for_npu(gm, support, example_inputs=example_inputs, dialect=dialect)
    fused = partitioned.graph_module
    for name in partitioned.npu_submodules:
        setattr(fused, name, NpuPartition(getattr(fused, name), _simulator(), name))
    coverage.record(with_folded(partitioned.coverage, gm.meta.get(FOLDED_META, [])))
    return fused


def _compile_aten_graph(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    # AOTAutograd calls compiled graphs with one list argument ("boxed"), so it can free inputs early.
    return make_boxed_func(compile_graph(gm, example_inputs, dialect="aten"))


def _cpu_backward(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    return make_boxed_func(gm.forward)


#: The backend for aten graphs: AOTAutograd traces forward and backward; the NPU runs the forward.
npu_aot_backend = aot_autograd(fw_compiler=_compile_aten_graph, bw_compiler=_cpu_backward)


def _needs_autograd(example_inputs: Sequence[Any]) -> bool:
    return torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs)


def npu_backend(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """The ``npu_simulator`` backend: torch-level graphs for inference, AOTAutograd when gradients are needed."""
    if _needs_autograd(example_inputs):
        return npu_aot_backend(gm, example_inputs)
    return compile_graph(gm, example_inputs, dialect="torch")


def register_backend() -> Callable[..., Any]:
    """Register :func:`npu_backend` as ``"npu_simulator"`` (idempotent) and return the registered backend.

    The name may already be taken: by an earlier call, or by the ``torch_dynamo_backends`` entry
    point the course's ``pyproject.toml`` declares (it dispatches to the selected implementation).
    Registering a taken name raises in PyTorch, so an existing registration is kept.
    """
    from torch._dynamo.backends import registry

    try:
        torch._dynamo.register_backend(npu_backend, name=BACKEND_NAME)
    except AssertionError as error:  # "duplicate name": already registered
        if "duplicate" not in str(error):
            raise
    return registry.lookup_backend(BACKEND_NAME)


def partition_report(
    model: Callable[..., Any], *example_inputs: Any, dialect: str = "torch", name: str | None = None
) -> PartitionReport:
    """Compile ``model`` with the backend (inference, ``no_grad``) and report its NPU coverage.

    Aggregates over every graph Dynamo produced, and lists graph breaks from ``torch._dynamo.explain``
    (which resets Dynamo's caches, so the compile below starts fresh and records every graph).

    Args:
        dialect: ``"torch"`` (plain backend) or ``"aten"`` (through AOTAutograd).
        name: the model's name in the report (default: its class name).
    """
    if dialect not in ("torch", "aten"):
        raise ValueError(f"unknown dialect {dialect!r}; expected 'torch' or 'aten'")
    with torch.no_grad():
        explanation = torch._dynamo.explain(model)(*example_inputs)
    breaks = [GraphBreak(str(reason.reason), _location(reason)) for reason in explanation.break_reasons]
    backend = npu_backend if dialect == "torch" else npu_aot_backend
    with coverage.collect() as graphs, torch.no_grad():
        torch.compile(model, backend=backend)(*example_inputs)
    return PartitionReport.from_graphs(graphs, breaks, model=name or type(model).__name__)


def _location(reason: Any) -> str:
    stack = getattr(reason, "user_stack", None) or []
    if not stack:
        return ""
    frame = stack[-1]
    return f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}"
