"""Lab 01: FX graph transformation passes (public API).

Passes, each a callable ``GraphModule -> torch.fx.passes.infra.pass_base.PassResult``:

- :func:`fuse_conv_bn` / :class:`ConvBNFuser` (an ``fx.Transformer``): fold eval BatchNorm into Conv.
- :func:`fold_constants` / :class:`ConstantFolder` (an ``fx.Interpreter``): precompute constant subgraphs.
- :func:`eliminate_dead_code` / :class:`DCEPass`: remove unused pure nodes, keep impure ones.
- :func:`replace_ops` / :class:`OpReplacer`: swap activations (``{"relu": "hardswish"}``); changes semantics.
- :func:`fuse_linear_gelu` / :class:`LinearGeluFuser`: Linear+GELU -> one fused operator, every dialect.
- :func:`convert_to_channels_last` / :class:`ChannelsLastConverter`: NHWC convolution weights.
- :func:`freeze_parameters` / :class:`ParameterFreezer`: a Dynamo graph's parameters and buffers become constants.

Composition: :class:`PassManager` (validates outputs after every pass, reports), and
:func:`default_pipeline` (the semantics-preserving pipeline the benchmark runs).

Extension (optional, its points shown apart): :func:`lower_to_onednn` / :class:`OneDNNLowering`
lowers Conv(+ReLU, +add) to oneDNN's fused, pre-packed convolution; :func:`onednn_pipeline` is
:func:`default_pipeline` followed by it. :func:`simplify_algebra` / :class:`AlgebraicSimplifier`
(step 11) removes the exact identities (``x * 1``, ``-(-x)``, ``x.t().t()``...) and no other.
"""

# First, before torch: run from a Python without the course's packages, say which interpreter to use.
from labkit.environment import require_course_environment

require_course_environment()

from .algebraic import AlgebraicSimplifier, simplify_algebra
from .constant_folding import ConstantFolder, fold_constants
from .conv_bn import ConvBNFuser, fuse_conv_bn
from .dce import DCEPass, eliminate_dead_code, is_impure
from .freezing import ParameterFreezer, freeze_parameters
from .linear_gelu import LinearGeluFuser, fuse_linear_gelu
from .memory_layout import ChannelsLastConverter, convert_to_channels_last
from .onednn_lowering import OneDNNLowering, lower_to_onednn, onednn_pipeline
from .op_names import OpName, op_name
from .op_replacement import OpReplacer, replace_ops
from .pass_manager import PassManager, PassReport, PassValidationError
from .pipeline import default_pipeline

__all__ = [
    "AlgebraicSimplifier",
    "ChannelsLastConverter",
    "ConstantFolder",
    "ConvBNFuser",
    "DCEPass",
    "LinearGeluFuser",
    "OneDNNLowering",
    "OpName",
    "OpReplacer",
    "ParameterFreezer",
    "PassManager",
    "PassReport",
    "PassValidationError",
    "convert_to_channels_last",
    "default_pipeline",
    "eliminate_dead_code",
    "fold_constants",
    "freeze_parameters",
    "fuse_conv_bn",
    "fuse_linear_gelu",
    "is_impure",
    "lower_to_onednn",
    "onednn_pipeline",
    "op_name",
    "replace_ops",
    "simplify_algebra",
]
