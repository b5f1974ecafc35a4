"""The semantics-preserving pipeline the benchmark runs on ResNet-50.

Order matters:

0. ``freeze_parameters``: in Dynamo graphs (what a ``torch.compile`` backend receives) the weights
   are graph inputs; freezing makes them constants so that the passes below can fold them. In the
   other dialects there is nothing to freeze (the report says so);
1. ``fuse_conv_bn``: folds each BatchNorm into its convolution (fewer nodes, one pass over memory
   less per BN);
2. ``fuse_linear_gelu``: one fused operator per safe Linear+GELU pair (none in ResNet-50);
3. ``fold_constants``: precomputes constant subgraphs (in aten graphs, e.g. the transposed
   weight ``aten.t(fc.weight)`` feeding ``addmm``);
4. ``eliminate_dead_code``: drops what the earlier passes left unused;
5. ``convert_to_channels_last``: last, so it sees the fused convolutions (converting before
   folding would hand the Conv+BN fuser weights it then replaces).

Op replacement is not part of it: it changes the model's outputs.

Validation needs no tolerance of its own: the pass manager's budget is measured on the model
(float32's own error against a float64 run), so the same default holds for a three-layer test
model and for a ResNet-50 whose logits are of order 1e4.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .constant_folding import fold_constants
from .conv_bn import fuse_conv_bn
from .dce import eliminate_dead_code
from .freezing import ParameterFreezer
from .linear_gelu import fuse_linear_gelu
from .memory_layout import convert_to_channels_last
from .pass_manager import PassManager


def default_pipeline(example_inputs: Sequence[Any] | None) -> PassManager:
    """The lab's semantics-preserving pass pipeline, validated on ``example_inputs``.

    Returns:
        A :class:`PassManager` running, in order: ``freeze_parameters`` (a :class:`ParameterFreezer`
        on ``example_inputs``), ``fuse_conv_bn``, ``fuse_linear_gelu``, ``fold_constants``,
        ``eliminate_dead_code``, ``convert_to_channels_last``.
    """
    passes = [
        ParameterFreezer(example_inputs),
        fuse_conv_bn,
        fuse_linear_gelu,
        fold_constants,
        eliminate_dead_code,
        convert_to_channels_last,
    ]
    return PassManager(passes, example_inputs=example_inputs)
