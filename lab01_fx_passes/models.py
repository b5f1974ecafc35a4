"""Small models the tests (and you) run the passes on (harness: do not edit).

Each model is built to contain the pattern a pass looks for, in a known number, so a test can
check that the pass fired exactly where it should. BatchNorm statistics are randomised
(:func:`randomize_batch_norm`): with fresh statistics (mean 0, variance 1) BN in eval mode is
almost the identity, and a wrong fold would go unnoticed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

CONV_BY_DIMS = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
BATCH_NORM_BY_DIMS = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}


Range = tuple[float, float]


@torch.no_grad()
def randomize_batch_norm(
    model: nn.Module, seed: int = 0, *, means: Range = (-0.5, 0.5), variances: Range = (0.5, 2.0),
    scales: Range = (0.5, 1.5), shifts: Range = (-0.5, 0.5),
) -> nn.Module:  # fmt: skip
    """Give every BatchNorm of ``model`` random running statistics and affine parameters (in place).

    By default means in [-0.5, 0.5], variances in [0.5, 2], scales in [0.5, 1.5], shifts in
    [-0.5, 0.5]: far enough from the identity that folding them wrongly shows, close enough to 1
    that activations keep their scale through a deep network. Each value is drawn uniformly from
    its ``(low, high)`` range. Returns ``model``.
    """
    generator = torch.Generator().manual_seed(seed)

    def uniform(like: torch.Tensor, bounds: Range) -> torch.Tensor:
        low, high = bounds
        return torch.rand(like.shape, generator=generator) * (high - low) + low

    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.running_mean is not None:
            module.running_mean.copy_(uniform(module.running_mean, means))
            module.running_var.copy_(uniform(module.running_var, variances))
            if module.affine:
                module.weight.copy_(uniform(module.weight, scales))
                module.bias.copy_(uniform(module.bias, shifts))
    return model


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


class ConvBNStack(nn.Module):
    """``conv -> bn -> relu -> conv -> bn``: two foldable Conv+BN pairs (1-D, 2-D or 3-D).

    ``eps`` is both BatchNorms' (PyTorch's default 1e-5 unless given): in aten and Dynamo graphs it is a
    positional argument of the batch-norm call, so a fold that reads it only from the keyword arguments
    silently uses the default.
    """

    def __init__(
        self, dims: int = 2, in_channels: int = 3, channels: int = 8, kernel_size: int = 3,
        stride: int = 1, groups: int = 1, bias: bool = True, eps: float = 1e-5,
    ) -> None:  # fmt: skip
        super().__init__()
        conv, norm = CONV_BY_DIMS[dims], BATCH_NORM_BY_DIMS[dims]
        self.conv1 = conv(in_channels, channels, kernel_size, stride=stride, padding=kernel_size // 2, bias=bias)
        self.bn1 = norm(channels, eps=eps)
        self.conv2 = conv(channels, channels, kernel_size, padding=kernel_size // 2, groups=groups, bias=bias)
        self.bn2 = norm(channels, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))


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


class BasicBlock(nn.Module):
    """A ResNet basic block: two Conv+BN pairs and a residual connection."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels)
        self.conv2, self.bn2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(x + self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))))


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
