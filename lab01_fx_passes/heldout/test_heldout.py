"""Lab 01's held-out tests: the same contracts as ``test_lab.py``, on models, shapes, dtypes and
dialects the visible tests do not use (instructor-only; graded, never shipped to students).

A submission that recognises the visible models (their module names, channel counts, layer sizes or
the exact impure ops the visible tests plant) passes ``test_lab.py`` and loses points here; one that
implements the contracts passes both. Each test's ``area`` is all a student's feedback shows of it.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import fx, nn

from lab01_fx_passes.given.capture import capture
from lab01_fx_passes.given.checks import (
    RANDOM_LIKE,
    assert_bitwise_equal,
    assert_close,
    assert_lowered,
    batch_norms,
    conv_weights,
    count_nodes,
    dense_convolutions,
    frozen_if_dynamo,
    fused_linear_gelus,
    gelus,
    inspected,
    node_count,
    onednn_forms,
    special_values,
)  # fmt: skip
from lab01_fx_passes.given.models import FunctionModel, TinyResNet, randomize_batch_norm
from lab01_fx_passes.given.wrong_folds import wrong_fold
from labkit.fx_nodes import run_graph
from labkit.numerics import ReferenceOutputs

aten = torch.ops.aten
CONV_BN = "Conv+BN folding: other models, channel counts and BatchNorm settings"
LINEAR_GELU_AREA = "Linear+GELU fusion: other layer sizes and dialects"
DCE = "dead code elimination: other impure operations"
FOLDING = "constant folding: other constant sources"
REPLACEMENT = "operator replacement: other activations"
LAYOUT = "channels-last: other convolutions"
MANAGER = "pass manager and pipeline: other models, dtypes and outputs"


def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def mobilenet_v2() -> nn.Module:
    """torchvision's MobileNetV2 (depthwise convolutions, no conv bias, ReLU6), BN statistics randomised."""
    import torchvision

    torch.manual_seed(0)
    return randomize_batch_norm(torchvision.models.mobilenet_v2()).eval()


def assert_within_float32_budget(captured, gm: fx.GraphModule, reference: ReferenceOutputs) -> None:
    verdict = reference.compare(captured.run(gm))
    assert verdict.ok, verdict.describe()


# == Conv + BatchNorm =============================================================================
@pytest.mark.points(3)
@pytest.mark.area(CONV_BN)
def test_conv_bn_folds_every_pair_of_mobilenet_v2(lab):
    model, x = mobilenet_v2(), torch.randn(1, 3, 64, 64, generator=seeded())
    captured = capture(model, [x], "symbolic_trace")
    reference = ReferenceOutputs.measure(captured.graph_module, [x])
    assert batch_norms(captured.graph_module) == 52
    result = lab.fuse_conv_bn(captured.graph_module)
    assert result.modified and batch_norms(result.graph_module) == 0
    assert_within_float32_budget(captured, result.graph_module, reference)


class ConvBN(nn.Module):
    """One Conv2d + BatchNorm2d pair with the given shape and BN settings, then a second pair."""

    def __init__(self, in_channels: int, channels: int, eps: float, affine: bool, bias: bool) -> None:
        super().__init__()
        self.first = nn.Conv2d(in_channels, channels, (3, 1), stride=(2, 1), padding=(1, 0), bias=bias)
        self.first_norm = nn.BatchNorm2d(channels, eps=eps, affine=affine)
        self.second = nn.Conv2d(channels, 2 * channels, 1, dilation=2, bias=bias)
        self.second_norm = nn.BatchNorm2d(2 * channels, eps=eps, affine=affine)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second_norm(self.second(F.relu(self.first_norm(self.first(x)))))


@pytest.mark.points(1)
@pytest.mark.area(CONV_BN)
@pytest.mark.parametrize("dialect", ["symbolic_trace", "make_fx", "export"])
@pytest.mark.parametrize(
    "in_channels, channels, eps, affine, bias",
    [(3, 5, 1e-3, True, False), (7, 16, 1e-1, False, True), (1, 3, 1e-5, False, False)],
)
def test_conv_bn_folds_other_shapes_and_batch_norm_settings(lab, dialect, in_channels, channels, eps, affine, bias):
    model = randomize_batch_norm(ConvBN(in_channels, channels, eps, affine, bias), seed=3).eval()
    x = torch.randn(2, in_channels, 9, 6, generator=seeded(1))
    captured = capture(model, [x], dialect)
    expected = captured.run()
    result = lab.fuse_conv_bn(captured.graph_module)
    assert result.modified and batch_norms(result.graph_module) == 0
    assert_close(captured.run(result.graph_module), expected)


class TransposedThenRegular(nn.Module):
    """A ConvTranspose2d + BN (not foldable by the conv rule: its weight is [in, out, ...]) and a foldable pair."""

    def __init__(self) -> None:
        super().__init__()
        # As many input channels as output ones: the weight's first dimension matches the BN's, so only
        # the rule (a transposed convolution is not folded) keeps the fold from scaling the wrong axis.
        self.up, self.up_norm = nn.ConvTranspose2d(3, 3, 2, stride=2), nn.BatchNorm2d(3)
        self.conv, self.norm = nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(self.up_norm(self.up(x))))


@pytest.mark.points(1)
@pytest.mark.area(CONV_BN)
@pytest.mark.parametrize("dialect", ["symbolic_trace", "make_fx"])
def test_conv_bn_leaves_transposed_convolutions_alone(lab, dialect):
    model = randomize_batch_norm(TransposedThenRegular(), seed=5).eval()
    x = torch.randn(2, 3, 5, 5, generator=seeded(2))
    captured = capture(model, [x], dialect)
    expected = captured.run()
    result = lab.fuse_conv_bn(captured.graph_module)
    assert result.modified and batch_norms(result.graph_module) == 1, "only the regular pair folds"
    assert_close(captured.run(result.graph_module), expected)


class FunctionalConvSharedWeight(nn.Module):
    """``F.batch_norm(F.conv2d(x, w))``, the convolution called with no bias and nothing else, and the same
    weight read again by a second convolution that no BN follows: the fold must keep ``w`` for it."""

    def __init__(self) -> None:
        super().__init__()
        generator = seeded(7)
        self.w = nn.Parameter(torch.randn(4, 3, 3, 3, generator=generator) * 0.3)
        self.register_buffer("mean", torch.randn(4, generator=generator) * 0.1)
        self.register_buffer("var", torch.rand(4, generator=generator) * 0.5 + 0.5)
        self.gamma = nn.Parameter(1 + 0.1 * torch.randn(4, generator=generator))
        self.beta = nn.Parameter(0.1 * torch.randn(4, generator=generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normalized = F.batch_norm(F.conv2d(x, self.w), self.mean, self.var, self.gamma, self.beta)
        return normalized + F.conv2d(x, self.w)


@pytest.mark.points(1)
@pytest.mark.area(CONV_BN)
@pytest.mark.parametrize("dialect", ["symbolic_trace", "make_fx"])
def test_conv_bn_folds_a_functional_convolution_whose_weight_is_shared(lab, dialect):
    captured = capture(FunctionalConvSharedWeight().eval(), [torch.randn(2, 3, 6, 6, generator=seeded(8))], dialect)
    expected = captured.run()
    result = lab.fuse_conv_bn(captured.graph_module)
    assert result.modified and batch_norms(result.graph_module) == 0, "the one Conv -> BN pair folds"
    assert_close(captured.run(result.graph_module), expected)


# == Linear + GELU =================================================================================
class WideMLP(nn.Module):
    """A transformer MLP block at sizes the visible tests do not use: 48 -> 192 (tanh GELU) -> 48, no bias in."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(48, 192, bias=False)
        self.act = nn.GELU(approximate="tanh")
        self.down = nn.Linear(192, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(self.act(self.up(x)))


@pytest.mark.points(1)
@pytest.mark.area(LINEAR_GELU_AREA)
@pytest.mark.parametrize("dialect", ["symbolic_trace", "dynamo", "make_fx", "export", "export_core_aten"])
def test_linear_gelu_fuses_a_wide_transformer_mlp(lab, dialect):
    torch.manual_seed(4)
    model, x = WideMLP().eval(), torch.randn(3, 7, 48, generator=seeded(3))
    captured = capture(model, [x], dialect)
    expected = captured.run()
    result = lab.fuse_linear_gelu(captured.graph_module)
    assert result.modified and fused_linear_gelus(result.graph_module) == 1 and gelus(result.graph_module) == 0
    assert_close(captured.run(result.graph_module), expected)


# == Dead code elimination ==========================================================================
class OtherImpureOps(nn.Module):
    """Unused ops that must stay (in-place updates, a fresh random draw, a training-mode 2-D dropout)
    next to a dead pure chain that must go."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 1.0
        y.mul_(3)  # in-place, no users: y is returned below
        z = x + 0.0
        z.masked_fill_(z > 1.0, 1.0)
        torch.rand(x.shape)  # advances the generator
        F.dropout2d(x.unsqueeze(0), 0.25, training=True)  # random
        torch.cos(x).exp()  # dead and pure
        return y + z + torch.rand_like(x)


@pytest.mark.points(2)
@pytest.mark.area(DCE)
def test_dce_keeps_other_impure_ops_and_removes_dead_pure_ones(lab):
    gm = fx.symbolic_trace(OtherImpureOps())
    x = torch.randn(4, 3, generator=seeded(4))
    torch.manual_seed(0)
    expected = gm(x)
    before = node_count(gm)
    result = lab.eliminate_dead_code(gm)
    assert result.modified
    assert node_count(result.graph_module) == before - 2, "exactly the dead cos and exp go"
    assert count_nodes(result.graph_module, functions=(torch.rand,)) == 1
    torch.manual_seed(0)
    assert_close(run_graph(result.graph_module, x), expected, rtol=0, atol=0)


class UnusedAtenMutations(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2.0
        y.clamp_(min=0.0)
        y.sigmoid()  # dead and pure
        return y


@pytest.mark.points(1)
@pytest.mark.area(DCE)
def test_dce_keeps_in_place_aten_ops(lab):
    x = torch.randn(6, generator=seeded(5))
    captured = capture(UnusedAtenMutations(), [x], "make_fx")
    expected = captured.run()
    result = lab.eliminate_dead_code(captured.graph_module)
    assert result.modified
    assert count_nodes(result.graph_module, functions=(aten.sigmoid.default,)) == 0
    assert count_nodes(result.graph_module, functions=(aten.clamp_.default,)) == 1
    assert_close(captured.run(result.graph_module), expected, rtol=0, atol=0)


# == Constant folding ===============================================================================
class BufferArithmetic(nn.Module):
    """Constants built from a buffer and from literals, feeding an input-dependent op."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(5, 5, generator=seeded(6)))
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        table = torch.tanh(self.weight * self.scale).t()
        return x @ table + torch.ones(5) * 3


@pytest.mark.points(1)
@pytest.mark.area(FOLDING)
@pytest.mark.parametrize("dialect", ["make_fx", "export"])
def test_constant_folding_folds_buffer_and_literal_arithmetic(lab, dialect):
    captured = capture(BufferArithmetic(), [torch.randn(2, 5, generator=seeded(7))], dialect)
    expected = captured.run()
    before = node_count(captured.graph_module)
    result = lab.fold_constants(captured.graph_module)
    assert result.modified
    assert count_nodes(result.graph_module, functions=(aten.tanh.default,)) == 0, "tanh(weight * scale) is constant"
    assert node_count(result.graph_module) < before
    assert_close(captured.run(result.graph_module), expected)


class RandomLiterals(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        offsets = torch.arange(6, dtype=torch.float32).reshape(2, 3) / 4 + 1  # constant
        return x * offsets + torch.rand_like(x) * offsets  # the random draw is never constant


@pytest.mark.points(1)
@pytest.mark.area(FOLDING)
def test_constant_folding_in_dynamo_graphs_keeps_randomness(lab):
    captured = capture(RandomLiterals(), [torch.randn(2, 3, generator=seeded(8))], "dynamo")
    torch.manual_seed(2)
    expected = captured.run()
    result = lab.fold_constants(captured.graph_module)
    assert result.modified and count_nodes(result.graph_module, functions=(torch.arange,)) == 0
    assert count_nodes(result.graph_module, functions=RANDOM_LIKE) == 1
    torch.manual_seed(2)
    assert_close(captured.run(result.graph_module), expected)


# == Operator replacement ===========================================================================
class SiluZoo(nn.Module):
    """SiLU as a module, a function and a tensor method, between Linear layers (``act`` swaps it)."""

    def __init__(self, act=None) -> None:
        super().__init__()
        self.fcs = nn.ModuleList(nn.Linear(6, 6) for _ in range(3))
        self.silu = nn.SiLU()
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.act is not None:
            return self.act(self.fcs[2](self.act(self.fcs[1](self.act(self.fcs[0](x))))))
        x = self.silu(self.fcs[0](x))
        x = F.silu(self.fcs[1](x))
        return torch.sigmoid(self.fcs[2](x))


@pytest.mark.points(1)
@pytest.mark.area(REPLACEMENT)
@pytest.mark.parametrize("dialect", ["symbolic_trace", "dynamo", "make_fx"])
def test_replace_silu_and_sigmoid_with_hardswish(lab, dialect):
    torch.manual_seed(9)
    model, x = SiluZoo(), torch.randn(4, 6, generator=seeded(9))
    expected_model = SiluZoo(act=F.hardswish)
    expected_model.load_state_dict(model.state_dict())
    with torch.no_grad():
        expected = expected_model(x)
    captured = capture(model, [x], dialect)
    result = lab.replace_ops(captured.graph_module, {"silu": "hardswish", "sigmoid": "hardswish"})
    assert result.modified
    assert_close(captured.run(inspected(result.graph_module)), expected)


class SiluInPlace(nn.Module):
    """SiLU written into its input, as a module and as a function, each input read again after the write (``act``
    swaps both; it must write its input too)."""

    def __init__(self, act=None) -> None:
        super().__init__()
        self.fc, self.silu, self.act = nn.Linear(6, 6), nn.SiLU(inplace=True), act

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h, g = self.fc(x), self.fc(x * 2)
        a = self.act(h) if self.act is not None else self.silu(h)
        b = self.act(g) if self.act is not None else F.silu(g, inplace=True)
        return a + h, b * g


@pytest.mark.points(1)
@pytest.mark.area(REPLACEMENT)
@pytest.mark.parametrize("dialect", ["symbolic_trace", "dynamo", "make_fx"])
def test_replace_silu_in_place_writes_its_input_too(lab, dialect):
    torch.manual_seed(9)
    model, x = SiluInPlace().eval(), torch.randn(4, 6, generator=seeded(9))
    expected_model = SiluInPlace(act=lambda t: F.hardswish(t, inplace=True)).eval()
    expected_model.load_state_dict(model.state_dict())
    with torch.no_grad():
        expected = expected_model(x)
    captured = capture(model, [x], dialect)
    result = lab.replace_ops(captured.graph_module, {"silu": "hardswish"})
    assert result.modified
    assert_close(captured.run(inspected(result.graph_module)), expected)


# == Memory layout ===================================================================================
class OtherConvolutions(nn.Module):
    """Grouped, strided, dilated 2-D convolutions, and a 1-D one that has no channels-last form."""

    def __init__(self) -> None:
        super().__init__()
        self.grouped = nn.Conv2d(6, 12, 3, groups=3, stride=2)
        self.dilated = nn.Conv2d(12, 12, 3, dilation=2, padding=2, bias=False)
        self.temporal = nn.Conv1d(12, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dilated(torch.relu(self.grouped(x)))
        return self.temporal(y.flatten(2))


@pytest.mark.points(2)
@pytest.mark.area(LAYOUT)
@pytest.mark.parametrize("dialect", ["symbolic_trace", "make_fx"])
def test_channels_last_converts_grouped_and_dilated_convolutions(lab, dialect):
    torch.manual_seed(10)
    captured = capture(OtherConvolutions().eval(), [torch.randn(2, 6, 11, 11, generator=seeded(10))], dialect)
    expected = captured.run()
    result = lab.convert_to_channels_last(captured.graph_module)
    assert result.modified
    weights = [w for w in conv_weights(result.graph_module) if w.dim() == 4]
    assert len(weights) == 2 and all(w.is_contiguous(memory_format=torch.channels_last) for w in weights)
    output = captured.run(result.graph_module)
    assert output.is_contiguous()
    assert_close(output, expected)


# == Pass manager and pipeline ========================================================================
@pytest.mark.points(2)
@pytest.mark.area(MANAGER)
def test_default_pipeline_on_resnet18_in_aten_graphs(lab):
    import torchvision

    torch.manual_seed(11)
    model = randomize_batch_norm(torchvision.models.resnet18(num_classes=37), seed=11).eval()
    x = torch.randn(2, 3, 40, 40, generator=seeded(11))
    captured = capture(model, [x], "make_fx")
    reference = ReferenceOutputs.measure(captured.graph_module, captured.inputs)
    manager = lab.default_pipeline(captured.inputs)
    result = manager(captured.graph_module)
    assert result.modified and batch_norms(result.graph_module) == 0
    assert_within_float32_budget(captured, result.graph_module, reference)


@pytest.mark.points(2)
@pytest.mark.area(MANAGER)
def test_default_pipeline_keeps_float64_models_in_float64(lab):
    model = randomize_batch_norm(TinyResNet(channels=6, classes=5), seed=12).eval().double()
    x = torch.randn(3, 3, 10, 10, generator=seeded(12), dtype=torch.float64)
    captured = capture(model, [x], "symbolic_trace")
    expected = captured.run()
    result = lab.default_pipeline(captured.inputs)(captured.graph_module)
    assert batch_norms(result.graph_module) == 0 and fused_linear_gelus(result.graph_module) == 1
    output = captured.run(result.graph_module)
    assert output.dtype == torch.float64
    assert_close(output, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.points(2)
@pytest.mark.area(MANAGER)
def test_pass_manager_stops_a_wrong_fold_in_mobilenet_v2(lab):
    model, x = mobilenet_v2(), torch.randn(1, 3, 64, 64, generator=seeded(13))
    manager = lab.PassManager([lab.fuse_linear_gelu, wrong_fold("forgets_shift")], example_inputs=[x])
    with pytest.raises(lab.PassValidationError, match="wrong_fold_forgets_shift") as caught:
        manager(fx.symbolic_trace(model))
    assert caught.value.pass_name == "wrong_fold_forgets_shift"


class TwoHeads(nn.Module):
    """Two outputs of very different scales: box coordinates (~1e3) and class scores (~1e-2)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.boxes, self.scores = nn.Linear(8, 4), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.body(x).flatten(1)
        return self.boxes(features) * 1000, torch.softmax(self.scores(features), dim=1) * 0.03


def nudge_the_small_output(gm: fx.GraphModule):
    """A broken pass: moves only the small output, by 1%: nothing next to the large one."""
    from torch.fx.passes.infra.pass_base import PassResult

    output = gm.graph.find_nodes(op="output")[0]
    boxes, scores = output.args[0]
    with gm.graph.inserting_before(output):
        nudged = gm.graph.call_function(torch.mul, (scores, 1.01))
    output.args = ((boxes, nudged),)
    gm.recompile()
    return PassResult(gm, True)


@pytest.mark.points(2)
@pytest.mark.area(MANAGER)
def test_pass_manager_judges_each_output_at_its_own_scale(lab):
    model = randomize_batch_norm(TwoHeads(), seed=14).eval()
    x = torch.randn(2, 3, 8, 8, generator=seeded(14))
    manager = lab.PassManager([lab.fuse_conv_bn, nudge_the_small_output], example_inputs=[x])
    with pytest.raises(lab.PassValidationError, match="nudge_the_small_output"):
        manager(fx.symbolic_trace(model))
    assert [row.name for row in manager.report] == ["fuse_conv_bn"], "the fold itself passes"


# == Extension: oneDNN lowering (step 10) ==============================================================
ONEDNN = "extension: oneDNN lowering on other convolutions and models"


class OddConvolutions(nn.Module):
    """A strided, dilated, grouped convolution with asymmetric padding, then ReLU; a depthwise (1, 3) one
    without bias whose output is the *second* operand of a residual add, then ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.grouped = nn.Conv2d(4, 8, 3, stride=2, padding=(1, 2), dilation=(1, 2), groups=2)
        self.depthwise = nn.Conv2d(8, 8, (1, 3), padding=(0, 1), groups=8, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.grouped(x))
        return torch.relu(h * 0.5 + self.depthwise(h))


@pytest.mark.extension
@pytest.mark.points(1)
@pytest.mark.area(ONEDNN)
@pytest.mark.parametrize("dialect", ["symbolic_trace", "dynamo", "make_fx", "export", "export_core_aten"])
def test_onednn_lowers_strided_dilated_grouped_and_depthwise_convolutions(lab, dialect):
    torch.manual_seed(15)
    model = OddConvolutions().eval().to(memory_format=torch.channels_last)
    captured = capture(model, [torch.randn(2, 4, 9, 13, generator=seeded(15))], dialect)
    expected = captured.run()
    with torch.no_grad():
        result = lab.lower_to_onednn(frozen_if_dynamo(lab, captured), captured.inputs)
    lowered = assert_lowered(result, dialect, "2 convolutions", {"conv+relu": 1, "conv+add+relu": 1})
    assert dense_convolutions(lowered) == 0
    assert_close(captured.run(lowered), expected)


@pytest.mark.extension
@pytest.mark.points(2)
@pytest.mark.area(ONEDNN)
def test_onednn_pipeline_lowers_every_convolution_of_mobilenet_v2_blocks(lab):
    """MobileNetV2's first six blocks: depthwise convolutions, ReLU6 (a clamp: the convolution before it is
    lowered alone) and residual adds without a ReLU after them: all 15 convolutions lowered, within float32's
    own error."""
    model = nn.Sequential(*mobilenet_v2().features[:6]).eval()
    captured = capture(model, [torch.randn(1, 3, 48, 48, generator=seeded(16))], "symbolic_trace")
    reference = ReferenceOutputs.measure(captured.graph_module, captured.inputs)
    with torch.no_grad():
        result = lab.onednn_pipeline(captured.inputs)(captured.graph_module)
    assert result.modified and dense_convolutions(result.graph_module) == 0
    forms = onednn_forms(result.graph_module)
    assert forms == {"conv": 13, "conv+add": 2}, f"the blocks' 15 convolutions, two of them before an add: {forms}"
    assert_within_float32_budget(captured, result.graph_module, reference)


# == Extension: algebraic simplification (step 11) =====================================================
ALGEBRA = "extension: algebraic simplification on other shapes, dtypes and permutations"


def _undone_in_three_dims(x):
    x = x * 2
    a = x.permute(2, 0, 1).permute(1, 2, 0)  # (2, 0, 1) then its inverse (1, 2, 0)
    b = a.transpose(-1, -2).transpose(-2, -1)
    c = b.reshape(-1, 4, 5)  # x's own shape, one size inferred
    d = torch.mul(c, 1.0) / 1.0 - 0  # float64: exact
    return d * 3


def _not_undone(x):
    x = x * 2
    return x.permute(1, 2, 0).permute(1, 2, 0) * 3  # (1, 2, 0) twice is (2, 0, 1): not the identity


@pytest.mark.extension
@pytest.mark.points(1)
@pytest.mark.area(ALGEBRA)
@pytest.mark.parametrize("dialect", ["symbolic_trace", "make_fx", "export_core_aten"])
def test_algebra_undoes_permutations_of_three_dims_and_keeps_float64(lab, dialect):
    x = special_values(3, 4, 5, dtype=torch.float64, seed=17)
    captured = capture(FunctionModel(_undone_in_three_dims), [x], dialect)
    expected = captured.run()
    simplifier = lab.AlgebraicSimplifier(captured.inputs)
    result = simplifier(captured.graph_module)
    assert result.modified
    simplified = dict(simplifier.simplified)
    assert simplified.get("a permutation undone") == 2 and simplified.get("a reshape to x's own shape") == 1, simplified
    assert all(simplified.get(rule) == 1 for rule in ("x * 1", "x / 1", "x - 0")), simplified
    assert_bitwise_equal(captured.run(result.graph_module), expected)
    assert captured.run(result.graph_module).dtype == torch.float64

    captured = capture(FunctionModel(_not_undone), [special_values(3, 4, 5, seed=18)], dialect)
    expected = captured.run()
    simplifier = lab.AlgebraicSimplifier(captured.inputs)
    result = simplifier(captured.graph_module)
    assert "a permutation undone" not in simplifier.simplified, "(1, 2, 0) twice is not the identity"
    assert_bitwise_equal(captured.run(result.graph_module), expected)
