"""Lab 03: a fused LayerNorm + GELU Triton kernel that ``torch.compile`` uses on its own.

Public API (the same in the starter and the reference solution):

- :func:`layernorm_gelu`: ``F.gelu(F.layer_norm(x, ...))`` in one Triton kernel.
- :func:`install_lowering` / :func:`uninstall_lowering`: make Inductor replace LayerNorm -> GELU
  with the kernel in every model it compiles; the handle counts the sites replaced.

Extension (optional, step 7, its points shown apart): :func:`fused_attention`,
``F.scaled_dot_product_attention`` (causal or not) in one Triton kernel with an online softmax.
Extension (optional, step 8): :func:`layernorm_gelu_fp8`, the same kernel on per-tensor-scaled FP8 input.
"""

from .attention import fused_attention
from .fp8 import layernorm_gelu_fp8
from .lowering import LoweringHandle, install_lowering, uninstall_lowering
from .op import layernorm_gelu

__all__ = [
    "LoweringHandle",
    "fused_attention",
    "install_lowering",
    "layernorm_gelu",
    "layernorm_gelu_fp8",
    "uninstall_lowering",
]
