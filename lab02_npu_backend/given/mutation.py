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

**How a write is found.** :func:`written_arguments` reads the call as written (an ``OpOverload``'s
schema, ``setitem``, ``+=``, a name ending in ``_``, ``inplace=True``, ``out=``), and where the call's
arguments carry recorded example values it also *runs* the call on them, on fake tensors, and watches
which aten operators it reaches write which tensors: an aten schema marks every written argument
(``Tensor(a!)``). That second reading sees what no spelling says: ``F.embedding(..., max_norm=1.0)``
renormalizes rows of its weight (``aten.embedding_renorm_``), training ``F.batch_norm`` updates its
running statistics, ``torch._foreach_add_([a, b], 1.0)`` writes each tensor of its list, and
``torch.max(x, 1, out=(m, i))`` writes both outputs. It runs under PyTorch's Python dispatcher, as
``make_fx`` does, because ``aten.native_batch_norm``'s schema predates alias annotations and does not
mark its writes; the Python dispatcher routes it to ``_native_batch_norm_legit``, whose schema does.

Where a graph records values but a call cannot be run on them (a higher-order operator such as
``torch.utils.checkpoint``'s, whose body is a subgraph; a call whose recorded arguments no longer fit it), the
call is taken to write every tensor it is given (in a graph that records one trace's fake values: Dynamo's,
AOTAutograd's; in ``symbolic_trace``'s, and ``make_fx``'s real mode, which snapshots each value apart, only
the spelling tells): a write missed gives a wrong answer, a write assumed only keeps nodes on the CPU. And a
recorded value is the tensor as the *whole graph* left it: after ``h.unsqueeze_(0)`` or ``a.set_(y)``
(operators PyTorch tags ``inplace_view``: they change a tensor's shape, strides or storage, not its elements)
the values no longer tell which nodes shared a storage where each ran, so in such a graph no write is private.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

import torch
from torch import fx
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import FakeTensor
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

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


_CALLS = ("call_function", "call_method")


def written_arguments(node: fx.Node) -> list[fx.Node]:
    """The arguments ``node`` writes in place (usually none, at most one or two), in either dialect: those its
    spelling says it writes, then those it writes when run on its recorded example values (module docstring)."""
    if node.op not in _CALLS:
        return []
    spelled = _written_as_spelled(node)
    return list(dict.fromkeys(spelled + _written_when_run(node, spelled)))


def _written_as_spelled(node: fx.Node) -> list[fx.Node]:
    """The arguments the spelling says it writes: schema, ``setitem``, ``+=``, ``name_``, ``inplace``, ``out``."""
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


class _WriteRecorder(TorchDispatchMode):
    """Records the tensors each aten operator writes (its schema's ``Tensor(a!)`` arguments, lists included).

    A write is recorded, not performed, when the operator returns what it wrote (``add_``, ``t_``, an ``out=``
    variant): the example values are the graph's record of its tensors, and a metadata write (``t_``) would change
    them. Other writers (``_native_batch_norm_legit`` returns new tensors) run on the fake tensors as usual.
    """

    def __init__(self) -> None:
        super().__init__()
        self.written: list[torch.Tensor] = []
        #: the tensors whose view (shape, strides, storage) a write changed: an ``inplace_view`` operator's.
        self.view_changed: list[torch.Tensor] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, D105
        kwargs = kwargs or {}
        schema = func._schema
        bound = {}
        for index, argument in enumerate(schema.arguments):
            positional = index < len(args) and not argument.kwarg_only
            bound[argument.name] = args[index] if positional else kwargs.get(argument.name)
            if _marks_write(argument):
                self.written += _tensors(bound[argument.name])
                if torch.Tag.inplace_view in func.tags:
                    self.view_changed += _tensors(bound[argument.name])
        returned = _written_arguments_returned(schema, bound)
        return returned if returned is not NotImplemented else func(*args, **kwargs)


def _marks_write(argument: Any) -> bool:
    """Whether a schema argument is written: ``Tensor(a!)``, ``Tensor(a!)?`` or ``Tensor(a!)[]``."""
    alias = argument.alias_info
    if alias is None:
        element = getattr(argument.type, "getElementType", None)  # Tensor(a!)[]: the alias sits on the element
        alias = getattr(element(), "alias_info", None) if element else None
    return alias is not None and alias.is_write


def _alias_set(argument: Any) -> Any:
    """The alias set of a schema argument (``{'a'}`` for ``Tensor(a!)``), ``None`` without one."""
    return argument.alias_info.before_set if argument.alias_info is not None else None


def _written_arguments_returned(schema: Any, bound: dict[str, Any]) -> Any:
    """What an operator that returns only the arguments it wrote returns (``add_`` its ``self``, ``max.dim_max``
    its two ``out`` tensors, ``_foreach_add_`` nothing), or ``NotImplemented`` when it returns anything else."""
    writes = [argument for argument in schema.arguments if _marks_write(argument)]
    if not writes:
        return NotImplemented
    results = []
    for returned in schema.returns:
        alias = returned.alias_info
        same = [a for a in writes if alias is not None and _alias_set(a) == alias.before_set]
        if not same:
            return NotImplemented
        results.append(bound[same[0].name])
    if not results:
        return None
    return results[0] if len(results) == 1 else tuple(results)


@dataclass(frozen=True)
class _RunWrites:
    """What running a call on its recorded values showed: the input nodes it writes, whether a write changed the
    view of one of them (``inplace_view``: a tensor the call makes for itself does not count)."""

    written: tuple[fx.Node, ...] = ()
    changes_a_view: bool = False


#: node -> (its target, args and kwargs when read, what running it showed): a graph is read many times.
_RUN_WRITES: WeakKeyDictionary = WeakKeyDictionary()


def _written_when_run(node: fx.Node, spelled: list[fx.Node]) -> list[fx.Node]:
    """The input nodes whose tensors ``node`` writes when run on its recorded fake example values. An input the
    written tensor *is* comes first; a write into a view made inside the call names every input sharing that
    storage, unless ``spelled`` holds one. A call that records values but cannot be run on them writes every
    tensor it is given; one without recorded fake values (``symbolic_trace``), none."""
    return list(_run_writes(node, spelled).written)


def _run_writes(node: fx.Node, spelled: list[fx.Node] | None = None) -> _RunWrites:
    cached = _RUN_WRITES.get(node)
    if cached is not None and cached[0] is node.target and cached[1] is node.args and cached[2] is node.kwargs:
        return cached[3]
    spelled = _written_as_spelled(node) if spelled is None else spelled
    inputs = node.all_input_nodes
    recorder = _run_and_watch(node)
    if recorder is None:
        modes = {t.fake_mode for n in (node, *inputs) for t in _tensors(node_value(n)) if isinstance(t, FakeTensor)}
        recorded = len(modes) == 1  # one trace's record (make_fx's real mode snapshots each value apart)
        assumed = [n for n in inputs if _tensors(node_value(n))] if recorded else []
        result = _RunWrites(tuple(assumed))
    else:
        written = recorder.written
        found = [n for n in inputs if any(value is w for value in _tensors(node_value(n)) for w in written)]
        covered = set().union(*(_storages(node_value(n)) for n in spelled + found)) if spelled + found else set()
        for tensor in written:
            storage = _storages(tensor)
            if storage and not storage & covered:
                found += [n for n in inputs if storage & _storages(node_value(n)) and n not in found]
        inputs_storage = set().union(*(_storages(node_value(n)) for n in inputs)) if inputs else set()
        changes_a_view = any(_storages(tensor) & inputs_storage for tensor in recorder.view_changed)
        result = _RunWrites(tuple(found), changes_a_view)
    _RUN_WRITES[node] = (node.target, node.args, node.kwargs, result)
    return result


def _run_and_watch(node: fx.Node) -> _WriteRecorder | None:
    """Run ``node``'s call on its arguments' recorded fake values, watching the aten operators it reaches; None
    when it cannot be run on them (no values recorded, real tensors a run would change, an exception)."""
    args, kwargs = fx.node.map_arg((node.args, node.kwargs), node_value)
    if any(node_value(n) is None for n in node.all_input_nodes):
        return None  # an argument without a recorded value (symbolic_trace; a higher-order operator's subgraph)
    tensors = _tensors((args, kwargs))
    if not tensors or not all(isinstance(t, FakeTensor) for t in tensors):
        return None
    fake_mode = tensors[0].fake_mode  # the values' own (inside a backend, detect_fake_mode finds the tracer's)
    if any(t.fake_mode is not fake_mode for t in tensors):
        return None
    recorder = _WriteRecorder()
    call = getattr(args[0], node.target) if node.op == "call_method" else node.target
    call_args = args[1:] if node.op == "call_method" else args
    try:
        with torch.no_grad(), enable_python_dispatcher(), fake_mode, recorder:
            call(*call_args, **kwargs)
    except Exception:  # noqa: BLE001  a call its recorded values cannot replay: its writes are assumed
        return None
    return recorder


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in a node's example value (a tensor, or a tuple/list of them)."""
    return [leaf for leaf in tree_leaves(value) if isinstance(leaf, torch.Tensor)]


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
    the written argument is its only known alias and no write is private; nor in a graph that changes a tensor's
    view in place (module docstring).
    """
    nodes = list(gm.graph.nodes)
    order = {node: index for index, node in enumerate(nodes)}
    storages = {node: _storages(node_value(node)) for node in nodes}
    inputs = set().union(*(storages[n] for n in nodes if n.op in ("placeholder", "get_attr")))
    view_changer = next((n for n in nodes if n.op in _CALLS and _run_writes(n).changes_a_view), None)
    writes = []
    for node in nodes:
        for written in written_arguments(node):
            shared = storages[written]
            aliases = [n for n in nodes if shared & storages[n]] if shared else [written]
            if written not in aliases:
                aliases.insert(0, written)
            reason = _why_shared(node, written, shared, aliases, inputs, order) or (
                f"{view_changer.name} changes a tensor's shape, strides or storage in place: the recorded values "
                "are the graph's last, too weak to prove a write private"
                if view_changer is not None
                else ""
            )
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
