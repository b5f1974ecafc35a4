"""Facts about FX graphs that every part of the lab agrees on.

- :func:`target_name`: a readable name for a node's target, used in reports and error messages.
- :func:`node_value` (from :mod:`labkit.fx_nodes`): the example value (a FakeTensor, or a tuple of
  them) Dynamo or AOTAutograd recorded for a node, to read shapes and dtypes without running anything.
- :func:`is_compute_node`: which nodes count in coverage numbers. Placeholders, outputs, and
  bookkeeping (``getitem`` that unpacks a tuple, size arithmetic on ints) are not compute; a write
  in place is, even when it returns nothing (``x[:, 1:] = y``).
- :func:`graph_dialect`: is a graph torch-level (Dynamo) or aten (AOTAutograd, ``make_fx``)?
- :func:`node_flops`: floating-point operations per node (:mod:`lab02_npu_backend.given.flops`: every op
  that does arithmetic counts), while the graph runs on fake tensors (nothing is computed).
- :func:`capture_graphs`: the graphs a backend receives for a model, in both dialects, from one trace.
- :func:`fake_node_values`: every node's output value on fake tensors of given input shapes.
- :func:`node_arg`, :func:`is_number`, :func:`tensors_in`: reading a node's arguments and values
  (an argument given by position or by keyword, a constant number, the tensors inside a value).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx

from lab02_npu_backend.given.flops import FlopCount
from lab02_npu_backend.given.mutation import writes_in_place
from labkit.fx_nodes import node_value

CALL_OPS = ("call_function", "call_method", "call_module")


def target_name(node: fx.Node) -> str:
    """A short readable name: ``linear``, ``aten.addmm.default``, ``Tensor.view``, ``getitem``."""
    target = node.target
    if node.op == "call_method":
        return f"Tensor.{target}"
    if node.op == "call_module":
        return f"module:{target}"
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(target)
    return getattr(target, "__name__", str(target))


def node_arg(node: fx.Node, index: int, name: str, default: Any = None) -> Any:
    """Argument ``index`` (positional) or ``name`` (keyword) of a node, or ``default``.

    A call records an argument where the caller wrote it: ``torch.pow(x, 3)`` and
    ``torch.pow(x, exponent=3)`` are the same call with the exponent in ``args`` or in ``kwargs``.
    """
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def is_number(value: Any) -> bool:
    """Whether ``value`` is a constant Python number (``int`` or ``float``; ``bool`` is not one)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def tensors_in(value: Any) -> list[torch.Tensor]:
    """The tensors inside a node's example value (a tensor, or a tuple/list holding some), in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors_in(v)]
    return []


def is_tuple_unpack(node: fx.Node) -> bool:
    """``getitem(x, i)`` where ``x`` is a tuple or list (not tensor indexing)."""
    if node.op != "call_function" or node.target is not operator.getitem:
        return False
    source = node.args[0]
    return isinstance(source, fx.Node) and isinstance(node_value(source), (tuple, list))


def records_values(graph: fx.Graph) -> bool:
    """Whether the graph's nodes carry example values
    (Dynamo and AOTAutograd graphs do; ``symbolic_trace``'s do not)."""
    return any(node_value(n) is not None for n in graph.nodes if n.op == "placeholder")


def is_compute_node(node: fx.Node) -> bool:
    """Whether ``node`` counts as compute: a call that produces a tensor and is not tuple unpacking,
    or a call that writes a tensor in place (``operator.setitem`` returns None, yet copies elements).

    Not compute: size arithmetic on ints, and calls that return nothing. Dynamo records a value for
    every tensor a node produces, so in a graph that records values a call without one returned no
    tensor: host bookkeeping such as ``torch._C._log_api_usage_once``, which Dynamo keeps in the
    graph when a model builds an ``nn.Module`` inside ``forward``. In a graph without recorded values
    every call counts (better to over-count than to hide one).
    """
    if node.op not in CALL_OPS or is_tuple_unpack(node):
        return False
    if writes_in_place(node):
        return True
    value = node_value(node)
    if value is None:
        return not records_values(node.graph)
    return bool(tensors_in(value))


def compute_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    """The compute nodes of a graph, in graph order."""
    return [node for node in gm.graph.nodes if is_compute_node(node)]


def graph_dialect(gm: fx.GraphModule) -> str:
    """``"aten"`` when every ``call_function`` target is an aten op (or ``getitem``), else ``"torch"``."""
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]
    if any(n.op in ("call_method", "call_module") for n in gm.graph.nodes):
        return "torch"
    if targets and all(isinstance(t, torch._ops.OpOverload) for t in targets):
        return "aten"
    return "torch"


class _FlopInterpreter(fx.Interpreter):
    def __init__(self, gm: fx.GraphModule) -> None:
        super().__init__(gm)
        self.flops: dict[str, int] = {}

    def run_node(self, n: fx.Node) -> Any:
        if n.op not in CALL_OPS:
            return super().run_node(n)
        with FlopCount() as counter:
            result = super().run_node(n)
        self.flops[n.name] = counter.flops
        return result


def node_flops(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> dict[str, int]:
    """FLOPs of each call node on ``example_inputs``, counted on fake tensors (no real compute).

    Every op that does arithmetic counts, attention and elementwise ops included, by the cost model
    of :mod:`lab02_npu_backend.given.flops`. Returns an empty dict when the graph cannot run on fake
    tensors (for example symbolic sizes), so FLOP fractions are then reported as unknown-but-harmless.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    try:
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fake = [mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in example_inputs]
            interpreter = _FlopInterpreter(gm)
            with torch.no_grad():
                interpreter.run(*fake)
        return interpreter.flops
    except Exception:  # noqa: BLE001 - FLOPs are informative only; never fail a compile over them
        return {}


@dataclass
class CapturedGraphs:
    """The graphs a backend would receive for one model call, in both dialects.

    ``torch[i]`` is the i-th Dynamo graph; ``aten[i]`` is the forward graph AOTAutograd made of it
    (its nodes' ``meta['from_node']`` name the ``torch[i]`` node they came from). ``torch_inputs[i]``
    and ``aten_inputs[i]`` are the real values each graph was called with.
    """

    torch: list[fx.GraphModule] = field(default_factory=list)
    torch_inputs: list[list[Any]] = field(default_factory=list)
    aten: list[fx.GraphModule] = field(default_factory=list)
    aten_inputs: list[list[Any]] = field(default_factory=list)


def _is_fake(value: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(value, FakeTensor)


def capture_graphs(model: Any, *example_inputs: Any, dynamic: bool | None = False) -> CapturedGraphs:
    """Trace ``model(*example_inputs)`` once (under ``no_grad``) and keep the graphs of both dialects.

    The model is run eagerly by the capture backends, so this also checks the model runs.
    """
    from torch._dynamo.backends.common import aot_autograd

    captured = CapturedGraphs()

    def keep_aten(gm: fx.GraphModule, inputs: list[Any]) -> Any:
        # AOTAutograd compiles on fake tensors: keep the real inputs of the first call instead.
        captured.aten.append(gm)
        index = len(captured.aten_inputs)
        captured.aten_inputs.append(list(inputs))

        def run(*args: Any) -> Any:
            if captured.aten_inputs[index] is not None and any(_is_fake(x) for x in captured.aten_inputs[index]):
                captured.aten_inputs[index] = list(args)
            return gm(*args)

        return run

    to_aten = aot_autograd(fw_compiler=keep_aten)

    def keep_torch(gm: fx.GraphModule, inputs: list[Any]) -> Any:
        captured.torch.append(gm)
        captured.torch_inputs.append(list(inputs))
        return to_aten(gm, inputs)

    with torch.no_grad():
        torch.compile(model, backend=keep_torch, dynamic=dynamic)(*example_inputs)
    return captured


def source_node_name(node: fx.Node) -> str | None:
    """For an aten node made by AOTAutograd: the name of the Dynamo node it came from (``from_node``)."""
    sources = node.meta.get("from_node")
    if not sources:
        return None
    return getattr(sources[0], "name", None)


def fake_node_values(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> dict[fx.Node, Any]:
    """Every node's value on fake tensors shaped like ``example_inputs`` (nothing is computed)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    values: dict[fx.Node, Any] = {}

    class Recorder(fx.Interpreter):
        def run_node(self, n: fx.Node) -> Any:
            values[n] = result = super().run_node(n)
            return result

    with FakeTensorMode(allow_non_fake_inputs=True) as mode, torch.no_grad():
        fake = [mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in example_inputs]
        Recorder(gm).run(*fake)
    return values
