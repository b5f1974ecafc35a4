"""Which nodes each pass of a pipeline added, removed or changed (harness: do not edit).

:func:`record_passes` wraps every pass of a :class:`~lab01_fx_passes.PassManager` so that it
records, around each call, what the graph looked like before and after it (:func:`snapshot`), and
:func:`diff_graphs` says what changed. The pass manager still runs, validates and reports the
passes as usual; the wrappers keep the passes' names and ``changes_semantics`` attributes.

Names alone cannot say what changed: a pass built on ``fx.Transformer`` rebuilds the whole graph,
and in aten graphs every node it copies gets a new name (``add`` comes back as ``add_tensor``). So
the graphs are aligned as sequences (``difflib``, the algorithm behind ``diff``) of what each node
*is*: its op, its target and its constant arguments, not its name. Then, for each node:

- **added**: in the graph after the pass, aligned with nothing before it;
- **removed**: in the graph before the pass, aligned with nothing after it;
- **changed**: aligned, but what it reads is different: the module it calls or the tensor it
  fetches is another one, or was modified (new weights, another memory layout);
- **rewired**: aligned and unchanged, but an input now comes from another node (the ReLU after a
  BatchNorm the pass removed reads the fused convolution instead).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx, nn
from torch.fx.passes.infra.pass_base import PassResult

from lab01_fx_passes.given.graph_tools import fetch_attr
from lab01_fx_passes.given.pass_report import Pass, pass_name


@dataclass(frozen=True)
class NodeRecord:
    """One node as :func:`diff_graphs` compares it.

    Attributes:
        name: the node's name in its graph.
        kind: what the node is, without its name or its inputs: op, target (a module's class for
            ``call_module``, a tensor's shape and dtype for ``get_attr``), constant arguments.
        inputs: the names of the nodes it reads, in argument order.
        state: what it reads besides nodes: the target's name and the identity, version, shape and
            strides of every tensor of the module or attribute it refers to.
        keep_alive: the objects ``state`` names by ``id``, kept so that an id cannot be reused.
    """

    name: str
    kind: tuple
    inputs: tuple[str, ...]
    state: tuple
    keep_alive: tuple = field(default=(), compare=False, repr=False)


@dataclass(frozen=True)
class PassChanges:
    """What one pass did to the graph (node names: ``removed`` in the graph before it, the rest after)."""

    name: str
    nodes_before: int
    nodes_after: int
    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]
    rewired: tuple[str, ...]
    #: after-name -> before-name of every node present on both sides.
    matched: dict[str, str]

    @property
    def touched(self) -> bool:
        """Whether the pass added, removed or changed any node."""
        return bool(self.added or self.removed or self.changed)


def _tensor_state(tensor: torch.Tensor) -> tuple:
    try:
        pointer = tensor.data_ptr()
    except (RuntimeError, NotImplementedError):  # fake or meta tensors hold no data
        pointer = 0
    return id(tensor), pointer, tensor._version, tuple(tensor.shape), tuple(tensor.stride()), str(tensor.dtype)


def _record(gm: fx.GraphModule, node: fx.Node) -> NodeRecord:
    inputs = tuple(n.name for n in node.all_input_nodes)
    constants = repr(fx.node.map_arg((node.args, node.kwargs), lambda _: "%"))
    state: tuple = ()
    keep: tuple = ()
    if node.op in ("call_module", "get_attr"):
        try:
            value = fetch_attr(gm, node.target)
        except AttributeError:  # a dangling target: compared by its name alone
            value = None
        if isinstance(value, nn.Module):
            tensors = [*value.named_parameters(), *value.named_buffers()]
            kind = (node.op, type(value).__qualname__, constants)
            state = (node.target, id(value), tuple((name, _tensor_state(t)) for name, t in tensors))
            keep = (value, *(t for _, t in tensors))
        elif isinstance(value, torch.Tensor):
            kind = (node.op, tuple(value.shape), str(value.dtype))
            state = (node.target, _tensor_state(value))
            keep = (value,)
        else:
            kind = (node.op, type(value).__qualname__)
            state = (node.target, id(value))
            keep = (value,)
    elif node.op == "placeholder":
        kind = (node.op, node.target)
    elif node.op == "output":
        kind = (node.op,)
    else:
        kind = (node.op, node.target, constants)
    return NodeRecord(node.name, kind, inputs, state, keep)


def snapshot(gm: fx.GraphModule) -> list[NodeRecord]:
    """Every node of ``gm``'s graph, in graph order, as :func:`diff_graphs` compares them."""
    return [_record(gm, node) for node in gm.graph.nodes]


def _hashable(kind: tuple) -> Any:
    try:
        hash(kind)
        return kind
    except TypeError:  # an unhashable target: compare it by its text
        return repr(kind)


def diff_graphs(name: str, before: Sequence[NodeRecord], after: Sequence[NodeRecord]) -> PassChanges:
    """What turned ``before`` into ``after`` (two :func:`snapshot` lists), named ``name``."""
    matcher = difflib.SequenceMatcher(
        None, [_hashable(r.kind) for r in before], [_hashable(r.kind) for r in after], autojunk=False
    )
    matched: dict[str, str] = {}
    for tag, b_start, b_end, a_start, a_end in matcher.get_opcodes():
        if tag == "equal":
            for old, new in zip(before[b_start:b_end], after[a_start:a_end]):
                matched[new.name] = old.name
    by_name = {record.name: record for record in before}
    kept = set(matched.values())
    changed, rewired = [], []
    for record in after:
        if record.name not in matched:
            continue
        old = by_name[matched[record.name]]
        if record.state != old.state:
            changed.append(record.name)
        elif tuple(matched.get(i, f"<new {i}>") for i in record.inputs) != old.inputs:
            rewired.append(record.name)
    return PassChanges(
        name, len(before), len(after),
        added=tuple(r.name for r in after if r.name not in matched),
        removed=tuple(r.name for r in before if r.name not in kept),
        changed=tuple(changed), rewired=tuple(rewired), matched=matched,
    )  # fmt: skip


class RecordedPass:
    """A pass that records its :class:`PassChanges` (and the graph it returned) in a shared list."""

    def __init__(self, inner: Pass, log: list[PassChanges], graphs: list[fx.GraphModule]) -> None:
        self.inner = inner
        self.name = pass_name(inner)
        self.changes_semantics = bool(getattr(inner, "changes_semantics", False))
        self._log, self._graphs = log, graphs

    def __call__(self, graph_module: fx.GraphModule) -> Any:
        before = snapshot(graph_module)
        result = self.inner(graph_module)
        if isinstance(result, PassResult):
            self._log.append(diff_graphs(self.name, before, snapshot(result.graph_module)))
            self._graphs.append(result.graph_module)
        return result


@dataclass
class PipelineRecord:
    """Filled in while a recorded pipeline runs: one entry per pass that returned."""

    changes: list[PassChanges] = field(default_factory=list)
    #: the graph module each pass returned (the last one is the pipeline's latest graph).
    graphs: list[fx.GraphModule] = field(default_factory=list)


def record_passes(manager: Any) -> PipelineRecord:
    """Wrap every pass of ``manager`` (a pass manager with a ``passes`` list) to record what it changes.

    Returns the record the wrapped passes fill in when the manager runs.
    """
    record = PipelineRecord()
    manager.passes = [RecordedPass(p, record.changes, record.graphs) for p in manager.passes]
    return record


#: (pass name, what it did: "added", "changed" or "removed")
Event = tuple[str, str]


@dataclass(frozen=True)
class NodeHistories:
    """What the passes did to each node, end to end.

    Attributes:
        original: node of the graph before the pipeline -> what passes changed and removed it.
        final: node of the graph after the last pass -> which passes added and changed it.
    """

    original: dict[str, list[Event]]
    final: dict[str, list[Event]]


def node_histories(original: Sequence[str], changes: Sequence[PassChanges]) -> NodeHistories:
    """Follow each node through ``changes`` (in order), starting from the node names ``original``."""
    origin: dict[str, str | None] = {name: name for name in original}
    history: dict[str, list[Event]] = {name: [] for name in original}
    on_original: dict[str, list[Event]] = {name: [] for name in original}
    for change in changes:
        for name in change.removed:
            if origin.get(name) is not None:
                on_original[origin[name]].append((change.name, "removed"))
        new_origin: dict[str, str | None] = {}
        new_history: dict[str, list[Event]] = {}
        for after_name, before_name in change.matched.items():
            new_origin[after_name] = origin.get(before_name)
            new_history[after_name] = list(history.get(before_name, []))
        for name in change.added:
            new_origin[name], new_history[name] = None, [(change.name, "added")]
        for name in change.changed:
            new_history[name].append((change.name, "changed"))
            if new_origin[name] is not None:
                on_original[new_origin[name]].append((change.name, "changed"))
        origin, history = new_origin, new_history
    return NodeHistories({k: v for k, v in on_original.items() if v}, {k: v for k, v in history.items() if v})


def run_recorded(manager: Any, graph_module: fx.GraphModule) -> tuple[PipelineRecord, BaseException | None]:
    """Run ``manager`` on ``graph_module`` with every pass recorded; return the record and the error, if any.

    A pass that breaks or diverges stops the manager (its error is returned, not raised): the
    record then ends with that pass, so the graph it produced can still be drawn.
    """
    record = record_passes(manager)
    try:
        manager(graph_module)
    except Exception as error:  # noqa: BLE001 - the caller reports it and draws what there is
        return record, error
    return record, None
