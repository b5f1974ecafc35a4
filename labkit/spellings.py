"""The same graph with every call's arguments spelled another way: a pass must not care.

A call can pass an argument by position or by name, and can leave out one equal to its default:
``F.batch_norm(x, m, v, w, b, False, 0.1, 1e-5)``, ``F.batch_norm(x, m, v, weight=w, bias=b,
eps=1e-5)`` and ``F.batch_norm(x, m, v, w, b)`` are one computation. Which spelling a graph holds
depends on who wrote the model and which tracer captured it, so a pass that reads ``node.args[7]``,
or only ``node.kwargs["eps"]``, or that counts ``len(node.args)``, works on the graphs its author
tried and silently misreads the others.

:func:`respelled` copies a graph and rewrites every call it can into one :data:`ARGUMENT_SPELLINGS`:

``keywords``
    every argument the call passed, by name (tensors too, where the signature allows), in calls of
    Python-level targets (``torch.conv2d``, ``F.gelu``): their spelling is the model author's. Aten
    operators (overloads, and packets such as Dynamo's ``aten.numpy_T``) keep theirs: the dispatcher
    records an aten call's arguments by position (keyword-only ones by name), so no tracer writes
    ``aten.relu(self=x)``.
``positional``
    every argument by position up to the last one that may be positional, the defaults written
    out; keyword-only arguments stay keywords.
``shortest``
    by position, and every argument equal to its default left out.

Each respelled graph is one a tracer could record from some model. Where a target has no signature
to read (``operator.add``, modules, methods torch has no function for) or its overloads disagree on the
names, the call is left as it is; an overloaded builtin (``torch.div``) or a method named like a torch
function (``x.div``) is named only where its values tell the overload and the names, tried on them,
are accepted (:func:`respelled`).
The copy is checked to compute exactly what the original computes on the inputs given, so a
difference after a pass is the pass's.

:func:`call_signature` (the signature a call binds to), :func:`call_argument` and :func:`call_input` (one
argument, however the call passed it) and :func:`canonical_arguments` (one spelling for any call, as a
lowering rule wants its arguments) serve the readers of graphs.
"""

from __future__ import annotations

import copy
import inspect
import numbers
import types
import typing
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import fx
from torch.fx.operator_schemas import get_signature_for_torch_op

from labkit.fx_nodes import node_value, run_graph
from labkit.numerics import fresh_copies

#: A call's arguments: ``(args, kwargs)``.
Call = tuple[tuple[Any, ...], dict[str, Any]]

#: The spellings :func:`respelled` writes.
ARGUMENT_SPELLINGS = ("keywords", "positional", "shortest")

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _schema_signature(schema: torch._C.FunctionSchema) -> inspect.Signature:
    """An operator schema as a Python signature, keeping the schema's own names (``self``, not ``input``)."""
    parameters = []
    for argument in schema.arguments:
        kind = inspect.Parameter.KEYWORD_ONLY if argument.kwarg_only else inspect.Parameter.POSITIONAL_OR_KEYWORD
        default = argument.default_value if argument.has_default_value() else inspect.Parameter.empty
        parameters.append(inspect.Parameter(argument.name, kind, default=default))
    return inspect.Signature(parameters)


def _candidate_signatures(target: Any) -> list[inspect.Signature]:
    """The signatures a call of ``target`` may bind to: an aten overload's schema; a Python function's own
    signature (Python binds it, whatever TorchScript registers: ``torch.split(tensor, split_size_or_sections,
    dim=0)``, not TorchScript's ``split(input, split_size, dim)``); a builtin's overloads."""
    if isinstance(target, torch._ops.OpOverload):
        return [_schema_signature(target._schema)]
    if isinstance(target, types.FunctionType):
        try:
            return [inspect.signature(target)]
        except (TypeError, ValueError):
            return []
    signatures = get_signature_for_torch_op(target) if callable(target) else None
    if signatures:
        return list(signatures)
    try:
        return [inspect.signature(target)]
    except (TypeError, ValueError):
        return []


def _shape(signature: inspect.Signature) -> tuple[tuple[str, Any], ...]:
    return tuple((p.name, p.kind) for p in signature.parameters.values())


def _function_of(node: fx.Node) -> Any:
    """What ``node`` calls, as a function of all its arguments: its target; for a method call (``x.div(y)``) the
    torch function of that name where the method is that function's method variant: a builtin whose every
    overload takes the method's ``self`` first (``torch.div(x, y)``). None where torch has no such function
    (``x.view(...)``, ``x.float()``), where the function is Python's own (``torch.split``, ``torch.norm``: their
    parameters are not the method's) or puts another argument first (``torch.where(condition, input, ...)``)."""
    if node.op == "call_method":
        function = getattr(torch, node.target, None) if isinstance(node.target, str) else None
        if not callable(function) or isinstance(function, type):
            return None
        # The overloads taking a tensor first (not TorchScript's (a: int, b: int)) must all take it as self, which
        # FX's schema signatures call input.
        firsts = [next(iter(s.parameters.values()), None) for s in get_signature_for_torch_op(function) or []]
        tensor_firsts = [first for first in firsts if first is not None and first.annotation is torch.Tensor]
        return function if tensor_firsts and all(first.name == "input" for first in tensor_firsts) else None
    return node.target if node.op == "call_function" else None


def _binding_signatures(node: fx.Node) -> list[inspect.Signature]:
    """The overloads of ``node``'s target its call binds to (:meth:`inspect.Signature.bind`)."""
    binding = []
    for signature in _candidate_signatures(_function_of(node)):
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in signature.parameters.values()):
            continue
        try:
            signature.bind(*node.args, **node.kwargs)
        except TypeError:
            continue
        binding.append(signature)
    return binding


def _typed(node: fx.Node, signatures: list[inspect.Signature]) -> list[inspect.Signature]:
    """Those of ``signatures`` whose declared types accept the values ``node``'s call passes (:func:`_accepts`)."""
    return [
        signature
        for signature in signatures
        if all(
            _accepts(signature.parameters[name].annotation, value)
            for name, value in signature.bind(*node.args, **node.kwargs).arguments.items()
        )
    ]


def call_signature(node: fx.Node) -> inspect.Signature | None:
    """The signature ``node``'s call binds to, or None where it cannot be told.

    A torch builtin has overloads, chosen by the types of the values passed: ``torch.div(x, y)`` may be
    ``div(input: Tensor, other: Tensor)``, ``div(input: Tensor, other: Number)`` or TorchScript's ``div(a: int,
    b: int)``. The overloads the call binds to must agree on every parameter's name and kind, or, failing that,
    those whose declared types accept its values (a node's value is its recorded example value; one with none
    recorded, as in ``symbolic_trace``'s graphs, could be anything); otherwise None is returned. Aten operators
    (``torch.ops.aten.add.Tensor``) are one overload each. A method call binds like the torch function it is the
    method variant of, ``self`` first: ``x.div(y)`` like ``torch.div(x, y)`` (:func:`_function_of`).
    """
    binding = _binding_signatures(node)
    for signatures in (binding, _typed(node, binding)):
        if signatures and len({_shape(signature) for signature in signatures}) == 1:
            return signatures[0]
    return None


def _accepts(annotation: Any, value: Any) -> bool:
    """Whether an overload whose parameter is declared ``annotation`` accepts ``value`` (an argument as a graph
    holds it: a node stands for its recorded example value; one with none recorded accepts any declaration).
    Only what is clearly of another type is refused: an undeclared parameter, or a declaration this does not
    read, accepts anything."""
    if isinstance(value, fx.Node):
        value = node_value(value)
        if value is None:  # nothing recorded: any type
            return True
    if annotation is inspect.Parameter.empty or annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return any(_accepts(member, value) for member in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if origin in (list, tuple, Sequence):
        element = (typing.get_args(annotation) or (Any,))[0]
        if isinstance(value, (list, tuple)):
            return all(_accepts(element, item) for item in value)
        return element in (int, float) and _accepts(element, value)  # an int for a list of ints: torch.sum(x, 1)
    if annotation is torch.Tensor:
        return isinstance(value, torch.Tensor)
    if annotation is numbers.Number or annotation is complex:
        return isinstance(value, (numbers.Number, torch.SymInt, torch.SymFloat, torch.SymBool))
    if annotation is float:
        return isinstance(value, (int, float, torch.SymInt, torch.SymFloat)) and not isinstance(value, bool)
    if annotation is int:  # a schema's dtype, layout and memory format are ints too
        scalar = isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool)
        return scalar or isinstance(value, (torch.dtype, torch.layout, torch.memory_format))
    if annotation is bool:
        return isinstance(value, (bool, torch.SymBool))
    if annotation is str:
        return isinstance(value, str)
    return True


def _respellable_signature(node: fx.Node) -> inspect.Signature | None:
    """:func:`call_signature`, where every overload of the target names and orders its parameters alike.

    Overloads are chosen at run time by the values' types (``torch.where(c, x, y)`` names ``x``
    ``input``, its Scalar overload ``self``): unless they all agree, a name written here could select
    another overload, or none, so such a call's spelling is never changed.
    """
    signature = call_signature(node)
    if signature is None or len({_shape(candidate) for candidate in _candidate_signatures(node.target)}) != 1:
        return None
    return signature


def _equals_default(value: Any, default: Any) -> bool:
    """Whether the ``shortest`` spelling may leave ``value`` out: the default, in the default's own type (an
    ``-1`` where the default is ``-1.0`` is kept as the model wrote it)."""
    return default is not inspect.Parameter.empty and type(value) is type(default) and is_default(value, default)


def is_default(value: Any, default: Any) -> bool:
    """Whether ``value`` is the parameter's ``default``: the same object, or an equal value of the same kind.

    Numbers compare by value (an aten schema's Scalar default is written as an int, ``hardtanh(min_val=-1)``,
    where graphs pass ``-1.0``), and sequences by their items (FX stores a list as its own ``immutable_list``: the
    positional spelling writes conv2d's ``stride=[1, 1]`` out so). An equivalent value of another form
    (``stride=1`` for ``[1, 1]``, ``layout=torch.strided`` for None) is another value: a check must read that
    form too. A node or a tensor is never a default.
    """
    if value is default:
        return True
    if isinstance(value, (fx.Node, torch.Tensor)):
        return False
    if isinstance(value, (list, tuple)) and isinstance(default, (list, tuple)):
        return len(value) == len(default) and all(is_default(v, d) for v, d in zip(value, default, strict=True))
    numbers_alike = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (value, default))
    try:
        return (numbers_alike or type(value) is type(default)) and bool(value == default)
    except Exception:  # noqa: BLE001 - values that cannot be compared are another value
        return False


def arguments_at_default(node: fx.Node, modules: dict[str, torch.nn.Module] | None = None) -> dict[str, bool] | None:
    """For each parameter of ``node``'s call that has a default: whether the call passes it at that default.

    A function or method call reads its :func:`call_signature` (None where it cannot be told). A ``call_module``
    node reads its module's configuration (``modules``: ``dict(gm.named_modules())``): each parameter of the
    module class's ``__init__`` with a default that the module keeps as an attribute of that name
    (``nn.Conv2d``'s ``stride``, kept as one number per dimension, ``nn.BatchNorm2d``'s ``eps``), and ``bias``,
    kept as a tensor or None where the default is a bool. An instructor's audit collects these over a test run:
    an argument met at one value only is one no test varies.
    """
    if node.op == "call_module":
        module = (modules or {}).get(node.target)
        return None if module is None else _module_at_default(module)
    bound = _bound_arguments(node)
    if bound is None:
        return None
    signature, given = bound
    return {
        name: is_default(given.get(name, parameter.default), parameter.default)
        for name, parameter in signature.parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }


def _bound_arguments(node: fx.Node) -> tuple[inspect.Signature, dict[str, Any]] | None:
    """``node``'s call signature and the arguments it binds to them by name (None where it cannot be told)."""
    signature = call_signature(node)
    if signature is None:
        return None
    try:
        return signature, signature.bind(*node.args, **node.kwargs).arguments
    except TypeError:
        return None


def required_argument_values(node: fx.Node) -> dict[str, str] | None:
    """For each parameter of ``node``'s call without a default: the value the call passes.

    aten's schemas leave many settings without a default (``aten.convolution``'s ``stride``, ``transposed`` and
    ``groups``, ``aten.transpose.int``'s dims): :func:`arguments_at_default` cannot tell whether a test varies
    them. The value is written so equal settings read alike (numbers by value, lists and tuples by their items):
    ``"(1.0, 1.0)"``; a node or tensor, or a sequence holding one, is ``"<value>"`` (a graph value, which a test
    may pass or not where ``None`` is allowed: aten's ``Tensor? bias``). None where the call's signature cannot be
    told (a ``call_module``: a module's settings all have defaults).
    """
    bound = None if node.op == "call_module" else _bound_arguments(node)
    if bound is None:
        return None
    signature, given = bound
    return {
        name: "<value>" if _holds_a_value(given[name]) else repr(_setting(given[name]))
        for name, parameter in signature.parameters.items()
        if parameter.default is inspect.Parameter.empty and name in given
    }


def number_arguments_at_zero(node: fx.Node) -> dict[str, bool] | None:
    """For each parameter of ``node``'s call that takes a real number and defaults to something other than 0
    (``eps=1e-5``, ``scale=None``, ``alpha=1``, ``min=None``): whether the call passes it at 0.

    ``eps or 1e-5`` and ``scale or 1 / sqrt(d)`` read 0 as "not given": right for every value but the one a model
    passes to turn the term off. An instructor's audit collects these over a test run: an argument never met at 0
    is one whose falsy reading no test catches. None where the call's signature cannot be told.
    """
    bound = None if node.op == "call_module" else _bound_arguments(node)
    if bound is None:
        return None
    signature, given = bound
    return {
        name: name in given and _is_zero(given[name])
        for name, parameter in signature.parameters.items()
        if parameter.default is not inspect.Parameter.empty
        and not _is_zero(parameter.default)
        and _takes_a_real_number(node.target, parameter)
    }


def _is_zero(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0


def _takes_a_real_number(target: Any, parameter: inspect.Parameter) -> bool:
    """Whether ``parameter`` takes a float (or any Python number): its schema type (``float``, ``float?``,
    ``Scalar``, written ``number``), or its annotation; a bool, an int or a tensor does not."""
    if isinstance(target, torch._ops.OpOverload):
        kinds = [str(a.type) for a in target._schema.arguments if a.name == parameter.name]
    else:
        kinds = [str(parameter.annotation)]
    return any(word in kind.lower() for kind in kinds for word in ("float", "number"))


def note_changed_together(
    partners: dict[str, set[str]], at_default: dict[str, bool], ignore: Sequence[str] = ()
) -> None:
    """Fold one call's :func:`arguments_at_default` into ``partners``: argument -> the other arguments changed from
    their defaults in every call seen so far that changes it. An argument whose set stays non-empty is never
    changed alone: a check that reads its partner instead passes every such call (``addmm``'s beta and alpha).
    ``ignore`` names arguments that are no partners (a module's ``training``: the graph's mode, not the call's)."""
    changed = {name for name, default in at_default.items() if not default and name not in ignore}
    for name in changed:
        others = changed - {name}
        partners[name] = partners[name] & others if name in partners else others


def _setting(value: Any) -> Any:
    """``value`` in a form where equal settings compare equal: numbers as floats, sequences as tuples."""
    if isinstance(value, (list, tuple)):
        return tuple(_setting(item) for item in value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return value


def _holds_a_value(value: Any) -> bool:
    """Whether ``value`` is, or holds, a node or a tensor (a graph value, not a setting)."""
    return any(isinstance(leaf, (fx.Node, torch.Tensor)) for leaf in torch.utils._pytree.tree_leaves(value))


def _module_at_default(module: torch.nn.Module) -> dict[str, bool]:
    """:func:`arguments_at_default` of a module: its ``__init__``'s defaults against the attributes it keeps."""
    at_default = {}
    for name, parameter in inspect.signature(type(module).__init__).parameters.items():
        if parameter.default is inspect.Parameter.empty or not hasattr(module, name):
            continue
        value = getattr(module, name)
        if isinstance(parameter.default, bool) and (value is None or isinstance(value, torch.Tensor)):
            value = value is not None  # bias=True keeps a tensor, bias=False keeps None
        elif isinstance(value, tuple) and value and all(is_default(item, parameter.default) for item in value):
            value = parameter.default  # nn.Conv2d keeps stride=1 as (1, 1): one number per dimension
        at_default[name] = is_default(value, parameter.default)
    at_default["training"] = module.training  # every module's mode; eval is the other value
    return at_default


def full_target_name(target: Any) -> str:
    """A call target's full name: ``Tensor.<name>`` for a method's, ``str`` of an aten overload, the module and
    name of a function (``torch.nn.functional.softmax`` and ``torch.softmax`` are two targets with two
    signatures)."""
    if isinstance(target, str):
        return f"Tensor.{target}"
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return f"{getattr(target, '__module__', None) or 'torch'}.{getattr(target, '__name__', target)}"


def _spelled(signature: inspect.Signature, node: fx.Node, spelling: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    bound = signature.bind(*node.args, **node.kwargs)
    given = dict(bound.arguments)
    parameters = list(signature.parameters.values())
    if spelling == "keywords":
        positional_only = [p.name for p in parameters if p.kind is p.POSITIONAL_ONLY]
        args = tuple(given[name] for name in positional_only if name in given)
        return args, {name: value for name, value in given.items() if name not in positional_only}
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for parameter in parameters:
        present = parameter.name in given
        value = given[parameter.name] if present else parameter.default
        if spelling == "shortest" and (not present or _equals_default(value, parameter.default)):
            if parameter.kind in _POSITIONAL:
                args.append(_LEFT_OUT)
            continue
        if value is inspect.Parameter.empty:
            raise ValueError(f"{node.format_node()}: {parameter.name} has no value and no default")
        if parameter.kind in _POSITIONAL:
            args.append(value)
        else:
            kwargs[parameter.name] = value
    if spelling == "shortest":
        while args and args[-1] is _LEFT_OUT:
            args.pop()
        if any(arg is _LEFT_OUT for arg in args):  # a default between two given arguments: write it out
            defaults = [p.default for p in parameters if p.kind in _POSITIONAL]
            args = [defaults[i] if arg is _LEFT_OUT else arg for i, arg in enumerate(args)]
    return tuple(args), kwargs


def call_argument(node: fx.Node, name: str, default: Any = None) -> Any:
    """The value of argument ``name`` in the call ``node`` makes.

    Looks in ``node.kwargs``, then at the argument's position in the target's signature (aten
    schemas, torch builtins such as ``torch.conv2d`` or ``torch.div`` and Python functions: see
    :func:`call_signature`), then at the signature's default, then returns ``default``. A
    ``call_method`` node is read like the torch function of its name, ``self`` first (``x.mean(-1)``
    like ``torch.mean(x, -1)``); a method torch has no function for (``x.view``) has only its
    keywords known.

    Example: for ``F.dropout(x, 0.5)`` (``training`` left out) ``call_argument(node, "training")``
    is ``True``, the default of ``F.dropout``.
    """
    if name in node.kwargs:
        return node.kwargs[name]
    signature = call_signature(node)
    if signature is None or name not in signature.parameters:
        return default
    bound = signature.bind(*node.args, **node.kwargs)
    if name in bound.arguments:
        return bound.arguments[name]
    parameter_default = signature.parameters[name].default
    return default if parameter_default is inspect.Parameter.empty else parameter_default


def call_input(node: fx.Node) -> Any:
    """The first argument of the call ``node`` makes (the ``input`` or ``self`` tensor), by position or name.

    ``F.relu(x)``, ``F.relu(input=x)``, ``aten.relu(self=x)``, ``x.relu()`` and a module call ``relu(x)``
    all give ``x``; None when the call has no argument.
    """
    if node.args:
        return node.args[0]
    signature = call_signature(node)
    if signature is not None:
        first = next(iter(signature.parameters), None)  # torch._C._functorch.lazy_load_decompositions() has none
        return None if first is None else call_argument(node, first)
    # No signature to read: the names torch gives a first tensor, else the first keyword (a guess).
    named = [node.kwargs[name] for name in ("input", "self", "tensor") if name in node.kwargs]
    return named[0] if named else next(iter(node.kwargs.values()), None)


_LEFT_OUT = object()


def canonical_arguments(node: fx.Node) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``node``'s arguments spelled one way, whatever way the graph spells them: ``(args, kwargs)``.

    Every argument the call passes goes by position up to the first one it leaves out; the ones after
    that gap, and keyword-only ones, go by name (the signature's names: ``self`` for aten operators).
    ``aten.sigmoid(self=x)`` and ``aten.sigmoid(x)`` both give ``((x,), {})``; ``F.layer_norm(x, s,
    weight=w)`` stays so. A call whose signature cannot be told is returned as it is.
    """
    signature = call_signature(node)
    if signature is None:
        return tuple(node.args), dict(node.kwargs)
    given = signature.bind(*node.args, **node.kwargs).arguments
    # Keyword-only in any overload the call binds to stays a keyword: Python's torch.add takes alpha only by
    # name, though the schema of add.Scalar, which a number operand selects, lists it third.
    keyword_only = {
        parameter.name
        for candidate in _binding_signatures(node)
        for parameter in candidate.parameters.values()
        if parameter.kind is parameter.KEYWORD_ONLY
    }
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    gap = False
    for parameter in signature.parameters.values():
        if parameter.name not in given:
            gap = gap or parameter.kind in _POSITIONAL
            continue
        if parameter.kind in _POSITIONAL and not gap and parameter.name not in keyword_only:
            args.append(given[parameter.name])
        else:
            kwargs[parameter.name] = given[parameter.name]
    return tuple(args), kwargs


def respelled(gm: fx.GraphModule, spelling: str, inputs: Sequence[Any] | None = None) -> tuple[fx.GraphModule, int]:
    """A copy of ``gm`` whose calls spell their arguments as ``spelling`` says, and how many changed.

    A call is respelled where its signature is certain: every overload of its target names and orders its
    parameters alike (aten operators, ``F.gelu``, ``torch.conv2d``). With ``inputs``, the ``keywords``
    spelling also names the arguments of overloaded builtins whose overload the values tell
    (``torch.div(x, 2.0)``, ``torch.pow(x, 2)``, ``torch.add(x, y, alpha=2)``: :func:`call_signature`) and of
    methods named like a torch function (``x.div(other=2.0)``, ``x.mean(dim=-1, keepdim=True)``), each
    call only if, tried on the values it meets when the graph runs, PyTorch's argument parser accepts the
    names, nothing new is warned and the answer is bitwise the original call's (Python's overloads are not
    always the schemas': ``torch.pow(input=2.0, exponent=x)`` is refused, its scalar is ``self``). Writing
    such a call's defaults out, or leaving them out, would need the overload's own defaults and kinds,
    which the schemas do not always give as Python's parser has them (``torch.add(x, 2.0, 1)`` is a
    deprecated overload of its own), so the other spellings leave those calls as they are.

    Args:
        gm: the graph to copy (left untouched); the copy shares its submodules, parameters and buffers.
        spelling: one of :data:`ARGUMENT_SPELLINGS`.
        inputs: when given, the copy is run on them beside ``gm`` and must give bitwise the same
            outputs (``AssertionError`` otherwise: the respelling itself would be wrong).

    Returns:
        ``(copy, changed)``: ``changed`` counts the calls whose ``args`` or ``kwargs`` differ.
    """
    if spelling not in ARGUMENT_SPELLINGS:
        raise ValueError(f"unknown spelling {spelling!r}; expected one of {ARGUMENT_SPELLINGS}")
    # A new graph over the same modules, parameters and buffers (as a traced graph shares the model's):
    copied = fx.GraphModule(gm, copy.deepcopy(gm.graph), class_name=type(gm).__name__)
    certain: dict[fx.Node, Call] = {}
    to_try: dict[fx.Node, Call] = {}
    for node in copied.graph.nodes:
        signature = call_signature(node)
        aten_operator = isinstance(node.target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket))
        if signature is None or (spelling == "keywords" and aten_operator):
            continue
        args, kwargs = _spelled(signature, node, spelling)
        self_name = next(iter(signature.parameters), None)
        if node.op == "call_method" and self_name in kwargs:  # x.div(other=y): a method's self is never named
            args = (kwargs.pop(self_name), *args)
        if args != tuple(node.args) or kwargs != dict(node.kwargs):
            (certain if _respellable_signature(node) is not None else to_try)[node] = (args, kwargs)
    if to_try and inputs is not None and spelling == "keywords":
        certain.update(_CallTrials(copied, to_try).accepted(inputs))
    for node, (args, kwargs) in certain.items():
        node.args, node.kwargs = args, kwargs
    copied.recompile()
    if inputs is not None:
        _assert_same_outputs(gm, copied, inputs, spelling)
    return copied, len(certain)


class _CallTrials(fx.Interpreter):
    """Runs a graph and, at each call of ``proposals`` (node -> its respelled ``(args, kwargs)``), tries the
    respelled call on the values the call meets there: :meth:`accepted` gives the proposals that held."""

    def __init__(self, gm: fx.GraphModule, proposals: dict[fx.Node, Call]) -> None:
        super().__init__(gm)
        self.proposals = proposals
        self.held: dict[fx.Node, Call] = {}

    def accepted(self, inputs: Sequence[Any]) -> dict[fx.Node, Call]:
        # The graph's parameters and buffers are the model's: this extra run must leave them as they were (a
        # BatchNorm in training mode updates its running statistics).
        state = [*self.module.parameters(), *self.module.buffers()]
        with torch.no_grad():
            saved = [tensor.detach().clone() for tensor in state]
            torch.manual_seed(0)
            try:
                self.run(*fresh_copies(inputs))
            finally:
                for tensor, value in zip(state, saved):
                    tensor.copy_(value)
        return self.held

    def run_node(self, n: fx.Node) -> Any:
        if n in self.proposals:
            written = self.fetch_args_kwargs_from_env(n)
            args, kwargs = self.proposals[n]
            respelled_values = (self.map_nodes_to_values(args, n), self.map_nodes_to_values(kwargs, n))
            call = n.target if n.op == "call_function" else lambda tensor, *a, **k: getattr(tensor, n.target)(*a, **k)
            if _same_call(call, written, respelled_values):
                self.held[n] = self.proposals[n]
        return super().run_node(n)


def _same_call(target: Any, written: tuple[Any, Any], respelled_call: tuple[Any, Any]) -> bool:
    """Whether ``target`` called as ``respelled_call`` (``(args, kwargs)``) is accepted, warns nothing the call as
    ``written`` does not, and answers bitwise alike, each on fresh copies of its tensors from one seed."""
    answers, warned = [], []
    for args, kwargs in (written, respelled_call):
        args, kwargs = fresh_copies((args, kwargs))
        torch.manual_seed(0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                answers.append(target(*args, **kwargs))
            except Exception:  # noqa: BLE001 - a spelling PyTorch refuses is simply not used
                return False
        warned.append({str(warning.message) for warning in caught})
    return _same_answers(answers[1], answers[0]) and warned[1] <= warned[0]


def _assert_same_outputs(gm: fx.GraphModule, copied: fx.GraphModule, inputs: Sequence[Any], spelling: str) -> None:
    # Each run on copies of its own: a graph that writes its inputs in place (x.add_(y)) must leave the caller's
    # tensors, which a backend receives as its example inputs, as they were.
    torch.manual_seed(0)
    expected = run_graph(gm, *fresh_copies(inputs))
    torch.manual_seed(0)
    actual = run_graph(copied, *fresh_copies(inputs))
    assert _same_answers(actual, expected), (
        f"respelling the graph as {spelling!r} changed what it computes (a fault of labkit/spellings.py)"
    )


def _same_answers(actual: Any, expected: Any) -> bool:
    """Whether two answers (tensors, numbers, or nests of them) have the same structure and every leaf bit for bit."""
    flat_actual, flat_expected = torch.utils._pytree.tree_leaves(actual), torch.utils._pytree.tree_leaves(expected)
    return len(flat_actual) == len(flat_expected) and all(map(_bitwise_equal, flat_actual, flat_expected))


def _bitwise_equal(actual: Any, expected: Any) -> bool:
    """The same value bit for bit: NaN equals NaN, -0.0 differs from +0.0 (``torch.equal`` says neither)."""
    if not isinstance(expected, torch.Tensor):
        return actual == expected
    if not isinstance(actual, torch.Tensor) or (actual.dtype, actual.shape) != (expected.dtype, expected.shape):
        return False
    if expected.is_floating_point() or expected.is_complex():
        # Flattened and copied first: a 0-dim tensor, or one whose last stride is not 1 (a transpose of a [1, n]
        # matrix, a one-element strided slice: contiguous() leaves both as they are), has no byte view of its own.
        as_bytes = lambda t: t.detach().reshape(-1).clone(memory_format=torch.contiguous_format).view(torch.uint8)  # noqa: E731
        return torch.equal(as_bytes(actual), as_bytes(expected))
    return torch.equal(actual, expected)
