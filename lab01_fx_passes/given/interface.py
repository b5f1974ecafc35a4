"""What the passes of steps 1 to 8 agree on with their callers and tests (harness: do not edit).

Each file you write imports the part of this module it needs, so the names you use read as before
(``conv_bn.TRAINING_MODE``, ``dce.RANDOM_OPS``, ``freezing.FrozenValue`` still work). It holds:

- the operators a pass looks for, per dialect (:data:`ATEN_CONVOLUTIONS`, :data:`RANDOM_OPS`,
  :data:`ALIASING_OPS`, ...);
- the reasons a pass gives when it leaves something alone (the keys of its ``skipped`` counter,
  the values of the freezer's ``kept``): the tests and the pass manager's report read them;
- the records passes hand around (:data:`UNKNOWN`, :class:`LinearMatch`, :class:`FrozenValue`);
- a base class per pass: the counters its constructor sets up, its name, how it says why it
  changed nothing and, where that takes more than a call, its function form (``apply``). The class
  you write subclasses it and adds the algorithm: call ``super().__init__(...)`` first in your
  constructor.

Step 10's counterpart is :mod:`lab01_fx_passes.given.onednn_ops`.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import fx, nn
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from lab01_fx_passes.given.graph_tools import is_module_state
from lab01_fx_passes.given.pass_report import explain_skips, unchanged

aten = torch.ops.aten

#: Shared by the passes that need constant weights (steps 1 and 6): Dynamo's are graph inputs until frozen.
WEIGHTS_ARE_INPUTS = "weights are graph inputs: freeze first (freeze_parameters)"


class SaysWhyUnchanged(PassBase):
    """A pass built without arguments whose function form (:meth:`apply`) says why nothing changed."""

    #: The reason :meth:`apply` gives when the pass changed nothing.
    nothing_done: ClassVar[str]

    @classmethod
    def apply(cls, gm: fx.GraphModule) -> PassResult:
        """Run a new pass on ``gm`` (changed in place); when nothing changed, say so (:attr:`nothing_done`)."""
        result = cls()(gm)
        return result if result.modified else unchanged(result.graph_module, cls.nothing_done)


# -- Step 1: Conv+BN folding (conv_bn.py) -----------------------------------------------------------
#: aten convolutions: ``convolution`` (core aten, has a ``transposed`` flag) and ``convNd`` (export).
ATEN_CONVOLUTIONS = (aten.convolution.default, aten.conv1d.default, aten.conv2d.default, aten.conv3d.default)
#: aten batch norms that return a tuple ``(output, saved_mean, saved_rstd)`` read through ``getitem``.
ATEN_TUPLE_BATCH_NORMS = (
    aten._native_batch_norm_legit_no_training.default,
    aten.native_batch_norm.default,
    aten._native_batch_norm_legit.default,
)
#: aten batch norms returning the output tensor directly.
ATEN_TENSOR_BATCH_NORMS = (aten.batch_norm.default,)
#: Dynamo's convolutions (``nn.Conv2d`` inlined: ``torch.conv2d(x, weight, bias, stride, ...)``;
#: ``F.conv2d`` is the same function) and batch norm (``F.batch_norm(x, running_mean, ...)``).
TORCH_CONVOLUTIONS = (torch.conv1d, torch.conv2d, torch.conv3d)
TORCH_BATCH_NORMS = (F.batch_norm,)

#: Why a Conv+BN pair was not folded (the keys of ``ConvBNFuser.skipped``; also :data:`WEIGHTS_ARE_INPUTS`).
TRAINING_MODE = "BatchNorm in training mode (or without running statistics)"
SHARED_OUTPUT = "the convolution's output has another user"
TRANSPOSED = "transposed convolution"
#: ``torch.compile(..., dynamic=True)`` does not specialise a module's float attributes: BN's ``eps``
#: reaches the graph as a 0-d tensor input read by ``.item()``, so the call's ``eps`` is a node, not a number.
EPS_IS_A_GRAPH_VALUE = "eps is a value of the graph (a float Dynamo left symbolic), not a number"
NO_PAIRS = "no convolution followed by a BatchNorm in this graph"


class ConvBNFuserBase(fx.Transformer):
    """What ``ConvBNFuser`` is given: its counters, :meth:`why_unchanged` and its function form.

    Attributes:
        fused_count: how many Conv+BN pairs the fuser folds (set by the subclass's constructor).
        skipped: reason -> how many BatchNorms that follow a convolution were not folded for it.
    """

    def __init__(self, module: fx.GraphModule) -> None:
        super().__init__(module)
        self.fused_count = 0
        self.skipped: Counter[str] = Counter()

    def why_unchanged(self) -> str:
        """Why nothing was folded: each reason with its count, or :data:`NO_PAIRS`."""
        return explain_skips(self.skipped, "pair", NO_PAIRS)

    @classmethod
    def apply(cls, gm: fx.GraphModule) -> PassResult:
        """Build a fuser on ``gm`` and transform it: ``PassResult(new_graph_module, True)`` when a pair
        was folded, else ``unchanged(gm, fuser.why_unchanged())`` (``gm`` itself, untouched)."""
        fuser = cls(gm)
        if not fuser.fused_count:
            return unchanged(gm, fuser.why_unchanged())
        return PassResult(fuser.transform(), True)


# -- Step 2: dead code elimination (dce.py) ----------------------------------------------------------
#: Operators that draw random numbers (also as ``Tensor`` methods), in-place or not.
RANDOM_OPS = frozenset(
    {
        "rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like",
        "normal", "poisson", "bernoulli", "multinomial", "uniform", "exponential", "geometric",
        "cauchy", "log_normal", "random",
        "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout",
        "native_dropout", "rrelu",
    }
)  # fmt: skip
#: Operators that update running statistics when called with ``training=True`` (``instance_norm`` names its
#: flag ``use_input_stats``, True by default, and updates them only when it is given running statistics).
STATEFUL_IN_TRAINING = frozenset({"batch_norm", "native_batch_norm", "_native_batch_norm_legit", "instance_norm"})
#: Python's augmented assignments (``x += y`` traced as a function call) mutate their first argument.
AUGMENTED_ASSIGNMENTS = frozenset(
    {operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv, operator.ipow,
     operator.imod, operator.iand, operator.ior, operator.ixor, operator.ilshift, operator.irshift,
     operator.imatmul}
)  # fmt: skip
#: Why DCE changed nothing.
NO_DEAD_CODE = "no dead pure node"


class DCEPassBase(SaysWhyUnchanged):
    """What ``DCEPass`` is given: :attr:`removed_count` and its function form (reason: :data:`NO_DEAD_CODE`).

    Attributes:
        removed_count: how many nodes the last call removed (set by the subclass's ``call``).
    """

    nothing_done = NO_DEAD_CODE

    def __init__(self) -> None:
        super().__init__()
        self.removed_count = 0


# -- Step 3: constant folding (constant_folding.py) --------------------------------------------------
class _Unknown:
    """The value of a node that depends on a graph input (or on an impure op)."""

    def __repr__(self) -> str:
        return "<unknown>"


#: What the folder's analysis gives a node it cannot evaluate when the pass runs.
UNKNOWN = _Unknown()
#: Why folding changed nothing.
NO_CONSTANTS = "no constant subgraph to fold"


class ConstantFolderBase(fx.Interpreter):
    """What ``ConstantFolder`` is given: its state and its function form (which calls the subclass's ``fold()``).

    Attributes:
        constants: every constant call node -> its value (filled by the analysis).
        folded_count: how many buffers the last ``fold()`` created.
        _modules: ``dict(module.named_modules())``, what :func:`~lab01_fx_passes.dce.is_impure` reads.
    """

    def __init__(self, module: fx.GraphModule) -> None:
        # Keep every value: the rewrite needs them after the run.
        super().__init__(module, garbage_collect_values=False)
        self._modules = dict(module.named_modules())
        self.constants: dict[fx.Node, Any] = {}
        self.folded_count = 0

    @classmethod
    def apply(cls, gm: fx.GraphModule) -> PassResult:
        """Fold ``gm``'s constants (in place): ``PassResult(gm, True)`` when something was folded, else
        ``unchanged(gm, reason)``, which asks for freezing when the weights are graph inputs."""
        folder = cls(gm)
        folder.fold()
        if folder.folded_count:
            return PassResult(gm, True)
        if any(is_module_state(node) and node.users for node in gm.graph.find_nodes(op="placeholder")):
            return unchanged(gm, f"{NO_CONSTANTS}: the {WEIGHTS_ARE_INPUTS}")
        return unchanged(gm, NO_CONSTANTS)


# -- Step 4: operator replacement (op_replacement.py) ------------------------------------------------
#: The activations the pass can swap, by name (the names :func:`~lab01_fx_passes.op_names.op_name` gives them).
ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU, "relu6": nn.ReLU6, "hardswish": nn.Hardswish, "hardsigmoid": nn.Hardsigmoid,
    "gelu": nn.GELU, "silu": nn.SiLU, "mish": nn.Mish, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh,
    "elu": nn.ELU, "selu": nn.SELU,
}  # fmt: skip


class OpReplacerBase(PassBase):
    """What ``OpReplacer`` is given: the declared semantic change and the name reports show.

    Attributes:
        mapping: old activation name -> new one (set by the subclass's constructor).
    """

    #: The pass changes the outputs on purpose: the pass manager reports the deviation instead of failing.
    changes_semantics = True
    mapping: dict[str, str]

    @property
    def name(self) -> str:
        """A readable name for reports: ``replace_ops(relu->hardswish)``."""
        return "replace_ops(" + ", ".join(f"{old}->{new}" for old, new in self.mapping.items()) + ")"


# -- Step 5: Linear+GELU fusion (linear_gelu.py) -----------------------------------------------------
@dataclass
class LinearMatch:
    """A Linear found in a graph, in dialect-neutral terms.

    Attributes:
        x: the node holding the Linear's input (before any flattening ``view``).
        weight: a node ``[out, in]``, or the qualified name of a parameter (``"fc.weight"``).
        bias: like ``weight``, or None.
        chain: the nodes from the Linear's first op to the node the GELU reads, in order; all are
            erased by the fusion, so each must have exactly one user.
        leftovers: helper nodes (``aten.t``, the flattening ``view``) erased only if unused afterwards.
    """

    x: fx.Node
    weight: fx.Node | str
    bias: fx.Node | str | None
    chain: list[fx.Node]
    leftovers: list[fx.Node]


#: Why the fusion changed nothing.
NO_LINEAR_GELU = "no Linear -> GELU pair safe to fuse"


class LinearGeluFuserBase(SaysWhyUnchanged):
    """What ``LinearGeluFuser`` is given: :attr:`fused_count` and its function form (reason: :data:`NO_LINEAR_GELU`).

    Attributes:
        fused_count: how many pairs the last call fused (set by the subclass's ``call``).
    """

    nothing_done = NO_LINEAR_GELU

    def __init__(self) -> None:
        super().__init__()
        self.fused_count = 0


# -- Step 6: channels-last convolutions (memory_layout.py) -------------------------------------------
#: aten and Dynamo 2-D convolutions whose constant weight the layout pass converts.
ATEN_CONV2DS = (aten.convolution.default, aten.conv2d.default)
TORCH_CONV2DS = (torch.conv2d,)
#: View operators and the reshape that replaces them (``call_function`` targets; ``call_method``
#: ``view`` becomes ``reshape``).
VIEW_TO_RESHAPE = {aten.view.default: aten.reshape.default, aten._unsafe_view.default: aten.reshape.default}

#: Why a convolution was not converted (the keys of ``ChannelsLastConverter.skipped``; also
#: :data:`WEIGHTS_ARE_INPUTS`).
VIEW_MODIFIED_IN_PLACE = "a view downstream of it is modified in place: the region stays contiguous"
NO_CONVOLUTIONS = "no 2-D convolution in this graph"


def contiguous_output(value: Any) -> Any:
    """A tensor in the default (contiguous) layout; anything else unchanged. Inserted before the output."""
    return value.contiguous() if isinstance(value, torch.Tensor) else value


def is_view(node: fx.Node) -> bool:
    """Whether ``node`` is a shape ``view`` (aten ``view``/``_unsafe_view``, or ``x.view(sizes)``), not a dtype view."""
    if node.op == "call_function":
        return node.target in VIEW_TO_RESHAPE
    if node.op != "call_method" or node.target != "view":
        return False
    return not any(isinstance(arg, torch.dtype) for arg in node.args[1:])


class ChannelsLastConverterBase(PassBase):
    """What ``ChannelsLastConverter`` is given: its counters and :meth:`why_unchanged`.

    Attributes:
        converted_count: how many convolutions the last call converted.
        reshaped_count: how many views it turned into reshapes.
        skipped: reason -> how many convolutions it left alone for it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.converted_count = 0
        self.reshaped_count = 0
        self.skipped: Counter[str] = Counter()

    def why_unchanged(self) -> str:
        """Why no convolution was converted: each reason with its count, or :data:`NO_CONVOLUTIONS`."""
        return explain_skips(self.skipped, "convolution", NO_CONVOLUTIONS)


# -- Step 8: freezing (freezing.py) ------------------------------------------------------------------
#: Operators whose result may share memory with their input (a write to one is a write to the other).
ALIASING_OPS = frozenset(
    {
        "view", "view_as", "_unsafe_view", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze",
        "t", "transpose", "permute", "movedim", "swapaxes", "expand", "expand_as", "narrow", "select",
        "slice", "getitem", "split", "split_with_sizes", "chunk", "unbind", "tensor_split", "diagonal",
        "as_strided", "unfold", "detach", "alias", "contiguous", "to", "type_as", "real", "imag",
    }
)  # fmt: skip

#: Why a parameter or buffer placeholder stays an input (the values of ``ParameterFreezer.kept``).
MODIFIED_IN_PLACE = "the graph modifies it in place"
RETURNED = "the graph returns it or a view of it"
REQUIRES_GRAD = "it requires grad and grad mode is on: autograd needs it as an input"
NOT_A_TENSOR = "its value is not a tensor"
NO_MODULE_STATE = "no parameter or buffer placeholders (in this dialect parameters are constants already)"
NO_VALUES = "no example inputs: no values to freeze"


@dataclass(frozen=True)
class FrozenValue:
    """A placeholder the freezer turned into a constant.

    Attributes:
        index: the placeholder's position among the graph's inputs.
        name: the placeholder's name.
        tensor: the example input frozen (the module's parameter or buffer itself).
        version: ``tensor._version`` when it was frozen.
    """

    index: int
    name: str
    tensor: torch.Tensor
    version: int


class ParameterFreezerBase(PassBase):
    """What ``ParameterFreezer`` is given: its name in reports and the state its constructor keeps.

    Attributes:
        example_inputs: the values of the graph's placeholders, in order (a tuple), or None.
        frozen: what the last call froze, one :class:`FrozenValue` per placeholder.
        kept: placeholder name -> why it stays an input (the reasons above).
    """

    name = "freeze_parameters"

    def __init__(self, example_inputs: Sequence[Any] | None) -> None:
        super().__init__()
        self.example_inputs = None if example_inputs is None else tuple(example_inputs)
        self.frozen: list[FrozenValue] = []
        self.kept: dict[str, str] = {}
