"""What the kernel, the operators and the lowering agree on, and the lowering's handle (harness: do not edit).

``kernel.py``, ``op.py`` and ``lowering.py`` (the files you write) import these names, so each is
also reachable where it was first defined (``kernel.GELU_APPROXIMATIONS``, ``op.SUPPORTED_DTYPES``,
``lowering.AFFINE_FORMS``, ``lowering.LoweringHandle``):

- :data:`GELU_APPROXIMATIONS`, :data:`SUPPORTED_DTYPES`, :data:`AFFINE_FORMS`: the GELU forms, input
  dtypes and LayerNorm affine forms the kernel implements, the operators accept and the lowering
  matches;
- :data:`ATTENTION_DTYPES`, :data:`MAX_HEAD_DIM`: what the optional extension's ``fused_attention``
  (``attention.py``) accepts;
- :data:`FP8_DTYPES`, :data:`FP8_OUT_DTYPES`: what the optional step 8's ``layernorm_gelu_fp8``
  (``fp8.py``) reads and writes;
- :class:`CountingHandle`: what ``install_lowering`` returns, a window on the installed pass that
  counts its replacements in ``torch._dynamo.utils.counters["inductor"]``. ``lowering.py`` names its
  own counter key (:attr:`CountingHandle.counter`), which holds the package's operator namespace:
  the starter and the reference solution imported in one process count apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch._dynamo.utils import counters
from torch._inductor.custom_graph_pass import CustomGraphPass

#: The GELU forms the kernel implements, named as ``F.gelu``'s ``approximate`` argument.
GELU_APPROXIMATIONS = ("none", "tanh")
#: Input dtypes the kernel supports (it computes in fp32; float64 would silently lose precision).
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: Which affine parameters a LayerNorm has: nn.LayerNorm(d), nn.LayerNorm(d, bias=False), elementwise_affine=False.
AFFINE_FORMS = ("weight_and_bias", "weight_only", "none")

#: The extension's attention dtypes: float32 and float16 (Triton's interpreter has no bfloat16 arithmetic, so a
#: bfloat16 kernel could not be checked on CPU).
ATTENTION_DTYPES = (torch.float32, torch.float16)
#: The largest head dimension ``fused_attention`` takes: one program holds its query block, ``BLOCK_M x head_dim``,
#: and one key and one value block in registers.
MAX_HEAD_DIM = 128

#: The optional step 8's inputs: the two FP8 formats of the OCP standard and of H100/H200 tensor cores.
#: e4m3fn (4 exponent bits, 3 mantissa bits, largest 448, no infinities) suits activations and weights;
#: e5m2 (largest 57344, with infinities) suits gradients. Each value stands for ``x * scale``.
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
#: What ``layernorm_gelu_fp8`` writes: half precision, the dtype the next matmul reads.
FP8_OUT_DTYPES = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class CountingHandle:
    """What :func:`install_lowering` returns: a window on the installed pass (given: read it, keep it).

    ``lowering.LoweringHandle`` is this class with :attr:`counter` set to the lowering's
    ``REPLACEMENTS_COUNTER``; build it as ``LoweringHandle(the_pass, counted_before=...)``.

    Attributes:
        graph_pass: the installed pass.
        counted_before: the replacement counter when the lowering was installed.
        counter: (class attribute) the pass's key in ``counters["inductor"]``.
    """

    graph_pass: CustomGraphPass
    counted_before: int
    counter: ClassVar[str]

    @property
    def replacements(self) -> int:
        """LayerNorm+GELU sites in the graphs compiled since this lowering was installed.

        Compilations served from Inductor's caches count too: their replacements are replayed into
        the same counter. (``counters.clear()`` resets the count.)
        """
        return max(counters["inductor"][self.counter] - self.counted_before, 0)
