"""Small models with LayerNorm -> GELU sites, for the tests and the benchmark (harness: do not edit).

Each site has its own ``eps``: Inductor prints the eps of every fused-op call in its generated
code, so a test can tell *which* site was replaced, not only how many.

- :class:`FusableSites`: sites the lowering must replace, written the ways real models write
  them (``nn`` modules, ``F`` calls, with and without affine parameters, both GELU forms, 2-D and 3-D).
- :class:`NonFusableSites`: sites the lowering must leave alone, plus one fusable control site
  (a lowering that replaces nothing must not pass for a careful one).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Site:
    """One LayerNorm -> GELU site of a test model."""

    name: str
    eps: float
    approximate: str  # the GELU form at the site ("none" = exact erf)
    why: str  # what the site tests


FUSABLE_SITES = (
    Site("module_affine_erf", 1e-5, "none", "nn.LayerNorm(d) -> nn.GELU(): the textbook transformer MLP"),
    Site("functional_plain_tanh", 1e-6, "tanh", "F.layer_norm without affine, eps=1e-6 -> tanh GELU"),
    Site("module_weight_only_erf", 1e-3, "none", "nn.LayerNorm(d, bias=False): weight but no bias"),
    Site("two_dim_affine_tanh", 1e-4, "tanh", "a 2-D (batch, d) activation instead of (batch, seq, d)"),
)

CONTROL_SITE = Site("control", 1e-5, "none", "fusable control: proves the lowering was active")
NON_FUSABLE_SITES = (
    Site("layernorm_output_reused", 2e-5, "none", "the LayerNorm output also feeds a residual add"),
    Site("layernorm_over_two_dims", 3e-5, "none", "LayerNorm normalises the last two dims, the kernel only one"),
    Site("gelu_before_layernorm", 4e-5, "none", "GELU -> LayerNorm: the opposite order"),
    Site("layernorm_then_relu", 5e-5, "none", "LayerNorm -> ReLU: no GELU at all"),
    Site("float64", 6e-5, "none", "float64 activations: the fp32 kernel would lose precision"),
)


class FusableSites(nn.Module):
    """Four LayerNorm -> GELU sites that a correct lowering replaces; returns ``{site name: output}``."""

    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.module_affine_erf = nn.Sequential(nn.Linear(d, d), nn.LayerNorm(d, eps=1e-5), nn.GELU())
        self.proj_plain = nn.Linear(d, d)
        self.module_weight_only_erf = nn.Sequential(nn.Linear(d, d), nn.LayerNorm(d, eps=1e-3, bias=False), nn.GELU())
        self.proj_two_dim = nn.Linear(d, d)
        self.norm_two_dim = nn.LayerNorm(d, eps=1e-4)
        with torch.no_grad():  # non-trivial affine parameters, so a kernel that ignores them fails
            for norm in (self.module_affine_erf[1], self.module_weight_only_erf[1], self.norm_two_dim):
                norm.weight.uniform_(0.5, 1.5)
                if norm.bias is not None:
                    norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        plain = F.layer_norm(self.proj_plain(x), (x.shape[-1],), eps=1e-6)
        two_dim = self.norm_two_dim(self.proj_two_dim(x[:, 0]))
        return {
            "module_affine_erf": self.module_affine_erf(x),
            "functional_plain_tanh": F.gelu(plain, approximate="tanh"),
            "module_weight_only_erf": self.module_weight_only_erf(x),
            "two_dim_affine_tanh": F.gelu(two_dim, approximate="tanh"),
        }


class NonFusableSites(nn.Module):
    """Five sites a correct lowering must not replace, and one control site it must."""

    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.proj = nn.ModuleDict({site.name: nn.Linear(d, d) for site in (CONTROL_SITE, *NON_FUSABLE_SITES)})
        self.control_norm = nn.LayerNorm(d, eps=1e-5)
        self.reused_norm = nn.LayerNorm(d, eps=2e-5)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = {name: proj(x) for name, proj in self.proj.items()}
        reused = self.reused_norm(h["layernorm_output_reused"])
        return {
            "control": F.gelu(self.control_norm(h["control"])),
            "layernorm_output_reused": F.gelu(reused) + reused,
            "layernorm_over_two_dims": F.gelu(F.layer_norm(h["layernorm_over_two_dims"], x.shape[-2:], eps=3e-5)),
            "gelu_before_layernorm": F.layer_norm(F.gelu(h["gelu_before_layernorm"]), (x.shape[-1],), eps=4e-5),
            "layernorm_then_relu": F.relu(F.layer_norm(h["layernorm_then_relu"], (x.shape[-1],), eps=5e-5)),
            "float64": F.gelu(F.layer_norm(h["float64"].double(), (x.shape[-1],), eps=6e-5)),
        }
