"""In-place writes in FX graphs: which nodes write a tensor, which nodes see that tensor, and which
writes nobody else can observe (provided, not an exercise).

A graph is a list of nodes in program order, but its *edges* are data only: ``operator.setitem(x,
idx, v)`` returns nothing, so nothing depends on it, and a node that reads ``x`` after the write has
no edge telling anyone that it must run after it. ``CapabilityBasedPartitioner`` merges and moves
nodes by those edges alone, so a partition can pull a read of ``x`` across the write (and Dynamo
graphs keep writes: ``x[:, 1:] = y``, ``t.add_(1)``, ``F.relu(x, inplace=True)``, ``x += y``).
AOTAutograd's aten graphs are *functionalized* (``setitem`` becomes ``slice_scatter``) and carry at
most writes back into graph inputs (``aten.copy_``).

:func:`find_tensor_writes` finds every write and, from the example values Dynamo and AOTAutograd
record (FakeTensors that share storage exactly where the real tensors would), every node whose
value *is* the written tensor or a view of it (its aliases). A write is **private** when no node can
observe it except through the write's own result: the written tensor is a fresh intermediate (not
a graph input, parameter or buffer), and nothing reads it, or any view of it, after the write. The
in-place ReLUs and residual ``+=`` of torchvision's ResNets are private: run out of place, they give
the same answer. Every other write is *shared*, and its order against the nodes that touch the
tensor is part of the program's meaning.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch.multiprocessing.reductions import StorageWeakRef

from labkit.fx_nodes import node_value
from labkit.spellings import call_argument, call_input

#: ``x op= y``: in place on a tensor (``Tensor.__iadd__``), a rebinding on a Python number.
INPLACE_OPERATORS = frozenset({
    operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv, operator.imod,
    operator.ipow, operator.iand, operator.ior, operator.ixor, operator.ilshift, operator.irshift, operator.imatmul,
})  # fmt: skip
#: Methods whose name ends in ``_`` but that change no tensor element.
NOT_DATA_WRITES = frozenset({"requires_grad_", "retain_grad_", "share_memory_", "record_stream_"})


@dataclass(frozen=True)
class TensorWrite:
    """One node that writes a tensor in place.

    Attributes:
        node: the writing node (``setitem``, ``add_``, ``copy_``, ``F.relu(..., inplace=True)``, ``x += y``, ...).
        written: the argument it writes into.
        aliases: every node whose value lives in the written tensor's storage (the tensor itself, its
            views, and other writes' results), in graph order; ``written`` is always among them.
        private: no node observes the write except through ``node``'s own result, so it may run as
            an ordinary out-of-place op (see the module docstring).
        shared_because: why it is not private (empty when it is), for fallback reasons.
    """

    node: fx.Node
    written: fx.Node
    aliases: tuple[fx.Node, ...]
    private: bool
    shared_because: str = ""


def written_arguments(node: fx.Node) -> list[fx.Node]:
    """The arguments ``node`` writes in place (usually none, at most one or two), in either dialect."""
    if node.op not in ("call_function", "call_method"):
        return []
    target, first = node.target, call_input(node)  # F.relu(input=x, inplace=True) writes x too
    written: list[Any] = []
    if isinstance(target, torch._ops.OpOverload):
        arguments = target._schema.arguments
        for index, argument in enumerate(arguments):
            if argument.alias_info is not None and argument.alias_info.is_write:
                value = (
                    node.args[index]
                    if index < len(node.args) and not argument.kwarg_only
                    else node.kwargs.get(argument.name)
                )
                written.append(value)
    elif target is operator.setitem:
        written.append(first)
    elif target in INPLACE_OPERATORS:
        if isinstance(node_value(first), torch.Tensor):
            written.append(first)
    elif _is_inplace_name(target if node.op == "call_method" else getattr(target, "__name__", "")):
        written.append(first)
    elif node.op == "call_function" and _inplace_flag(node):
        written.append(first)
    if isinstance(node.kwargs.get("out"), fx.Node):
        written.append(node.kwargs["out"])
    return list(dict.fromkeys(w for w in written if isinstance(w, fx.Node)))


def writes_in_place(node: fx.Node) -> bool:
    """Whether ``node`` writes some tensor in place."""
    return bool(written_arguments(node))


def _is_inplace_name(name: Any) -> bool:
    """PyTorch's convention: ``add_``, ``masked_fill_``, ``relu_`` (not dunders, not metadata setters)."""
    return (isinstance(name, str) and name.endswith("_") and not name.startswith("__")
            and name not in NOT_DATA_WRITES)  # fmt: skip


def _inplace_flag(node: fx.Node) -> bool:
    """``inplace=True`` given to a functional, by name or position (``F.relu(x, inplace=True)``,
    ``F.hardtanh(x, 0, 6, True)``)."""
    return call_argument(node, "inplace") is True


def _storages(value: Any) -> set[Any]:
    """The storages of the tensors in a node's example value (a tensor, or a tuple/list of them)."""
    if isinstance(value, torch.Tensor):
        try:
            return {StorageWeakRef(value.untyped_storage())}
        except (NotImplementedError, RuntimeError):  # a tensor without storage (some subclasses)
            return set()
    if isinstance(value, (tuple, list)):
        return set().union(*(_storages(v) for v in value)) if value else set()
    return set()


def find_tensor_writes(gm: fx.GraphModule) -> list[TensorWrite]:
    """Every in-place write of ``gm``, in graph order, with the nodes that alias the written tensor.

    Aliases come from the example values' storages. In a graph without recorded values (``symbolic_trace``)
    the written argument is its only known alias and no write is private.
    """
    nodes = list(gm.graph.nodes)
    order = {node: index for index, node in enumerate(nodes)}
    storages = {node: _storages(node_value(node)) for node in nodes}
    inputs = set().union(*(storages[n] for n in nodes if n.op in ("placeholder", "get_attr")))
    writes = []
    for node in nodes:
        for written in written_arguments(node):
            shared = storages[written]
            aliases = [n for n in nodes if shared & storages[n]] if shared else [written]
            if written not in aliases:
                aliases.insert(0, written)
            reason = _why_shared(node, written, shared, aliases, inputs, order)
            writes.append(TensorWrite(node, written, tuple(sorted(aliases, key=order.get)), not reason, reason))
    return writes


def _why_shared(
    node: fx.Node, written: fx.Node, shared: set, aliases: Iterable[fx.Node], inputs: set, order: dict[fx.Node, int]
) -> str:
    """Why someone other than ``node``'s result can observe the write ("" when nobody can)."""
    if not shared:
        return "no recorded example values to prove the write private"
    if not shared & _storages(node_value(node)):
        return f"returns no tensor: later readers of {written.name} see the write"
    if shared & inputs:
        return f"{written.name} is (a view of) a graph input, parameter or buffer: the caller sees the write"
    for alias in aliases:
        if alias is node or order[alias] > order[node]:
            continue
        late = [user for user in alias.users if order[user] > order[node]]
        if late:
            return f"{late[0].name} reads {alias.name} after the write"
    return ""


def returned_aliases(gm: fx.GraphModule) -> set[fx.Node]:
    """The nodes whose value is (or shares memory with) a value the graph returns: the returned nodes, and
    every node whose example value shares a storage with one (``r`` when the graph returns ``r[:2]``). What
    the caller receives it may write to; in a graph without recorded values, only the returned nodes."""
    output = next(node for node in reversed(gm.graph.nodes) if node.op == "output")
    returned = set(output.all_input_nodes)
    storages = set().union(*(_storages(node_value(node)) for node in returned)) if returned else set()
    return returned | {node for node in gm.graph.nodes if storages & _storages(node_value(node))}
