"""Small, dialect-neutral helpers for reading and extending FX graphs (harness: do not edit).

Every pass of the lab needs the same three chores, none of which is the point of the lab:

- :func:`call_argument`: read an argument of a call by *name*, whether the graph passed it
  positionally or as a keyword (``F.relu(x, True)`` vs ``F.relu(x, inplace=True)``, or
  ``aten.native_batch_norm(..., training, ...)``), falling back to the signature's default;
  :func:`call_input` reads the first one (``input`` or ``self``), however it was passed, and
  :func:`binary_operands` the two of ``x + y`` and its every spelling. (The first two come from
  :mod:`labkit.spellings`, which lab 2's given code reads calls with too.)
- :func:`fetch_attr`: the module, parameter, buffer or tensor a ``get_attr`` or ``call_module``
  target names (``"layer1.0.conv1.weight"``).
- :func:`add_attribute`: give a new module, parameter or buffer a fresh top-level name on a
  ``GraphModule`` so a ``call_module`` or ``get_attr`` node can refer to it.
- :class:`OpName`: the operator a node calls, as :func:`~lab01_fx_passes.op_names.op_name` (step 0)
  names it: a base name and whether the call is in-place; :func:`writes_in_place` reads it (and
  ``x[i] = v``) to say whether a node writes its input.
- :func:`is_module_state`: whether a Dynamo placeholder holds a parameter or buffer of the compiled
  module (what the freezing step may turn into a constant), rather than an input of the call.
- :func:`node_value` (from :mod:`labkit.fx_nodes`): the example value a tracer recorded for a node
  (shapes and dtypes without running anything), where the dialect records one.
- :func:`observe_tensors`: what each node's tensor actually is (shape, strides, dtype, device) on a
  real run of the graph *as it is now*, in every dialect (``symbolic_trace`` records nothing, and
  the values other tracers recorded predate the passes that changed layouts).
"""

from __future__ import annotations

import inspect
import operator
import re
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx, nn

from labkit.fx_nodes import node_value  # noqa: F401  (re-exported for the passes)
from labkit.spellings import call_argument, call_input, call_signature  # noqa: F401  (re-exported for the passes)


def binary_operands(node: fx.Node) -> tuple[Any, Any] | None:
    """The two operands of a binary call (``add``, ``mul``, ``sub``, ...), by position or by name.

    ``x + y``, ``torch.add(x, y)``, ``torch.add(input=x, other=y)``, ``aten.add.Tensor(self=x, other=y)``
    and ``x.add(y)`` all give ``(x, y)``. None for a call that does not take two required operands
    (``F.relu(x)``); the keyword-only ``alpha`` or ``rounding_mode`` are read with :func:`call_argument`.
    """
    signature = call_signature(node)
    if signature is None:  # operator.add, methods, builtins whose overloads disagree: (x, y) or x, other=y
        values = [*node.args, *(node.kwargs[name] for name in ("input", "self", "other") if name in node.kwargs)]
        return (values[0], values[1]) if len(values) == 2 else None
    operands = [p for p in signature.parameters.values() if p.kind is not p.KEYWORD_ONLY][:2]
    if len(operands) != 2 or any(p.default is not inspect.Parameter.empty for p in operands):
        return None
    bound = signature.bind(*node.args, **node.kwargs).arguments
    return bound.get(operands[0].name), bound.get(operands[1].name)


@dataclass(frozen=True)
class OpName:
    """The operator a node calls.

    Attributes:
        name: the operator's base name, lower case, without a trailing in-place underscore:
            ``"relu"``, ``"gelu"``, ``"linear"``, ``"addmm"``, ``"conv2d"``, ``"batchnorm2d"``.
        in_place: whether the call overwrites its input (``relu_``, ``inplace=True``).
    """

    name: str
    in_place: bool


def writes_in_place(node: fx.Node, op: OpName | None) -> bool:
    """Whether ``node`` writes its first argument in place (``x.add_(1)``, ``relu_``, ``x[i] = v``).

    Args:
        node: any node.
        op: what ``op_name(node, modules)`` (step 0) calls it: pass its answer, which this given
            module cannot compute for you.
    """
    if node.op == "call_function" and node.target is operator.setitem:
        return True
    return op is not None and op.in_place


#: Dynamo's mark on the placeholders of a module's parameters and buffers (``node.meta["tensor_dict"]``).
DYNAMO_STATIC_INPUT = "_dynamo_static_input_type"


def is_module_state(node: fx.Node) -> bool:
    """Whether ``node`` is a Dynamo placeholder holding a parameter or buffer of the compiled module.

    Dynamo hands a backend the module's parameters and buffers as graph inputs, after the call's own
    inputs or among them, and marks their placeholders as *static inputs*:
    ``node.meta["tensor_dict"]["_dynamo_static_input_type"]`` (value ``"unguarded"``: Dynamo does
    not guard their values, only their shapes, dtypes and devices). The call's own inputs (``x``)
    carry no such mark. Other dialects have no such placeholders: there parameters are ``get_attr``
    nodes (or submodule attributes) already.
    """
    return node.op == "placeholder" and DYNAMO_STATIC_INPUT in node.meta.get("tensor_dict", {})


def storage_address(value: Any) -> int | None:
    """Which memory a tensor's elements live in: ``value.untyped_storage().data_ptr()``.

    Two tensors that return the same address share memory (one is a view of the other, or both views of
    a third), whatever nodes produced them. None for non-tensors, for an empty storage (address 0) and
    for opaque tensors (oneDNN's packed weights, sparse layouts), which have no storage to compare.
    """
    if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
        return None
    return value.untyped_storage().data_ptr() or None


def fetch_attr(gm: nn.Module, qualified_name: str) -> Any:
    """The attribute ``qualified_name`` (dotted path) of ``gm``, as a ``get_attr`` node reads it.

    Raises:
        AttributeError: naming the missing part of the path.
    """
    value: Any = gm
    for depth, part in enumerate(qualified_name.split(".")):
        if not hasattr(value, part):
            known = ".".join(qualified_name.split(".")[:depth]) or type(gm).__name__
            raise AttributeError(f"{known} has no attribute {part!r} (looking up {qualified_name!r})")
        value = getattr(value, part)
    return value


def add_attribute(gm: fx.GraphModule, base_name: str, value: nn.Module | torch.Tensor) -> str:
    """Register ``value`` on ``gm`` under a fresh top-level name derived from ``base_name``; return the name.

    Modules become submodules, ``nn.Parameter`` parameters, other tensors buffers. The name is
    flat (dots become underscores) so the value lives on ``gm`` itself, never inside a submodule
    that ``gm`` shares with the ``nn.Module`` it was traced from.
    """
    stem = re.sub(r"\W", "_", base_name).strip("_") or "attr"
    name, suffix = stem, 0
    while hasattr(gm, name):
        suffix += 1
        name = f"{stem}_{suffix}"
    if isinstance(value, nn.Module):
        gm.add_submodule(name, value)
    elif isinstance(value, nn.Parameter):
        gm.register_parameter(name, value)
    elif isinstance(value, torch.Tensor):
        gm.register_buffer(name, value)
    else:
        raise TypeError(f"add_attribute: expected an nn.Module or a tensor, got {type(value).__name__}")
    return name


@dataclass(frozen=True)
class TensorInfo:
    """What a tensor a node produced looked like on a real run (not the tensor itself: no memory held).

    Attributes:
        shape, stride: its sizes and strides (its memory layout).
        dtype, device: its element type and device (``cpu``, ``cuda``, ``meta``).
    """

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device

    @classmethod
    def of(cls, tensor: torch.Tensor) -> "TensorInfo":
        return cls(tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype, tensor.device)

    def is_channels_last(self) -> bool:
        """Whether it is a 4-D tensor stored channels-last (NHWC order in memory)."""
        if len(self.shape) != 4:
            return False
        layout = torch.empty_strided(self.shape, self.stride, dtype=self.dtype, device="meta")
        return layout.is_contiguous(memory_format=torch.channels_last)


def observe_tensors(gm: fx.GraphModule, inputs: Any) -> dict[fx.Node, TensorInfo]:
    """Run ``gm.graph`` on ``inputs``, node by node and without autograd; describe every strided tensor it produced.

    Returns:
        node -> :class:`TensorInfo` of its value, for the nodes whose value is a strided tensor
        (not tuples, not opaque tensors such as oneDNN's packed weights, which have no strides).
    """
    seen: dict[fx.Node, TensorInfo] = {}

    class Observer(fx.Interpreter):
        def run_node(self, node: fx.Node) -> Any:
            value = super().run_node(node)
            if isinstance(value, torch.Tensor) and value.layout == torch.strided:
                seen[node] = TensorInfo.of(value)
            return value

    with torch.no_grad():
        Observer(gm, garbage_collect_values=True).run(*inputs)
    return seen
