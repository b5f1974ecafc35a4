"""What lab 1's graded tests check, and how they build their cases (harness: do not edit).

``test_lab.py`` (and the held-out tests) assert through these helpers, so each test reads as its
contract: build a case, run your pass, assert what must hold. Read them to see exactly what a
failing test measured:

- **counting nodes** (:func:`count_nodes`, :func:`batch_norms`, :func:`relus`, ...): counted here,
  from the graph itself, never from a pass's own counters, and only on a graph whose code is the
  program it runs (:func:`inspected`: a rewrite must end with ``gm.recompile()``). Each counter
  knows every dialect's spelling of its operator (a module, a ``torch`` or ``F`` function, a
  method, an aten overload), so a pass matched in one dialect only is caught;
- **reading a graph's constants** (:func:`conv_weights`, :func:`constant_calls`,
  :func:`onednn_forms`, ...): the values a rewritten graph holds, and their layouts;
- **assertions** (:func:`assert_close`, :func:`assert_fired`, :func:`assert_lowered`, ...): each
  failure says what was checked and what it points to;
- **building cases** (:func:`conv_bn_model`, :func:`tiny_resnet_graph`, :func:`dynamo_graph`, ...):
  seeded models and graphs, the same on every run;
- **broken passes** the pass manager must catch (:func:`scale_outputs_by_1_001`,
  :func:`returns_the_module`).

The tolerance ``RTOL = ATOL = 1e-5`` and why it is sound are explained in ``test_lab.py``'s docstring.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx, nn
from torch.fx.passes.infra.pass_base import PassResult
from torch.utils._pytree import tree_leaves

from lab01_fx_passes.given.capture import CapturedGraph, capture
from lab01_fx_passes.given.fused_ops import LINEAR_GELU
from lab01_fx_passes.given.graph_tools import OpName, call_argument, fetch_attr
from lab01_fx_passes.given.models import TinyResNet, eps_sensitive_batch_norm, randomize_batch_norm
from lab01_fx_passes.given.pass_report import reason_of
from labkit.fx_nodes import code_matches_graph
from labkit.numerics import output_error, outputs_close, run_in_float64

#: The tests' tolerance: ``|actual - expected| <= ATOL + RTOL * |expected|`` (see test_lab.py's docstring).
RTOL = 1e-5
ATOL = 1e-5

aten = torch.ops.aten


# -- counting nodes, independently of the code under test ------------------------------------------
def modules_of(gm: fx.GraphModule) -> dict[str, nn.Module]:
    """``gm``'s submodules by qualified name (what ``call_module`` targets name)."""
    return dict(gm.named_modules())


def inspected(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm``, after checking that the graph about to be counted is the program ``gm(...)`` runs."""
    assert code_matches_graph(gm), (
        "the GraphModule's code is not the code of its graph: call gm.recompile() after editing gm.graph "
        "(gm(...) would run the program as it was before the rewrite)"
    )
    return gm


def node_count(gm: fx.GraphModule) -> int:
    """``len(gm.graph.nodes)``, of a graph that is what ``gm`` runs."""
    return len(inspected(gm).graph.nodes)


def count_nodes(gm: fx.GraphModule, *, modules=(), functions=(), methods=()) -> int:
    """How many nodes call one of the given module types, function targets or method names."""
    return count_nodes_of(gm, gm.graph.nodes, modules=modules, functions=functions, methods=methods)


def count_nodes_of(gm: fx.GraphModule, nodes, *, modules=(), functions=(), methods=()) -> int:
    """How many of ``nodes`` (nodes of ``gm``) call one of the given module types, functions or methods."""
    table = modules_of(inspected(gm))
    return sum(
        (node.op == "call_module" and isinstance(table[node.target], modules))
        or (node.op == "call_function" and node.target in functions)
        or (node.op == "call_method" and node.target in methods)
        for node in nodes
    )


BATCH_NORM_FUNCTIONS = (
    F.batch_norm, aten.batch_norm.default, aten.native_batch_norm.default,
    aten._native_batch_norm_legit_no_training.default, aten._native_batch_norm_legit.default,
    aten._native_batch_norm_legit_functional.default,
)  # fmt: skip
GELU_FUNCTIONS = (F.gelu, torch._C._nn.gelu, aten.gelu.default)
RELU_FUNCTIONS = (F.relu, torch.relu, torch.relu_, F.relu_, aten.relu.default, aten.relu_.default)
RANDOM_LIKE = (torch.rand_like, aten.rand_like.default, aten.rand.default)
HARDSWISH_FUNCTIONS = (F.hardswish, torch._C._nn.hardswish, aten.hardswish.default, aten.hardswish_.default)
#: Function convolutions whose weight is their second argument (aten, and Dynamo's torch.conv2d).
CONVOLUTION_FUNCTIONS = (aten.convolution.default, aten.conv2d.default, torch.conv2d)
ADD_FUNCTIONS = (operator.add, operator.iadd, torch.add, aten.add.Tensor, aten.add_.Tensor)
#: oneDNN's fused convolution (with a pointwise post-op) and its binary form (with an add, then a post-op).
ONEDNN_CONV = torch.ops.mkldnn._convolution_pointwise.default
ONEDNN_BINARY = torch.ops.mkldnn._convolution_pointwise.binary


def batch_norms(gm: fx.GraphModule) -> int:
    """BatchNorm nodes: the modules, ``F.batch_norm`` and every aten batch-norm overload."""
    return count_nodes(gm, modules=nn.modules.batchnorm._BatchNorm, functions=BATCH_NORM_FUNCTIONS)


def gelus(gm: fx.GraphModule) -> int:
    """GELU nodes: the module, ``F.gelu`` and ``aten.gelu``."""
    return count_nodes(gm, modules=nn.GELU, functions=GELU_FUNCTIONS)


def relus(gm: fx.GraphModule) -> int:
    """ReLU nodes in every spelling: the module, ``F.relu``, ``torch.relu``, ``x.relu()``, in place or not."""
    return count_nodes(gm, modules=nn.ReLU, functions=RELU_FUNCTIONS, methods=("relu", "relu_"))


def relus_in(gm: fx.GraphModule, node: fx.Node) -> bool:
    """Whether ``node`` calls ReLU in any spelling (the same rule as :func:`relus`, for one node)."""
    return bool(count_nodes_of(gm, [node], modules=nn.ReLU, functions=RELU_FUNCTIONS, methods=("relu", "relu_")))


def hardswishes(gm: fx.GraphModule) -> int:
    """Hardswish nodes in every spelling, in place or not."""
    return count_nodes(gm, modules=nn.Hardswish, functions=HARDSWISH_FUNCTIONS, methods=("hardswish", "hardswish_"))


def spellings(gm: fx.GraphModule, counted) -> Counter:
    """How the nodes ``counted(gm, node)`` picks out are spelled, by dialect level: ``"module"`` (a
    ``call_module``), ``"aten"`` (an ``OpOverload`` target) or ``"torch"`` (a torch function or method).
    A replacement keeps its node's level: a module stays a module, an aten op an aten op."""
    return Counter(
        "module" if node.op == "call_module" else "aten" if isinstance(node.target, torch._ops.OpOverload) else "torch"
        for node in gm.graph.nodes
        if node.op.startswith("call_") and counted(gm, node)
    )


def hardswishes_in(gm: fx.GraphModule, node: fx.Node) -> bool:
    """Whether ``node`` calls hardswish in any spelling (the rule of :func:`hardswishes`, for one node)."""
    return bool(
        count_nodes_of(
            gm, [node], modules=nn.Hardswish, functions=HARDSWISH_FUNCTIONS, methods=("hardswish", "hardswish_")
        )
    )


def fused_linear_gelus(gm: fx.GraphModule) -> int:
    """Calls of the fused Linear+GELU operator (``fused_ops.LINEAR_GELU``)."""
    return count_nodes(gm, functions=(LINEAR_GELU,))


def dense_convolutions(gm: fx.GraphModule) -> int:
    """2-D convolutions still plain (not lowered to oneDNN): ``nn.Conv2d`` modules and convolution functions."""
    return count_nodes(gm, modules=nn.Conv2d, functions=CONVOLUTION_FUNCTIONS)


def adds(gm: fx.GraphModule) -> int:
    """Additions in every spelling: ``+``, ``+=``, ``torch.add``, aten's ``add`` and ``add_``, ``x.add(...)``."""
    return count_nodes(gm, functions=ADD_FUNCTIONS, methods=("add", "add_"))


# -- reading a graph's constants -------------------------------------------------------------------
def get_attr_targets(gm: fx.GraphModule) -> set[str]:
    """The attributes ``gm``'s ``get_attr`` nodes read (a folded constant is a new one)."""
    return {node.target for node in inspected(gm).graph.nodes if node.op == "get_attr"}


def constant_calls(gm: fx.GraphModule) -> list[fx.Node]:
    """Call nodes computed from get_attr values and literals only (what folding must leave none of)."""
    constant: set[fx.Node] = set()
    for node in inspected(gm).graph.nodes:
        if node.op == "get_attr" or (
            node.op.startswith("call") and node.all_input_nodes and set(node.all_input_nodes) <= constant
        ):
            constant.add(node)
    return [node for node in constant if node.op != "get_attr"]


def conv_weights(gm: fx.GraphModule) -> list[torch.Tensor | None]:
    """The weights of the 2-D convolutions the graph runs (modules, or get_attr constants in function
    graphs; None for a weight that is a graph input)."""
    table, weights = modules_of(inspected(gm)), []
    for node in gm.graph.nodes:
        if node.op == "call_module" and isinstance(table[node.target], nn.Conv2d):
            weights.append(table[node.target].weight)
        elif node.op == "call_function" and node.target in CONVOLUTION_FUNCTIONS:
            weight = call_argument(node, "weight")
            weights.append(fetch_attr(gm, weight.target) if weight.op == "get_attr" else None)
    return weights


def has_symbolic_sizes(gm: fx.GraphModule) -> bool:
    """Whether some value the graph records has a symbolic size (a ``torch.SymInt`` in its shape)."""
    return any(
        isinstance(size, torch.SymInt)
        for node in gm.graph.nodes
        if isinstance(node.meta.get("val"), torch.Tensor)
        for size in node.meta["val"].shape
    )


def all_channels_last(weights: list[torch.Tensor | None]) -> bool:
    """Whether every weight is a constant (not a graph input) stored channels-last."""
    return all(w is not None and w.is_contiguous(memory_format=torch.channels_last) for w in weights)


def onednn_forms(gm: fx.GraphModule) -> Counter:
    """What each oneDNN convolution of ``gm`` absorbed, read from its arguments: ``conv``, ``conv+relu``,
    ``conv+add``, ``conv+add+relu`` (counted here from the graph, not from the pass's own counters)."""
    forms: Counter = Counter()
    for node in inspected(gm).graph.nodes:
        if node.target is ONEDNN_CONV:
            attr = call_argument(node, "attr")
            assert attr in ("none", "relu"), f"{node.format_node()}: unexpected post-op {attr!r}"
            forms["conv+relu" if attr == "relu" else "conv"] += 1
        elif node.target is ONEDNN_BINARY:
            binary, unary = call_argument(node, "binary_attr"), call_argument(node, "unary_attr")
            assert binary == "add" and unary in (None, "relu"), f"{node.format_node()}: expected add (+relu)"
            forms["conv+add+relu" if unary == "relu" else "conv+add"] += 1
    return forms


def onednn_weights(gm: fx.GraphModule) -> list[torch.Tensor]:
    """The weights the graph's oneDNN convolutions read (their argument ``W``, by position or by name)."""
    weights = []
    for node in gm.graph.nodes:
        if node.target in (ONEDNN_CONV, ONEDNN_BINARY):
            weight = call_argument(node, "W")
            weights.append(fetch_attr(gm, weight.target) if weight.op == "get_attr" else None)
    return weights


# -- assertions: each failure says what was checked and what it points to -------------------------
def assert_close(actual, expected, rtol: float = RTOL, atol: float = ATOL, what: str = "the rewritten graph") -> None:
    """``|actual - expected| <= atol + rtol * |expected|`` everywhere;
    the message says how far off and where to look (or what changed shape, dtype or structure)."""
    if outputs_close(actual, expected, rtol=rtol, atol=atol):
        return
    try:
        error = output_error(actual, expected)
    except ValueError as mismatch:  # not comparable at all: a rewrite never changes these
        raise AssertionError(f"{what} returns something else than the original: {mismatch}") from None
    raise AssertionError(
        f"{what} computes something else than the original: {error} "
        f"(allowed: rtol={rtol}, atol={atol}). Far beyond float32 rounding: the rewrite changed the "
        "arithmetic (a wrong formula, a missing term), or it changed a value another node still reads"
    )


def assert_fired(result, dialect: str, what: str) -> fx.GraphModule:
    """The pass returned a PassResult that says it changed the graph, with code matching that graph."""
    assert isinstance(result, PassResult), f"a pass returns a PassResult, got {type(result).__name__}"
    reason = reason_of(result)
    assert result.modified, (
        f"the pass did not fire on the {dialect} graph: which targets does it match? It should have "
        f"found {what}; print(gm.graph) shows how this dialect spells them"
        + (f" (the pass said: {reason})" if reason else "")
    )
    gm = result.graph_module
    assert code_matches_graph(gm), (
        "the returned GraphModule's code is not the code of its graph: call gm.recompile() after "
        "editing gm.graph (gm(...) would run the program as it was before the rewrite)"
    )
    return gm


def converted_to_channels_last(lab: ModuleType, captured: CapturedGraph, convolutions: int) -> fx.GraphModule:
    """The layout pass run on ``captured``: it must fire and leave every 2-D convolution channels-last."""
    converted = assert_fired(lab.convert_to_channels_last(captured.graph_module), captured.name,
                             f"{convolutions} 2-D convolutions")  # fmt: skip
    weights = conv_weights(converted)
    assert len(weights) == convolutions and all_channels_last(weights), "every convolution weight must be channels-last"
    return converted


def assert_lowered(result, dialect: str, what: str, expected_forms: dict[str, int]) -> fx.GraphModule:
    """The lowering fired, produced exactly ``expected_forms``, and every oneDNN weight is pre-packed."""
    gm = assert_fired(result, dialect, what)
    forms = dict(onednn_forms(gm))
    assert forms == expected_forms, (
        f"onednn_lowering.py, {what} ({dialect}): oneDNN convolutions by what they absorbed: {forms}, expected "
        f"{expected_forms} (a ReLU or add another node reads, or that writes its other operand, stays apart)"
    )
    weights = onednn_weights(gm)
    assert all(w is not None and w.is_mkldnn for w in weights), (
        "every oneDNN convolution must read a pre-packed weight (an opaque oneDNN tensor from "
        "torch.ops.mkldnn._reorder_convolution_weight), packed once, not the dense weight reordered on every call"
    )
    return gm


def dead_constants(gm: fx.GraphModule) -> list[str]:
    """The targets of ``gm``'s ``get_attr`` nodes that nothing reads. Constant folding removes the ones
    only the folded region read (step 3's contract); other passes leave dead nodes to DCE."""
    return [str(node.target) for node in gm.graph.nodes if node.op == "get_attr" and not node.users]


def unchanged_because(result, *words: str) -> fx.GraphModule:
    """The pass changed nothing, and its reason names every one of ``words`` (case-insensitive)."""
    assert isinstance(result, PassResult), f"a pass returns a PassResult, got {type(result).__name__}"
    reason = reason_of(result) or ""
    assert not result.modified, f"the lowering must refuse here (it fired; its reason would have been {reason!r})"
    assert onednn_forms(result.graph_module) == Counter(), "an unchanged graph has no oneDNN convolution"
    assert all(word.lower() in reason.lower() for word in words), f"the result must say why ({words}): {reason!r}"
    return result.graph_module


# -- building cases: seeded models and graphs, the same on every run ------------------------------
def eval_model(model: nn.Module, seed: int = 0) -> nn.Module:
    """``model`` in eval mode with random BatchNorm statistics (:func:`randomize_batch_norm`), seeded."""
    torch.manual_seed(seed)
    return randomize_batch_norm(model, seed).eval()


def conv_bn_model(model: nn.Module, seed: int = 0) -> nn.Module:
    """``model`` in eval mode with BatchNorm statistics under which ``eps`` matters (running variances
    1e-4 to 1e-3): a fold that forgets ``eps`` is off by ~5% instead of by float32 rounding."""
    torch.manual_seed(seed)
    return eps_sensitive_batch_norm(model, seed).eval()


def conv_input(dims: int, in_channels: int, batch: int = 2, size: int = 7) -> torch.Tensor:
    """A random input for a ``dims``-D convolution: ``(batch, in_channels, size, ...)``."""
    return torch.randn(batch, in_channels, *([size] * dims))


def seeded(model_class: type[nn.Module], seed: int = 0) -> nn.Module:
    """``model_class()``, built right after seeding torch's generator: the same weights on every run."""
    torch.manual_seed(seed)
    return model_class()


def tiny_resnet_graph(dialect: str = "symbolic_trace") -> CapturedGraph:
    """:class:`TinyResNet` (eval mode, random BatchNorm statistics) on a 12x12 image, captured in ``dialect``."""
    model, x = eval_model(TinyResNet()), torch.randn(2, 3, 12, 12)
    return capture(model, [x], dialect)


def dynamo_graph(model: nn.Module, x: torch.Tensor) -> tuple[CapturedGraph, list[fx.Node]]:
    """``model`` captured by Dynamo, and its graph's placeholders: the model's parameters and buffers, and ``x``."""
    captured = capture(model, [x], "dynamo")
    placeholders = captured.graph_module.graph.find_nodes(op="placeholder")
    return captured, placeholders


def channels_last_graph(model: nn.Module, dialect: str, size: int = 8, spelling: str | None = None) -> CapturedGraph:
    """``model`` (in the mode it is in) captured with channels-last weights, as the layout pass of step 6
    leaves a network: with BatchNorm-free models, the lowering's tests need no other step."""
    model = model.to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0))
    return capture(model, [x], dialect, spelling)


def in_every_spelling(
    spelling: str, dialects: Sequence[str], capture_in: Callable[[str, str], CapturedGraph],
    check: Callable[[CapturedGraph], Any],
) -> None:  # fmt: skip
    """``check(captured)`` for each dialect, on the graph ``capture_in(dialect, spelling)`` captures with every
    call's arguments respelled (``labkit.spellings``): the checks a test makes on the graph as traced must
    hold however the calls pass their arguments."""
    respelled_calls = 0
    for dialect in dialects:
        captured = capture_in(dialect, spelling)
        respelled_calls += captured.respelled_calls
        check(captured)
    assert respelled_calls > 0, f"(the test's own fault) respelling as {spelling!r} changed no call: it proves nothing"


def frozen_if_dynamo(lab: ModuleType, captured: CapturedGraph) -> fx.GraphModule:
    """The captured graph, its parameters frozen first if Dynamo captured it (only constant weights can be packed)."""
    if captured.dialect != "dynamo":
        return captured.graph_module
    with torch.no_grad():
        return assert_fired(lab.freeze_parameters(captured.graph_module, captured.inputs), "dynamo", "parameters")


def float32_own_error(model: nn.Module, x: torch.Tensor) -> float:
    """How far float32 eager already is from exact (a float64 run) on this model and input."""
    with torch.no_grad():
        return output_error(model(x), run_in_float64(model, [x]).float()).max_abs


def name_and_in_place(result: OpName | None) -> tuple[str, bool] | None:
    """``op_name``'s answer as a plain ``(name, in_place)`` pair (None stays None), to compare with expected pairs."""
    return None if result is None else (result.name, result.in_place)


# -- broken passes the pass manager must catch -----------------------------------------------------
def scale_outputs_by_1_001(gm: fx.GraphModule) -> PassResult:
    """A broken 'optimisation': multiplies every output by 1.001 and does not declare it."""
    output = gm.graph.find_nodes(op="output")[0]
    with gm.graph.inserting_before(output):
        output.args = fx.node.map_arg(output.args, lambda node: gm.graph.call_function(operator.mul, (node, 1.001)))
    gm.recompile()
    return PassResult(gm, True)


def nudge_outputs(by: float, name: str):
    """A slightly wrong pass named ``name``: adds ``by`` to every output (and does not declare it)."""

    def nudge(gm: fx.GraphModule) -> PassResult:
        output = gm.graph.find_nodes(op="output")[0]
        with gm.graph.inserting_before(output):
            output.args = fx.node.map_arg(output.args, lambda node: gm.graph.call_function(operator.add, (node, by)))
        gm.recompile()
        return PassResult(gm, True)

    nudge.__name__ = nudge.__qualname__ = name
    return nudge


class OnACopy:
    """``pass_`` run on a deep copy of the graph it is given (as passes built on ``fx.Transformer`` return a new
    GraphModule), keeping its ``changes_semantics`` declaration."""

    def __init__(self, pass_, name: str) -> None:
        self.pass_, self.__name__ = pass_, name
        self.changes_semantics = getattr(pass_, "changes_semantics", False)

    def __call__(self, gm: fx.GraphModule) -> PassResult:
        import copy

        return self.pass_(copy.deepcopy(gm))


def returns_the_module(gm: fx.GraphModule) -> fx.GraphModule:
    """Not a pass by the convention: it returns the module, not a PassResult."""
    return gm


# -- step 11: exact identities -------------------------------------------------------------------------
def special_values(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    """Seeded data that finds what an identity hides: random values, plus ``-0.0``, ``+0.0``, ``inf``,
    ``-inf`` and ``nan`` in the first five elements (integers: 0, -1, and the dtype's extremes)."""
    generator = torch.Generator().manual_seed(seed)
    if dtype.is_complex:
        x = torch.randn(*shape, dtype=dtype, generator=generator)
        x.view(-1)[:3] = torch.tensor([complex(float("inf"), 0.0), complex(0.0, float("-inf")), complex(-0.0, 0.0)])
        return x
    if not dtype.is_floating_point:
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, generator=generator).bool()
        x = torch.randint(-50, 50, shape, generator=generator).to(dtype)
        x.view(-1)[:4] = torch.tensor([0, -1, torch.iinfo(dtype).max, torch.iinfo(dtype).min], dtype=dtype)
        return x
    x = torch.randn(*shape, generator=generator).to(dtype)
    x.view(-1)[:5] = torch.tensor([-0.0, 0.0, float("inf"), float("-inf"), float("nan")], dtype=dtype)
    return x


def _first_difference(actual: torch.Tensor, expected: torch.Tensor) -> str:
    same = (actual == expected) | (actual.isnan() & expected.isnan())
    if actual.is_floating_point():
        same &= torch.signbit(actual) == torch.signbit(expected)
    where = (~same).nonzero()
    if not len(where):
        return ""
    index = tuple(where[0].tolist())
    got, want = actual[index].item(), expected[index].item()
    return f"{len(where)} element(s) differ, first at {list(index)}: got {got}, expected {want}"


def assert_bitwise_equal(actual: Any, expected: Any, what: str = "the simplified graph") -> None:
    """Every output equal to the original's bit for bit: same dtype and shape, the same ``nan`` places,
    and the same sign on every zero (``1 / -0.0 == -inf``). An exact identity changes nothing at all."""
    actual_leaves, expected_leaves = tree_leaves(actual), tree_leaves(expected)
    assert len(actual_leaves) == len(expected_leaves), (
        f"{what} returns {len(actual_leaves)} values, not {len(expected_leaves)}"
    )
    for position, (got, want) in enumerate(zip(actual_leaves, expected_leaves)):
        assert isinstance(got, torch.Tensor) and (got.dtype, got.shape) == (want.dtype, want.shape), (
            f"output {position} of {what}: {getattr(got, 'dtype', type(got))} {list(getattr(got, 'shape', ()))}, "
            f"expected {want.dtype} {list(want.shape)}: the rewrite changed what the value is "
            "(broadcasting changes the shape, type promotion the dtype)"
        )
        difference = _first_difference(got, want) if not got.is_complex() else _first_difference(
            torch.view_as_real(got), torch.view_as_real(want))  # fmt: skip
        assert not difference, (
            f"output {position} of {what} is not the original's, bit for bit: {difference}. An exact identity "
            "changes no bit: was it one here? (x + 0 turns -0.0 into +0.0; x * 0 is nan on inf; a value written "
            "in place after the rewrite now reaches the other tensor)"
        )


def assert_no_output_aliases_an_input(outputs: Any, inputs: Sequence[Any]) -> None:
    """No returned tensor shares memory with an input: the original returned new tensors."""
    addresses = {t.untyped_storage().data_ptr() for t in tree_leaves(inputs) if isinstance(t, torch.Tensor)}
    for position, out in enumerate(tree_leaves(outputs)):
        if isinstance(out, torch.Tensor) and out.untyped_storage().data_ptr() in addresses:
            raise AssertionError(
                f"output {position} is an input's memory: the original returned a new tensor (x * 1 is a copy), "
                "the simplified graph hands the caller its own input back"
            )
