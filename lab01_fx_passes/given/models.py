"""Small models the tests (and you) run the passes on (harness: do not edit).

Each model is built to contain the pattern a pass looks for, in a known number, so a test can
check that the pass fired exactly where it should. BatchNorm statistics are randomised
(:func:`randomize_batch_norm`): with fresh statistics (mean 0, variance 1) BN in eval mode is
almost the identity, and a wrong fold would go unnoticed.

The first models are shared: several steps' tests, the held-out tests and the figures
(``draw_graphs.py``) run them. The rest are one step's cases each, in step order: a graded test's model
holds the pattern its pass must handle or must leave alone (an in-place write, a random op, a view of
written memory...), and its docstring says which.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from labkit.batch_norm import Range, randomize_batch_norm

CONV_BY_DIMS = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
BATCH_NORM_BY_DIMS = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}


#: Running variances where BatchNorm's ``eps`` (1e-5 by default) is 1% to 10% of the variance.
EPS_SENSITIVE_VARIANCES: Range = (1e-4, 1e-3)


@torch.no_grad()
def eps_sensitive_batch_norm(model: nn.Module, seed: int = 0) -> nn.Module:
    """Give every BatchNorm of ``model`` statistics under which its ``eps`` matters (in place).

    Running variances in [1e-4, 1e-3] (:data:`EPS_SENSITIVE_VARIANCES`): ``sqrt(var + eps)`` then
    differs from ``sqrt(var)`` by 0.5% to 5%, so a fold that forgets ``eps`` is off by that much,
    hundreds of times the tests' tolerance (with variances near 1 it is off by 5e-6, about the
    tolerance itself). Each affine BatchNorm's scale is ``U(0.5, 1.5) * sqrt(var)``, so the layer
    still maps activations of order one to order one (the tests' tolerances assume outputs of that
    size). Means and shifts as in :func:`randomize_batch_norm`. Returns ``model``.
    """
    randomize_batch_norm(model, seed, variances=EPS_SENSITIVE_VARIANCES)
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.affine and module.running_var is not None:
            module.weight.mul_(module.running_var.sqrt())
    return model


def large_output_resnet50(seed: int = 0) -> nn.Module:
    """torchvision's ResNet-50 in eval mode whose logits are of order 1e4 (random weights).

    Its BatchNorm layers look like a trained network's (variances in [0.5, 1], scales in
    [0.75, 1.25], small means and shifts), so nothing shrinks the activations the residual blocks
    add up: the logits reach ~6e3 on a 64x64 image and ~1.5e4 at 224x224. Plain float32 eager is
    then ~4e-3 away from the exact answer, which is what a validation with a fixed ``atol`` cannot
    cope with (see the handout's "Verification and tolerance").
    """
    import torchvision  # only this model needs it; importing it costs a second

    torch.manual_seed(seed)
    model = torchvision.models.resnet50()
    ranges = dict(means=(-0.1, 0.1), variances=(0.5, 1.0), scales=(0.75, 1.25), shifts=(-0.1, 0.1))
    return randomize_batch_norm(model, seed, **ranges).eval()


# == Shared models ===================================================================================
class ConvBNStack(nn.Module):
    """``conv -> bn -> relu -> conv -> bn``: two foldable Conv+BN pairs (1-D, 2-D or 3-D).

    ``eps`` is both BatchNorms' (PyTorch's default 1e-5 unless given): in aten and Dynamo graphs it is a
    positional argument of the batch-norm call, so a fold that reads it only from the keyword arguments
    silently uses the default. ``dilation`` and ``padding_mode`` are the first convolution's (its padding
    keeps the size: ``dilation * (kernel_size // 2)``): a fold that builds a new convolution from some of
    the old one's settings and forgets these changes the output's size or its border.
    """

    def __init__(
        self, dims: int = 2, in_channels: int = 3, channels: int = 8, kernel_size: int = 3,
        stride: int = 1, groups: int = 1, bias: bool = True, eps: float = 1e-5,
        dilation: int = 1, padding_mode: str = "zeros",
    ) -> None:  # fmt: skip
        super().__init__()
        conv, norm = CONV_BY_DIMS[dims], BATCH_NORM_BY_DIMS[dims]
        self.conv1 = conv(
            in_channels, channels, kernel_size, stride=stride, padding=dilation * (kernel_size // 2),
            dilation=dilation, padding_mode=padding_mode, bias=bias,
        )  # fmt: skip
        self.bn1 = norm(channels, eps=eps)
        self.conv2 = conv(channels, channels, kernel_size, padding=kernel_size // 2, groups=groups, bias=bias)
        self.bn2 = norm(channels, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))


class FunctionalConvBN(nn.Module):
    """Two Conv+BN pairs called as functions, as people write them: ``F.conv2d`` with bias, stride and padding
    by position, then ``F.conv2d(y, w)`` with no bias and every default left out (the fold must add a bias);
    ``F.batch_norm`` with the statistics by position and ``eps`` by name. ``symbolic_trace`` and Dynamo record
    each call as written."""

    def __init__(
        self, eps: float = 1e-5, *, learned: tuple[str, ...] = ("weight", "bias"), second_in_training: bool = False
    ) -> None:
        """``learned``: which of the BatchNorms' ``weight`` and ``bias`` the calls pass (``()``: neither, and the
        fold's scale is ``1 / sqrt(var + eps)``; one alone: the other is the identity's, 1 or 0).
        ``second_in_training``: the second call passes ``training=True`` (batch statistics: no fold)."""
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8, eps=eps)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 1, bias=False), nn.BatchNorm2d(8, eps=eps)
        self.learned, self.second_in_training = learned, second_in_training

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c1, b1, b2 = self.conv1, self.bn1, self.bn2
        y = F.conv2d(x, c1.weight, c1.bias, c1.stride, c1.padding)
        y = torch.relu(F.batch_norm(y, b1.running_mean, b1.running_var, **self._learned(b1), eps=b1.eps))
        y = F.conv2d(y, self.conv2.weight)
        return F.batch_norm(
            y, b2.running_mean, b2.running_var, **self._learned(b2), training=self.second_in_training, eps=b2.eps
        )

    def _learned(self, norm: nn.BatchNorm2d) -> dict[str, torch.Tensor]:
        return {name: getattr(norm, name) for name in self.learned}


class TransposedThenRegular1d(nn.Module):
    """``ConvTranspose1d -> BatchNorm1d`` (not foldable here), then ``Conv1d -> BatchNorm1d`` (foldable). In aten
    graphs both convolutions are ``aten.convolution``: only its ``transposed`` argument tells them apart."""

    def __init__(self) -> None:
        super().__init__()
        # As many input channels as output ones: the weight's first dimension matches the BN's too.
        self.up, self.bn1 = nn.ConvTranspose1d(4, 4, 3, stride=2), nn.BatchNorm1d(4)
        self.conv, self.bn2 = nn.Conv1d(4, 4, 3, padding=1), nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn2(self.conv(torch.relu(self.bn1(self.up(x)))))


class ConvCalledTwice(nn.Module):
    """One ``nn.Conv2d`` called twice: ``bn(conv(x))``, a foldable pair, and ``conv(-x)`` with no BatchNorm after
    it. The traced graph calls the same module (or reads the same ``get_attr`` weight) at both places, so the fold
    needs a convolution of its own: one rewritten where it stands normalizes the second call too."""

    def __init__(self, channels: int = 4) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, channels, 3, padding=1), nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x)) + self.conv(-x)


class TwoFoldsShareAWeight(nn.Module):
    """One ``nn.Conv2d`` called twice, each call followed by a BatchNorm of its own: two foldable pairs whose
    convolutions share a weight. Each fold scales it by its own BatchNorm's statistics, so each needs new tensors
    of its own; named after the shared weight alone, the second fold's overwrite the first's."""

    def __init__(self, channels: int = 4) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3, padding=1)
        self.bn1, self.bn2 = nn.BatchNorm2d(channels), nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn1(self.conv(x)) + self.bn2(self.conv(-x))


class SharedConvOutput(nn.Module):
    """One foldable pair (``conv1 -> bn1``), and one that is not: ``conv2``'s output is also added
    to the result, so it must stay un-normalised."""

    def __init__(self, channels: int = 4) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, channels, 3, padding=1), nn.BatchNorm2d(channels)
        self.conv2, self.bn2 = nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv2(torch.relu(self.bn1(self.conv1(x))))
        return self.bn2(y) + y


class LinearGeluMLP(nn.Module):
    """``fc1 -> GELU -> fc2 -> GELU -> LayerNorm``: two fusable Linear+GELU pairs."""

    def __init__(self, features: int = 8, hidden: int = 16, approximate: str = "none", bias: bool = True) -> None:
        super().__init__()
        self.fc1, self.act1 = nn.Linear(features, hidden, bias=bias), nn.GELU(approximate=approximate)
        self.fc2, self.act2 = nn.Linear(hidden, features, bias=bias), nn.GELU(approximate=approximate)
        self.norm = nn.LayerNorm(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.act2(self.fc2(self.act1(self.fc1(x)))))


class FunctionalLinearGelu(nn.Module):
    """Two ``F.linear -> F.gelu`` pairs written as functions: the first passes its bias by keyword
    (``F.linear(x, w, bias=b)``), the second by position. Graphs keep each call as written (aten graphs
    lower both to the same ops)."""

    def __init__(self, features: int = 8, hidden: int = 16) -> None:
        super().__init__()
        self.w1, self.b1 = nn.Parameter(torch.randn(hidden, features) * 0.3), nn.Parameter(torch.randn(hidden))
        self.w2, self.b2 = nn.Parameter(torch.randn(features, hidden) * 0.3), nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(F.linear(x, self.w1, bias=self.b1))
        return F.gelu(F.linear(h, self.w2, self.b2))


class SharedLinearOutput(nn.Module):
    """One unsafe pair (``fc1``'s output is read by GELU *and* by the residual add) and one safe
    pair (``fc2 -> gelu``, written with ``F.gelu``)."""

    def __init__(self, features: int = 8) -> None:
        super().__init__()
        self.fc1, self.act = nn.Linear(features, features), nn.GELU()
        self.fc2 = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        y = self.act(h) + h
        return F.gelu(self.fc2(y))


class AddmmNotALinear(nn.Module):
    """``gelu(addmm(c, x, w.t(), ...))`` spelled like a Linear in aten graphs but not one, then a real
    ``fc -> GELU`` pair (only the second may fuse). ``kind``: ``"bias-4x8"`` or ``"bias-1x8"`` (a 2-D ``c``,
    which ``addmm`` broadcasts: a Linear's bias is 1-D), or a 1-D ``c`` with ``beta * c + alpha * x @ w.t()``:
    ``"beta"`` (beta 0.5), ``"alpha"`` (alpha 2) or ``"beta-alpha"`` (both)."""

    KINDS = ("bias-4x8", "bias-1x8", "beta", "alpha", "beta-alpha")
    SCALES = {"beta": {"beta": 0.5}, "alpha": {"alpha": 2.0}, "beta-alpha": {"beta": 0.5, "alpha": 2.0}}

    def __init__(self, kind: str, features: int = 8) -> None:
        super().__init__()
        rows = {"bias-4x8": (4,), "bias-1x8": (1,)}.get(kind, ())
        self.scales = self.SCALES.get(kind, {})
        self.weight = nn.Parameter(torch.randn(features, features))
        self.addmm_bias = nn.Parameter(torch.randn(*rows, features))
        self.fc, self.act = nn.Linear(features, features), nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.gelu(torch.addmm(self.addmm_bias, x, self.weight.t(), **self.scales))
        return self.act(self.fc(y))


class RowsRegroupedAroundALinear(nn.Module):
    """A Linear -> GELU pair, then a second Linear whose rows are regrouped around it:
    ``gelu(fc2(h.reshape(6, 8)).view(3, 2, 8))`` for ``h`` of shape ``[2, 3, 8]``.

    aten graphs spell every Linear on a 3-D input as ``view -> addmm -> view``; here the second pair's
    views are the model's own, and the output's shape (``[3, 2, 8]``) is not the input's leading
    dimensions plus the Linear's features (``[2, 3, 8]``). A fused op applied to ``h`` gives the right
    numbers in the wrong shape.
    """

    def __init__(self, features: int = 4, hidden: int = 8) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(features, hidden), nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [2, 3, features]
        h = F.gelu(self.fc1(x))
        y = F.gelu(self.fc2(h.reshape(6, -1)).view(3, 2, -1))
        return y.cumsum(1)  # reads along the regrouped dimension


class ReluZoo(nn.Module):
    """ReLU spelled every way a model can spell it, between Linear layers.

    With ``replacement=None`` it applies ReLU (as a module, ``F.relu``, ``torch.relu``, ``x.relu()``,
    an in-place ``nn.ReLU(inplace=True)`` whose input is read again after the write, and an in-place
    ``x.relu_()`` whose result is unused: the output depends on both in-place writes). With
    ``replacement=F.hardswish`` (say) it applies that function at every one of those places instead,
    in place where ReLU was: the expected result of replacing ReLU.
    """

    def __init__(self, features: int = 8, replacement=None) -> None:
        super().__init__()
        self.fcs = nn.ModuleList(nn.Linear(features, features) for _ in range(6))
        self.relu = nn.ReLU()
        self.relu_inplace = nn.ReLU(inplace=True)
        self.replacement = replacement

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.replacement is not None:
            for index, fc in enumerate(self.fcs):
                x = self.replacement(fc(x))
                if index == 4:  # the in-place ReLU's input, read after the write, holds its result too
                    x = x + x
            return x
        x = self.relu(self.fcs[0](x))
        x = F.relu(self.fcs[1](x))
        x = torch.relu(self.fcs[2](x))
        x = self.fcs[3](x).relu()
        y = self.fcs[4](x)
        x = self.relu_inplace(y) + y  # y was written in place: this is 2 * relu(y)
        x = self.fcs[5](x)
        x.relu_()
        return x


class ActivationsWithArguments(nn.Module):
    """Activations called with arguments of their own, each between Linear layers and each input read again
    after it: ``F.elu(h, 2.0)`` (alpha by position), ``F.elu(h, alpha=0.5)``, ``nn.ELU(alpha=2.0)`` and
    ``F.gelu(h, approximate="tanh")``.

    With ``replacement=None`` it applies them; with ``replacement=F.relu`` (say) it applies that function, on
    the input alone, at each of those places: the expected result of replacing ELU and GELU. A replacement given
    the original's other arguments reads them as its own (``F.relu(h, 2.0)`` is ReLU in place).
    """

    def __init__(self, features: int = 8, replacement=None) -> None:
        super().__init__()
        self.fcs = nn.ModuleList(nn.Linear(features, features) for _ in range(4))
        self.elu = nn.ELU(alpha=2.0)
        self.replacement = replacement

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        originals = [
            lambda h: F.elu(h, 2.0),
            lambda h: F.elu(h, alpha=0.5),
            self.elu,
            lambda h: F.gelu(h, approximate="tanh"),
        ]
        for fc, original in zip(self.fcs, originals, strict=True):
            h = fc(x)
            x = (self.replacement or original)(h) + h
        return x


class BasicBlock(nn.Module):
    """A ResNet basic block: two Conv+BN pairs and a residual connection."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels)
        self.conv2, self.bn2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(x + self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))))


class NormalizesItsInputInPlace(nn.Module):
    """Subtracts a mean from its input *in place* (``x.sub_(mean)``), then Conv -> BN: every run of the
    graph writes the tensor it was given, so two runs on one tensor compute different things."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.full((1, 3, 1, 1), 0.5))
        self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.sub_(self.mean)
        return self.bn(self.conv(x))


class TinyResNet(nn.Module):
    """A small ResNet with a Linear+GELU classifier head: what the default pipeline is tested on."""

    def __init__(self, channels: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU())
        self.blocks = nn.Sequential(BasicBlock(channels), BasicBlock(channels))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Sequential(nn.Linear(channels, 16), nn.GELU(), nn.Linear(16, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


# == One step's cases each, in step order ==========================================================
# -- 2. Dead code elimination ----------------------------------------------------------------------
class DeadChains(nn.Module):
    """``chains`` unused pure computations of ``length`` ops each, next to the live result."""

    def __init__(self, chains: int, length: int) -> None:
        super().__init__()
        self.chains, self.length = chains, length
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for chain in range(self.chains):
            dead = x
            for _ in range(self.length):
                dead = torch.sin(dead) * (chain + 2)
        return self.fc(x)


class UnusedInPlaceOps(nn.Module):
    """In-place ops whose results nobody reads, but whose writes the output depends on."""

    def __init__(self) -> None:
        super().__init__()
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 1.0
        y.add_(1)  # call_method add_: PyTorch's own DCE deletes it
        z = y * 2.0
        torch.relu_(z)
        w = z - 0.5
        F.relu(w, inplace=True)
        v = w * 3.0
        self.relu(v)
        u = v * 0.5
        torch.mul(v, 4.0, out=u)  # a write through out=: the call's value unused, u overwritten
        t = u
        t += 0.25  # Dynamo: operator.iadd, whose result nobody reads (symbolic_trace records a plain add)
        return u


class UnusedRandomOps(nn.Module):
    """Random ops with no users: deleting any changes the random numbers drawn after it."""

    def __init__(self) -> None:
        super().__init__()
        self.dropout = nn.Dropout(0.5)  # in training mode: random
        self.rrelu = nn.RReLU()  # in training mode: a random slope per element

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.randn_like(x)
        x.bernoulli()
        F.dropout(x, 0.5)  # training=True is F.dropout's default
        self.dropout(x)
        self.rrelu(x)
        F.dropout(x, 0.5, training=False)  # the identity: pure, and dead
        return x + torch.rand_like(x)


@torch.fx.wrap
def record_statistics(x: torch.Tensor) -> torch.Tensor:
    """A side effect: appends to a log. Traced as a leaf call, marked side-effectful below."""
    STATISTICS_LOG.append(float(x.sum()))
    return x


STATISTICS_LOG: list[float] = []
torch.fx.node.has_side_effect(record_statistics)


class UnusedSideEffects(nn.Module):
    """Side effects whose results nobody reads: a logging call (:func:`record_statistics`), an assertion,
    a training-mode BatchNorm and an InstanceNorm that tracks running statistics, both of which update them."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(4)  # in training mode: updates its running statistics
        self.instance_norm = nn.InstanceNorm1d(4, track_running_stats=True)  # so does this one (not a _BatchNorm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        record_statistics(x)
        torch._assert(x.shape[1] == 4, "expected 4 features")
        self.bn(x)
        self.instance_norm(x.t().unsqueeze(0))  # [1, 4 channels, rows]
        return x * 2


class UnusedFunctionalInstanceNorm(nn.Module):
    """An ``F.instance_norm`` with running statistics and no users: ``use_input_stats`` (True by default, its
    training flag by another name) makes it update the running statistics, in place."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(4))
        self.register_buffer("var", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        F.instance_norm(x, self.mean, self.var)
        return x * 2


class UnusedFunctionalBatchNorm(nn.Module):
    """A training-mode ``F.batch_norm`` with no users: it updates the buffers it is given, in place.
    Its ``training`` flag is positional as written; Dynamo's graph keeps it so (symbolic_trace names it)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(4))
        self.register_buffer("var", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        F.batch_norm(x, self.mean, self.var, None, None, True)
        return x * 2


# -- 3. Constant folding ---------------------------------------------------------------------------
class ConstantSubgraphs(nn.Module):
    """Two constant subgraphs (``table`` and ``gate``), each several ops long, feeding input-dependent ops."""

    def __init__(self, n: int = 6) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.randn(n, n))
        self.b = nn.Parameter(torch.randn(n, n))
        # A parameter, not a buffer: symbolic_trace would run buffer arithmetic while tracing and
        # record only its result (a _tensor_constant), folding it before the pass could.
        self.scale = nn.Parameter(torch.randn(n))

    def constant_values(self) -> list[torch.Tensor]:
        with torch.no_grad():
            return [(self.a @ self.b).relu() + 1, torch.sigmoid(self.scale * 2).unsqueeze(0)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        table = (self.a @ self.b).relu() + 1
        gate = torch.sigmoid(self.scale * 2).unsqueeze(0)
        return (x @ table) * gate


class ConstantOutputs(nn.Module):
    """A constant the graph returns: never folded (the caller would receive the buffer itself, and a write
    to it would change every later call's answer). ``only_constants``: the whole output is that constant."""

    def __init__(self, only_constants: bool = False) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))
        self.only_constants = only_constants

    def forward(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        gate = (self.w * 2).relu()
        return gate if self.only_constants else (x + 1, gate)


class ImpureConstants(nn.Module):
    """Constants that must NOT be folded: mixed with randomness, modified in place afterwards, or redrawn in place
    by a random op (a noise buffer, read through a view taken before the draw)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))
        self.register_buffer("noise", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # torch.rand_like(self.w) reads only a constant, but draws new numbers on every call. (A bare
        # torch.rand(4) would not even reach the graph: symbolic_trace runs calls without proxy
        # arguments while tracing and records one frozen sample.)
        noisy = self.w * 2 + torch.rand_like(self.w)  # self.w * 2 is constant; the sum is not
        offset = self.w + 1  # constant, but modified in place below: fold it and calls accumulate
        offset.add_(x)
        drawn = self.noise.view(2, 2)  # a view of the buffer, taken before the draw that writes it
        self.noise.normal_()  # a random op that writes in place: what the view reads changes on every call
        return x * noisy + offset + drawn.flatten()


class ConstantsSharingMemoryWithWrites(nn.Module):
    """Constants that share memory with a value an in-place op writes on every call: written through a
    view of them, or a view of the tensor written. None may be folded; ``sigmoid(self.w)`` may."""

    #: What the first three outputs read, and which write makes it no constant.
    CASES = (
        "output 0 reads table = self.w * 2, which table.view(2, 2).add_(...) writes through a view",
        "output 1 reads first = scale[0], a view of scale, which scale.mul_(x) writes after the view is taken",
        "output 2 reads grid = shift.view(2, 2), a view of shift, another view of which shift[2:].add_(...) writes",
    )

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        table = self.w * 2
        table.view(2, 2).add_(x.view(2, 2))
        scale = self.w + 1
        first = scale[0]
        scale.mul_(x)
        shift = self.w - 1
        grid = shift.view(2, 2)
        shift[2:].add_(x[2:])
        gate = torch.sigmoid(self.w)  # constant, and nothing written shares its memory
        return x * table, first * x, grid * x.view(2, 2), x * gate


class ConstantsSharingMemoryThroughFunctions(ConstantsSharingMemoryWithWrites):
    """The same constants and writes, each view taken by a torch function that can be given its tensor by name:
    ``torch.reshape(table, (2, 2))``, ``torch.select(scale, 0, 0)``, ``torch.narrow(shift, 0, 2, 2)``. Respelled
    (``torch.reshape(input=table, shape=(2, 2))``), the tensor a view shares memory with is no positional argument."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        table = self.w * 2
        torch.reshape(table, (2, 2)).add_(torch.reshape(x, (2, 2)))
        scale = self.w + 1
        first = torch.select(scale, 0, 0)
        scale.mul_(x)
        shift = self.w - 1
        grid = torch.reshape(shift, (2, 2))
        torch.narrow(shift, 0, 2, 2).add_(torch.narrow(x, 0, 2, 2))
        gate = torch.sigmoid(self.w)  # constant, and nothing written shares its memory
        return x * table, first * x, grid * x.view(2, 2), x * gate


class CountsItsCallsThroughAView(nn.Module):
    """A buffer written in place through a view of a view on every call (``self.calls.view(2, 2)[0].add_(1)``),
    then read (``self.calls * 2``): the read sees the write, and the count persists from call to call."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.view(2, 2)[0].add_(1)
        return x * (self.calls * 2)


class LiteralConstants(nn.Module):
    """Under Dynamo parameters are inputs; only values built from literals are constant."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(8, dtype=torch.float32) * 0.5 + 1  # constant
        return x * positions + self.w * 2  # self.w * 2 reads a placeholder: not constant


class ClassToken(nn.Module):
    """ViT's class token: ``cat([sigmoid(cls).expand(n, -1, -1), x], dim=1)``. The ``cat`` takes its
    tensors in a **list**, and one of them is the input: a fold that looks only at a node's direct
    arguments misses ``x`` inside the list and takes the ``cat`` for a constant. ``sigmoid(cls)`` is
    constant in every dialect (and its ``expand`` too where the batch size is a number, in aten graphs)."""

    def __init__(self, features: int = 8) -> None:
        super().__init__()
        self.cls = nn.Parameter(torch.randn(1, 1, features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [n, tokens, features]
        return torch.cat([torch.sigmoid(self.cls).expand(x.shape[0], -1, -1), x], dim=1) * 2


# -- 6. Channels-last layout -----------------------------------------------------------------------
class ConvFeatures(nn.Module):
    """Returns a 4-D feature map: the layout of the output is visible to the caller."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(torch.relu(self.conv1(x)))


class TwoFeatureMaps(nn.Module):
    """Returns two 4-D feature maps, one of them an intermediate: every output's layout is visible."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = torch.relu(self.conv1(x))
        return p, self.conv2(p)


class ViewHead(nn.Module):
    """Convolutions, an adaptive pool, then a flatten: VGG's and AlexNet's head, where the layout
    crosses a view (``y.view(n, -1)``; aten graphs record ``torch.flatten`` as ``aten.view`` too)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d((2, 2))
        self.fc = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.pool(torch.relu(self.conv2(torch.relu(self.conv1(x)))))
        return self.fc(y.view(y.shape[0], -1)), torch.flatten(y, 1)


class ChannelsFirstView(nn.Module):
    """Convolutions and a pool, then ``y.permute(1, 0, 2, 3).contiguous().view(8, -1)``: a view whose size
    grows with the batch in its *last* dimension (``[8, 4 * s0]`` under a symbolic batch). A view rebuilt as
    ``[-1, <numbers>]`` is right for ViewHead's ``[s0, -1]`` and wrong here."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 1)
        self.pool = nn.AdaptiveAvgPool2d((2, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pool(self.conv2(torch.relu(self.conv1(x))))
        return y.permute(1, 0, 2, 3).contiguous().view(8, -1)


class ViewWrittenInPlace(nn.Module):
    """A view of the convolution's output is written in place, and the convolution's output read after."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        flat = y.view(y.shape[0], -1)
        flat.add_(1)  # writes y through the view
        return y * 2


class ViewsOfWrittenMemory(nn.Module):
    """Views of convolution outputs that share their memory with a tensor written in place after the
    view is taken, each through another alias; and VGG's classifier, whose in-place ReLU writes new
    memory computed from a view (its convolution may change layout)."""

    #: What the first four outputs read, and which write each must see (one convolution each, in order).
    CASES = (
        "output 0 is a.view(n, -1), then a.add_(1) writes the tensor it views",
        "output 1 is b[:, :2].view(n, -1), then b.mul_(2) writes the tensor its slice views",
        "output 2 is c.view(n, -1), then c[:, 0].zero_() writes another view of the tensor it views",
        "output 3 is d, and d.view(n, -1).narrow(1, 0, 5).add_(1) writes a view of its view",
    )

    def __init__(self) -> None:
        super().__init__()
        self.conv_a, self.conv_b, self.conv_c, self.conv_d, self.conv_e = (nn.Conv2d(3, 4, 3) for _ in range(5))
        self.fc, self.act = nn.Linear(64, 5), nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = self.conv_a(x)
        flat_a = a.view(a.shape[0], -1)
        a.add_(1)
        b = self.conv_b(x)
        flat_b = b[:, :2].view(b.shape[0], -1)
        b.mul_(2)
        c = self.conv_c(x)
        flat_c = c.view(c.shape[0], -1)
        c[:, 0].zero_()
        d = self.conv_d(x)
        d.view(d.shape[0], -1).narrow(1, 0, 5).add_(1)
        e = self.conv_e(x)
        head = self.act(self.fc(e.view(e.shape[0], -1)))  # written after the view, but new memory
        return flat_a, flat_b, flat_c, d, head


class MaskWrittenBeforeItsView(nn.Module):
    """Swin's attention mask: a new tensor written in place (Swin: ``mask[i] = v``), then viewed;
    nothing writes it (or the view) after the view is taken."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        mask = y.new_zeros(y.shape[2], y.shape[3])
        mask.fill_(0.5)
        mask.narrow(0, 1, 2).fill_(1.0)
        return y * mask.view(1, 1, y.shape[2], y.shape[3])


class WriteToOtherMemoryShapedLikeAView(nn.Module):
    """Writes in place near a convolution's view that do not write its memory, so both convolutions may
    change layout: a mask made before the convolution, given its output's shape (``mask.view_as(y)``: a
    view of the mask, y gives only the shape) and written after y's view is taken; and a total that
    ``total.add_(flat)`` writes, reading the view (an in-place op writes its first argument only)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.conv2 = nn.Conv2d(3, 4, 3), nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = x.new_ones(x.shape[0], 64)
        y = self.conv(x)
        flat = y.view(y.shape[0], -1)
        mask.view_as(y).mul_(0.5)
        total = x.new_zeros(x.shape[0], 64)
        w = self.conv2(x)
        total.add_(w.view(w.shape[0], -1))
        return flat * mask + total


# -- 8. Freezing -----------------------------------------------------------------------------------
class ReturnsAViewOfAParameter(nn.Module):
    """A convolution scaled by a parameter the forward also returns, as a view (``scale.view(2, 2)``): the
    caller receives the parameter's memory, so freezing must keep it an input."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.scale = nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.conv(x) * self.scale.view(1, -1, 1, 1), self.scale.view(2, 2)


# -- 10. Extension: oneDNN lowering ----------------------------------------------------------------
class ResidualConvs(nn.Module):
    """BatchNorm-free convolutions followed by every fusable pattern: Conv+ReLU (a module in place, and
    ``F.relu``), Conv+add+ReLU with the convolution as the second and as the first operand (the second
    written ``h += x``: an in-place add on the convolution's own output), and Conv+add without ReLU."""

    def __init__(self, channels: int = 8, classes: int = 5) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.conv3 = nn.Conv2d(channels, channels, 1)
        self.project = nn.Conv2d(channels, channels, 1, stride=2)
        self.relu = nn.ReLU(inplace=True)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.stem(x))
        x = self.relu(x + self.conv2(F.relu(self.conv1(x))))
        h = self.conv3(x)
        h += x
        h = torch.relu(h)
        z = self.project(h) + F.avg_pool2d(h, 2)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(z, 1), 1))


class TransposedThenRegular2d(nn.Module):
    """``relu(ConvTranspose2d)`` then ``relu(Conv2d)``. The transposed convolution keeps the size (3 to 3
    channels, kernel 3, padding 1): its weight has the shape a regular convolution's would, so only the
    convolution's kind (the module's class; ``aten.convolution``'s ``transposed`` argument) tells them apart."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(3, 3, 3, padding=1)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(torch.relu(self.up(x))))


class SharedValues(nn.Module):
    """Three fusions that would change the program: ``conv1``'s output is read by its ReLU and by the
    result; the sum after ``conv2`` by its ReLU and by the result; and ``r.add_(conv3(r))`` writes
    ``r``, which is read afterwards (a fused kernel would write a new tensor instead)."""

    def __init__(self, channels: int = 4) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv3 = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.conv1(x)
        a = torch.relu(y)
        s = self.conv2(a) + a
        r = torch.relu(s)
        r.add_(self.conv3(r))
        return r * 2 + y, s


class AddsIntoAnotherValue(nn.Module):
    """``alias += conv(h)`` where ``alias`` names another value, read afterwards: Python's augmented assignment
    writes that tensor in place (Dynamo records ``operator.iadd``), so a fused kernel writing a new tensor would
    leave ``total`` as it was."""

    def __init__(self, channels: int = 4) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.conv = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        total = h * 1.5
        alias = total
        alias += self.conv(h)
        return total * 2


class FunctionalConvs(nn.Module):
    """``F.conv2d`` called as people write it: with every default left out (``F.conv2d(x, w)``: stride 1,
    padding 0, no bias), and with a bias, stride and padding given by position. Dynamo records each call
    as it was written, so its ``torch.conv2d`` node holds only the arguments given."""

    def __init__(self) -> None:
        super().__init__()
        self.plain = nn.Parameter(torch.randn(4, 3, 3, 3) * 0.3)
        self.strided = nn.Parameter(torch.randn(4, 3, 3, 3) * 0.3)
        self.bias = nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return F.conv2d(x, self.plain), F.conv2d(x, self.strided, self.bias, 2, 1)


class ConvSettingsOneAtATime(nn.Module):
    """Five ``F.conv2d`` calls, each with one setting away from its default and the rest left out: a bias,
    ``stride=2``, ``padding=1``, ``dilation=2``, ``groups=3``. A lowering that reads a setting from another's place
    (Dynamo records ``torch.conv2d`` as written; aten's ``convolution`` takes all nine by position) or that takes
    one setting for another passes tests whose convolutions change several at once."""

    SETTINGS = ({"bias": True}, {"stride": 2}, {"padding": 1}, {"dilation": 2}, {"groups": 3})

    def __init__(self, in_channels: int = 3, out_channels: int = 6, *, modules: bool = False) -> None:
        """``modules=True``: five ``nn.Conv2d`` modules configured so instead (``bias=False`` but in the first)."""
        super().__init__()
        self.weights = nn.ParameterList(
            nn.Parameter(torch.randn(out_channels, in_channels // setting.get("groups", 1), 3, 3) * 0.3)
            for setting in self.SETTINGS
        )
        self.bias = nn.Parameter(torch.randn(out_channels))
        self.convs = None
        if modules:
            self.convs = nn.ModuleList(
                nn.Conv2d(in_channels, out_channels, 3, **{"bias": False, **setting}) for setting in self.SETTINGS
            )
            for conv, weight in zip(self.convs, self.weights, strict=True):
                conv.weight = weight
            self.convs[0].bias = self.bias

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.convs is not None:
            return tuple(conv(x) for conv in self.convs)
        outputs = []
        for weight, setting in zip(self.weights, self.SETTINGS, strict=True):
            keywords = {name: self.bias if name == "bias" else value for name, value in setting.items()}
            outputs.append(F.conv2d(x, weight, **keywords))
        return tuple(outputs)


class ConvThen(nn.Module):
    """One convolution, then nothing, a ReLU, ``+ other``, ``relu(other + conv(x))`` or ``+ 0.5 * other`` (out of
    place or in place)."""

    def __init__(self, conv: nn.Conv2d, tail: str) -> None:
        super().__init__()
        self.conv, self.tail = conv, tail

    def forward(self, x: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        if self.tail == "relu":
            return torch.relu(y)
        if self.tail == "add":
            return y + other
        if self.tail == "add_relu":
            return torch.relu(other + y)
        if self.tail == "add_alpha":  # y + 0.5 * other: not the plain add oneDNN fuses
            return torch.add(y, other, alpha=0.5)
        if self.tail == "add_alpha_in_place":  # the same, written into y
            return y.add_(other, alpha=0.5)
        return y


# -- Step 11: algebraic simplification --------------------------------------------------------------
class EveryIdentity(nn.Module):
    """Every exact identity of step 11 on a 4x8 ``x`` (12 of them), and one that is not: ``+ 0`` on floats.

    ``torch.zeros(4, 8)`` is a call in every dialect but ``symbolic_trace``, which bakes it into a
    ``get_attr`` constant (module state: never an identity operand).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * 2
        a = x - 0
        b = 1 * a
        c = b * 1
        e = c / 1
        f = e + (-0.0)
        g = -(-f)
        h = g.t().t()
        i = h.reshape(4, 8)
        j = torch.add(i, torch.zeros(4, 8))  # + 0.0 on floats: not exact, left alone
        k = j.transpose(0, 1).transpose(1, 0)
        m = k.permute(1, 0).permute(1, 0)
        n = m.neg().neg() + 0  # + 0 on floats again
        return n.view(4, 8) * 3  # keeps every zero's sign: the + 0 left alone shows in the output


class ReturnsItsWeight(nn.Module):
    """Returns ``weight * 1`` beside ``x * 3``: simplified to ``weight``, the caller would hold the model's own
    parameter (a write to that output would change the model)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(-1, 1, 32).reshape(4, 8))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.weight * 1, x * 3


class FunctionModel(nn.Module):
    """A model whose forward is ``function(x)``: one small case per test parameter."""

    def __init__(self, function: Callable[..., Any]) -> None:
        super().__init__()
        self.function = function

    def forward(self, x: torch.Tensor) -> Any:
        return self.function(x)


class TwoInputFunctionModel(FunctionModel):
    """``function(x, y)`` (``symbolic_trace`` needs each input named: no ``*inputs``)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Any:
        return self.function(x, y)


def function_model(function: Callable[..., Any], inputs: int) -> FunctionModel:
    """A :class:`FunctionModel` of ``function``, taking ``inputs`` (1 or 2) tensors."""
    return (FunctionModel, TwoInputFunctionModel)[inputs - 1](function)


class Chain(nn.Module):
    """``x * 2``, then each step in turn (a generated graph): the steps are ``(name, function)`` pairs."""

    def __init__(self, steps: Sequence[tuple[str, Callable[[torch.Tensor], torch.Tensor]]]) -> None:
        super().__init__()
        self.steps = list(steps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * 2
        for _, step in self.steps:
            x = step(x)
        return x
