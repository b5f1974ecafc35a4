"""The ``npu_simulator`` torch.compile backend: classify, partition, lower, simulate.

A ``torch.compile`` backend is a function ``(GraphModule, example_inputs) -> callable``. Ours:

1. picks the support table of the graph's dialect (torch-level from Dynamo; aten through AOTAutograd),
   and (optional step 7) computes once what depends only on shapes and constants (:mod:`.folding`);
2. partitions the graph (:mod:`.partition`): NPU partitions become ``call_module`` submodules;
3. replaces each partition with an :class:`NpuPartition` that lowers it to an NPU program on first
   use for each input shape (:mod:`.lowering`) and runs it on the :class:`~.simulator.NpuSimulator`;
4. records the graph's coverage (:func:`lab02_npu_backend.given.coverage.record`) for reports.

Training: the simulator's outputs carry no autograd history, so a plain backend would return
tensors whose gradients are silently missing. When gradients are needed, go through AOTAutograd
instead: the NPU runs the (aten) forward graph, PyTorch's CPU kernels run the backward. (Or raise
``lab02_npu_backend.given.coverage.NpuTrainingUnsupported``: a clear refusal is allowed, wrong numbers never.)
"""

from __future__ import annotations

# These are the imports the finished module uses; the ones marked `noqa: F401` stay unused until
# you write your code.
from collections.abc import Callable, Sequence
from typing import Any

import torch  # noqa: F401
from torch import fx, nn
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

from lab02_npu_backend.given import coverage  # noqa: F401
from lab02_npu_backend.given.coverage import GraphBreak, PartitionReport  # noqa: F401

from .lowering import lower_to_program  # noqa: F401
from .partition import partition_for_npu  # noqa: F401
from .simulator import NpuSimulator
from .support import support_for_dialect  # noqa: F401

#: The name ``torch.compile(model, backend=...)`` knows the backend by.
BACKEND_NAME = "npu_simulator"


class NpuPartition(nn.Module):
    """Runs one NPU partition on the simulator, with one lowered program per input signature.

    Args:
        graph_module: the fused partition submodule (its placeholders are the partition's inputs;
            its output node returns one value or a tuple).
        simulator: the simulator to load programs into.
        name: the program name.
    """

    def __init__(self, graph_module: fx.GraphModule, simulator: NpuSimulator, name: str) -> None:
        super().__init__()
        self.graph_module = graph_module
        self.simulator = simulator
        self.program_name = name

    def forward(self, *args: Any) -> Any:
        """Look up (or lower and load) the program for these argument shapes/dtypes/values, run it
        on the tensor arguments, and return what the submodule would: one tensor or a tuple."""
        # TODO
        raise NotImplementedError("NpuPartition.forward")


def compile_graph(
    gm: fx.GraphModule, example_inputs: Sequence[Any], *, dialect: str = "torch", support: Any = None
) -> Callable[..., Any]:
    """Partition ``gm`` for the NPU (``support`` defaults to the dialect's table), replace every NPU
    submodule by an :class:`NpuPartition`, ``coverage.record`` the graph's coverage, return the graph.

    Optional step 7: first ``fold_shape_constants(gm)`` (:mod:`.folding`), and record
    ``coverage.with_folded(partitioned.coverage, gm.meta[FOLDED_META])``: the folded nodes are listed
    as elided, outside the NPU fraction. Leave it out until your folding passes its tests."""
    # TODO
    raise NotImplementedError("compile_graph")


def _compile_aten_graph(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    # AOTAutograd calls compiled graphs with one list argument ("boxed"), so it can free inputs early.
    return make_boxed_func(compile_graph(gm, example_inputs, dialect="aten"))


def _cpu_backward(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    return make_boxed_func(gm.forward)


#: The backend for aten graphs: AOTAutograd traces forward and backward; the NPU runs the forward.
npu_aot_backend = aot_autograd(fw_compiler=_compile_aten_graph, bw_compiler=_cpu_backward)


def npu_backend(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """The ``npu_simulator`` backend.

    Inference: :func:`compile_graph` on the torch-level graph. When gradients are needed (grad mode
    is on and some example input, e.g. a parameter, requires grad): :data:`npu_aot_backend`.
    """
    # TODO
    raise NotImplementedError("npu_backend")


def register_backend() -> Callable[..., Any]:
    """Register :func:`npu_backend` under :data:`BACKEND_NAME` and return the registered backend
    (``torch._dynamo.backends.registry.lookup_backend``).

    Idempotent: PyTorch raises on a name registered twice, and the name may already be taken by an
    earlier call or by the ``torch_dynamo_backends`` entry point in ``pyproject.toml``; keep the
    existing registration then.
    """
    # TODO
    raise NotImplementedError("register_backend")


def partition_report(
    model: Callable[..., Any], *example_inputs: Any, dialect: str = "torch", name: str | None = None
) -> PartitionReport:
    """Compile ``model`` with the backend (inference, under ``no_grad``) and report its NPU coverage.

    The report aggregates every graph Dynamo produced (``coverage.collect()``) and lists the graph
    breaks ``torch._dynamo.explain`` finds; ``dialect`` is ``"torch"`` (:func:`npu_backend`) or
    ``"aten"`` (:data:`npu_aot_backend`); ``name`` defaults to the model's class name.
    """
    # guidance: begin
    # Steps: torch._dynamo.explain(model)(*example_inputs) for graph breaks (break_reasons, each
    # with .reason; it also resets Dynamo's caches, so the next compile starts fresh); compile and
    # run model with npu_backend (dialect="torch") or npu_aot_backend ("aten") inside
    # coverage.collect(); then PartitionReport.from_graphs(graphs, [GraphBreak(...)],
    # model=name or type(model).__name__).
    # guidance: end
    # TODO
    raise NotImplementedError("partition_report")
