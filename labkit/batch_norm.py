"""BatchNorm layers that look trained, for tests (shared by the labs' model zoos).

A freshly built BatchNorm has running mean 0, variance 1, scale 1 and shift 0: in eval mode it is
almost the identity, so a lowering or a fold that drops its scale, its shift or its statistics still
matches eager. :func:`randomize_batch_norm` gives every BatchNorm of a model values far enough from
those that such a mistake shows.
"""

from __future__ import annotations

import torch
from torch import nn

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
