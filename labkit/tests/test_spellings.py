"""``labkit.spellings``: the same calls, their arguments spelled three ways, computing exactly the same."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F
from torch import fx

from labkit.fx_nodes import run_graph
from labkit.spellings import (
    ARGUMENT_SPELLINGS,
    arguments_at_default,
    call_input,
    call_signature,
    canonical_arguments,
    number_arguments_at_zero,
    required_argument_values,
    respelled,
)

aten = torch.ops.aten


def graph_of(*calls) -> fx.GraphModule:
    """One graph of ``x``: each call ``(target, args_after_x, kwargs)`` applied to the previous value."""
    graph = fx.Graph()
    value = graph.placeholder("x")
    for target, args, kwargs in calls:
        value = graph.call_function(target, (value, *args), kwargs)
    graph.output(value)
    return fx.GraphModule(torch.nn.Module(), graph)


def only_call(gm: fx.GraphModule) -> fx.Node:
    (node,) = [node for node in gm.graph.nodes if node.op == "call_function"]
    return node


def test_each_spelling_of_an_aten_call():
    gm = graph_of((aten.leaky_relu.default, (0.2,), {}))
    x = torch.randn(5)
    keywords, changed = respelled(gm, "keywords", [x])
    assert changed == 0, "the dispatcher records aten calls by position: no tracer names their arguments"
    positional, _ = respelled(graph_of((aten.leaky_relu.default, (), {})), "positional", [x])
    assert only_call(positional).kwargs == {} and only_call(positional).args[1] == 0.01, "the default written out"
    default = graph_of((aten.leaky_relu.default, (0.01,), {}))
    shortest, changed = respelled(default, "shortest", [x])
    assert changed == 1 and len(only_call(shortest).args) == 1, "the default slope is left out"
    assert torch.equal(run_graph(shortest, x), run_graph(default, x))


def test_positional_writes_defaults_out_and_keeps_keyword_only_arguments_keywords():
    gm = graph_of((F.gelu, (), {"approximate": "tanh"}), (F.dropout, (0.5,), {"training": False}))
    x = torch.randn(4)
    positional, changed = respelled(gm, "positional", [x])
    gelu, dropout = [node for node in positional.graph.nodes if node.op == "call_function"]
    assert changed >= 1
    assert dropout.args[1:] == (0.5, False, False) and dropout.kwargs == {}, "F.dropout(x, p, training, inplace)"
    assert torch.equal(run_graph(positional, x), run_graph(gm, x))


def test_shortest_writes_a_default_out_that_sits_between_two_given_arguments():
    gm = graph_of((F.dropout, (), {"training": False}))  # p is the default but training follows it
    shortest, _ = respelled(gm, "shortest", [torch.randn(3)])
    assert only_call(shortest).args[1:] == (0.5, False)


def test_python_level_calls_are_respelled_by_name():
    gm = graph_of((F.leaky_relu, (0.2,), {}))
    keywords, changed = respelled(gm, "keywords", [torch.randn(5)])
    assert changed == 1 and only_call(keywords).args == ()
    kwargs = only_call(keywords).kwargs
    assert (
        set(kwargs) == {"input", "negative_slope"} and kwargs["input"].name == "x" and kwargs["negative_slope"] == 0.2
    )


def test_a_python_function_is_read_by_its_own_signature_not_torchscripts():
    """TorchScript registers ``split(input, split_size, dim)`` for ``torch.split``, a Python function whose
    parameters are ``(tensor, split_size_or_sections, dim=0)``: only Python's names reach it."""
    gm = graph_of((torch.split, (), {"split_size_or_sections": 2, "dim": 1}))
    split = only_call(gm)
    split.kwargs = {"tensor": split.args[0], **split.kwargs}
    split.args = ()
    assert list(call_signature(split).parameters) == ["tensor", "split_size_or_sections", "dim"]
    assert canonical_arguments(split) == ((next(iter(gm.graph.nodes)), 2, 1), {})
    positional, changed = respelled(graph_of((torch.split, (2,), {"dim": 1})), "keywords", [torch.randn(3, 5)])
    assert changed == 1 and set(only_call(positional).kwargs) == {"tensor", "split_size_or_sections", "dim"}


def test_builtins_whose_overloads_name_the_arguments_differently_keep_their_spelling():
    gm = graph_of((torch.where, (0.0, -2.0), {}))  # where(condition, input, other) / where(condition, self, other)
    for spelling in ARGUMENT_SPELLINGS:
        assert respelled(gm, spelling, [torch.rand(3) > 0.5])[1] == 0


def test_torch_builtins_are_respelled_where_their_overloads_agree():
    conv = graph_of((torch.conv2d, (torch.ones(2, 3, 1, 1),), {"padding": 0}))
    assert call_signature(only_call(conv)) is not None
    keywords, changed = respelled(conv, "keywords", [torch.randn(1, 3, 4, 4)])
    assert changed == 1 and "weight" in only_call(keywords).kwargs


def test_overloaded_builtins_are_named_where_the_values_tell_the_overload():
    # torch.div has Tensor, Number and TorchScript's (a: int, b: int) overloads: the values pick one.
    gm = fx.symbolic_trace(lambda x, y: (torch.div(x, 2.0), torch.pow(x, 2), torch.add(x, y, alpha=2)))
    div, pow_, add = [node for node in gm.graph.nodes if node.op == "call_function"]
    assert call_signature(div) is None, "no value recorded for x: it could be an int (div(a: int, b: int))"
    x, y = torch.randn(5), torch.randn(5)
    for placeholder, value in zip(gm.graph.find_nodes(op="placeholder"), (x, y)):
        placeholder.meta["val"] = value  # as make_fx and export record (Dynamo: example_value)
    assert str(call_signature(div)) == "(input: torch.Tensor, other: numbers.Number) -> torch.Tensor"
    keywords, changed = respelled(gm, "keywords", [x, y])
    assert changed == 3
    calls = [node for node in keywords.graph.nodes if node.op == "call_function"]
    assert [(node.args, sorted(node.kwargs)) for node in calls] == [
        ((), ["input", "other"]),
        ((), ["exponent", "input"]),
        ((), ["alpha", "input", "other"]),
    ]
    for spelling in ("positional", "shortest"):  # the overload's own defaults are not certain: left as written
        assert respelled(gm, spelling, [x, y])[1] == 0
    assert respelled(gm, "keywords")[1] == 0, "without values to try the names on, nothing uncertain is written"


def test_a_name_pythons_parser_refuses_is_not_written():
    gm = fx.symbolic_trace(lambda x: torch.pow(2.0, x))  # the schema says input=, Python's parser wants self=
    next(iter(gm.graph.nodes)).meta["val"] = torch.randn(4)
    keywords, changed = respelled(gm, "keywords", [torch.randn(4)])
    assert changed == 0 and only_call(keywords).args[0] == 2.0


def test_methods_are_read_and_named_like_the_torch_function_of_their_name():
    gm = fx.symbolic_trace(lambda x: (x.mean(-1, keepdim=True), x.split(1), x.view(-1)))
    x_node = next(iter(gm.graph.nodes))
    mean, split, view = [node for node in gm.graph.nodes if node.op == "call_method"]
    assert canonical_arguments(mean) == ((x_node, -1, True), {}), "x.mean binds like torch.mean(x, dim, keepdim)"
    assert call_signature(view) is None, "torch has no view function: nothing to read it by"
    keywords, changed = respelled(gm, "keywords", [torch.randn(2, 3)])
    mean, split, view = [node for node in keywords.graph.nodes if node.op == "call_method"]
    assert changed == 1 and mean.args == (mean.args[0],) and mean.kwargs == {"dim": -1, "keepdim": True}
    assert split.args[1:] == (1,) and not split.kwargs, "Tensor.split names it split_size, torch.split otherwise"


def test_calls_the_values_cannot_place_are_not_read_by_a_guess():
    """A node without a recorded value could be a tensor or a number; a method whose torch function puts another
    argument first, or is Python's own, is not that function; a signature the arguments bind to alone is kept."""
    gm = fx.symbolic_trace(
        lambda x, c, y: (
            torch.max(x, x.dim() - 1),  # max(input, dim) or max(input, other)
            x.where(c, y),  # torch.where(condition, input, other): the method's self is the input
            x.norm(2, 1),  # torch.norm is a Python function with out before dtype
            F.interpolate(x, size=(8, 8)),  # one Python signature: read as before
        )
    )
    max_, interpolate = [node for node in gm.graph.nodes if node.target in (torch.max, F.interpolate)]
    where, norm = [node for node in gm.graph.nodes if node.op == "call_method" and node.target in ("where", "norm")]
    assert call_signature(max_) is None and call_signature(where) is None and call_signature(norm) is None
    assert call_signature(interpolate) is not None


def test_an_argument_python_takes_only_by_name_stays_a_keyword_in_the_canonical_spelling():
    gm = fx.symbolic_trace(lambda x: torch.add(x, 2.0, alpha=3))
    x_node = next(iter(gm.graph.nodes))
    x_node.meta["val"] = torch.randn(3)
    (add,) = [node for node in gm.graph.nodes if node.op == "call_function"]
    assert canonical_arguments(add) == ((x_node, 2.0), {"alpha": 3}), "add.Scalar's schema lists alpha third"


def test_trying_names_leaves_the_models_state_as_it_was():
    class Halved(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = torch.nn.BatchNorm1d(4).train()

        def forward(self, x):
            return torch.div(self.norm(x), 2.0)

    model = Halved()
    gm = fx.symbolic_trace(model)
    x = torch.randn(6, 4) + 3
    for node in gm.graph.nodes:  # values recorded, so that torch.div's overload is told and its names tried
        node.meta["val"] = x
    respelled_gm, changed = respelled(gm, "keywords", [x])
    assert changed == 1
    # the two runs that check the copy (the original, then the copy) update the statistics once each; the trial not
    assert int(model.norm.num_batches_tracked) == 2


def test_calls_without_a_signature_are_left_as_they_are():
    gm = graph_of((operator.mul, (2,), {}))
    for spelling in ARGUMENT_SPELLINGS:
        copy, changed = respelled(gm, spelling, [torch.randn(3)])
        assert changed == 0 and only_call(copy).args[1:] == (2,)


def test_the_copy_shares_the_modules_parameters_and_buffers_and_leaves_the_original_alone():
    model = torch.nn.BatchNorm1d(4).train()
    gm = fx.symbolic_trace(lambda x: F.batch_norm(x, model.running_mean, model.running_var, None, None, True))
    keywords, _ = respelled(gm, "keywords")
    before = [node.args for node in gm.graph.nodes]
    run_graph(keywords, torch.randn(5, 4) + 3)
    assert model.running_mean.abs().sum() > 0, "the respelled graph updated the model's own statistics"
    assert [node.args for node in gm.graph.nodes] == before


def test_a_respelling_that_changes_the_result_is_refused(monkeypatch):
    from labkit import spellings

    gm = graph_of((aten.leaky_relu.default, (0.2,), {}))
    monkeypatch.setattr(spellings, "_spelled", lambda signature, node, spelling: ((node.args[0], 0.5), {}))
    with pytest.raises(AssertionError, match="changed what it computes"):
        respelled(gm, "positional", [torch.randn(8)])


def test_nan_and_signed_zeros_compare_bit_for_bit():
    gm = graph_of((aten.mul.Tensor, (1.0,), {}))
    x = torch.tensor([float("nan"), -0.0, 0.0])
    respelled(gm, "keywords", [x])  # NaN == NaN here: no AssertionError


@pytest.mark.parametrize(
    "value",
    [torch.tensor(2.5), torch.randn(1, 2).t(), torch.randn(4, 6)[:, ::2], torch.randn(4)[::2][:1]],
    ids=["0-dim", "t-of-1xn", "strided", "one-element-strided"],
)
def test_results_without_a_byte_view_of_their_own_are_compared(value):
    """A 0-dim result, or one whose last stride is not 1 (a transpose of [1, n], a one-element strided slice),
    compares bit for bit too."""
    from labkit.spellings import _bitwise_equal

    assert _bitwise_equal(value, value)
    respelled(graph_of((aten.alias.default, (), {})), "keywords", [value])


def test_aten_operator_packets_keep_their_spelling():
    """Dynamo records ``weight.T`` as the packet ``aten.numpy_T``, which takes no ``self=`` keyword."""
    gm = graph_of((aten.numpy_T, (), {}))
    copied, changed = respelled(gm, "keywords", [torch.randn(3, 4)])
    assert changed == 0 and not only_call(copied).kwargs


def test_a_graph_that_writes_its_inputs_leaves_the_callers_tensors_alone():
    """The check runs both graphs on copies: the tensors given are a backend's example inputs, the caller's own."""
    gm = graph_of((aten.add_.Tensor, (1.0,), {}))
    x = torch.zeros(3)
    respelled(gm, "positional", [x])
    assert torch.equal(x, torch.zeros(3))


def test_an_unknown_spelling_is_refused():
    with pytest.raises(ValueError, match="unknown spelling"):
        respelled(graph_of(), "backwards")


def test_the_input_of_a_call_to_a_function_without_parameters_is_none():
    """torch.vmap's graphs call ``lazy_load_decompositions()``: no parameter, no input (it raised StopIteration)."""
    graph = fx.Graph()
    node = graph.call_function(torch._functorch.predispatch.lazy_load_decompositions)
    assert call_input(node) is None


def test_arguments_at_default_read_a_calls_signature_and_a_modules_configuration():
    graph = fx.Graph()
    x = graph.placeholder("x")
    call = graph.call_function(F.gelu, (x,), {"approximate": "tanh"})
    assert arguments_at_default(call) == {"approximate": False}
    module = torch.nn.Conv2d(3, 4, 3, stride=2, bias=False)
    node = graph.call_module("conv", (x,))
    met = arguments_at_default(node, {"conv": module})
    assert met["stride"] is False and met["padding"] is True and met["dilation"] is True  # (1, 1) is stride=1
    assert met["bias"] is False and met["training"] is True  # bias=False keeps None; a new module trains


def test_required_argument_values_read_settings_alike_and_graph_values_as_values():
    """aten.convolution's settings have no default: their values are recorded, equal ones alike ([1, 1] and (1, 1),
    2 and 2.0); a tensor argument is a graph value, ``None`` in its place a value of its own."""
    graph = fx.Graph()
    x, w = graph.placeholder("x"), graph.placeholder("w")
    settings = ([1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    regular = graph.call_function(aten.convolution.default, (x, w, None, *settings))
    transposed = graph.call_function(aten.convolution.default, (x, w, w, (1, 1), (0, 0), (1, 1), True, (0, 0), 2.0))
    assert required_argument_values(regular) == {
        "input": "<value>", "weight": "<value>", "bias": "None", "stride": "(1.0, 1.0)", "padding": "(0.0, 0.0)",
        "dilation": "(1.0, 1.0)", "transposed": "False", "output_padding": "(0.0, 0.0)", "groups": "1.0",
    }  # fmt: skip
    other = required_argument_values(transposed)
    assert (other["bias"], other["transposed"], other["groups"]) == ("<value>", "True", "2.0")
    assert other["stride"] == "(1.0, 1.0)"  # a tuple reads as the list does
    assert required_argument_values(graph.call_function(F.gelu, (x,), {"approximate": "tanh"})) == {"input": "<value>"}
    assert required_argument_values(graph.call_module("conv", (x,))) is None  # a module's settings have defaults


def test_number_arguments_at_zero_read_every_real_number_with_a_default_other_than_zero():
    """eps (float), scale (float? = None) and alpha (Scalar) are read, at 0 or not, in Python and aten calls; an int
    dim, a bool flag, a tensor and an argument whose default is 0 (dropout_p) are not."""
    graph = fx.Graph()
    x = graph.placeholder("x")
    layer_norm = graph.call_function(F.layer_norm, (x, (4,)), {"eps": 0.0})
    attention = graph.call_function(F.scaled_dot_product_attention, (x, x, x), {"scale": 0.5})
    add = graph.call_function(aten.add.Tensor, (x, x), {"alpha": 0})
    softmax = graph.call_function(aten._softmax.default, (x, -1, False))
    assert number_arguments_at_zero(layer_norm) == {"eps": True}
    assert number_arguments_at_zero(attention) == {"scale": False}
    assert number_arguments_at_zero(add) == {"alpha": True}
    assert number_arguments_at_zero(softmax) == {}
    assert number_arguments_at_zero(graph.call_module("norm", (x,))) is None
