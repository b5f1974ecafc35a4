"""What lab 3's graded tests check with, in the handout's step order (harness: do not edit).

``test_lab.py`` holds the tests and their cases; this module holds the machinery they share, so a
test reads as what it proves:

- step 1: :func:`reference` (what the kernel must compute), :func:`make_inputs`,
  :func:`assert_matches_reference` (fp32, within :data:`TOLERANCE`) and :func:`assert_rounds_once`
  (half precision, within :data:`HALF_TOLERANCE`);
- step 2: :func:`with_outliers`, data a well-behaved ``randn`` row hides;
- steps 2, 3 and 6: :func:`run_python` / :func:`run_simulated_gpu_check`, a check in a fresh process;
- step 4: :func:`the_custom_operator`, the operator ``layernorm_gelu`` dispatches to;
- step 5: :func:`compile_with_lowering` and its :class:`CompiledRun` (what Inductor generated, and
  each fused call's ``eps``, which names the site), :func:`layer_norm_affine_forms`, and two
  stand-ins for someone else's post-grad pass (:class:`SentinelPass`, :class:`RecordingPass`).

Every function that needs the implementation under test takes it as ``lab`` (the ``lab`` fixture:
the student's package, or the reference with ``--impl=solution``).
"""

from __future__ import annotations

import itertools
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch._inductor.utils import run_and_get_code
from torch.fx.experimental.proxy_tensor import make_fx

from lab03_triton_lowering.interface import AFFINE_FORMS, CountingHandle
from labkit.impl import IMPL_ENV_VAR
from labkit.numerics import output_error, outputs_close

#: The spec's bar: the kernel matches F.gelu(F.layer_norm(...)) within 1e-4 (fp32).
TOLERANCE = 1e-4
#: Half precision: the kernel rounds once (fp32 math, one rounding on store), so it is within
#: two units in the last place of the fp32 reference rounded to the same dtype.
HALF_TOLERANCE = {torch.float16: dict(rtol=2e-3, atol=1e-5), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-5)}


# -- step 1: the kernel against eager PyTorch ----------------------------------------------------


def reference(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float, approximate: str
) -> torch.Tensor:
    """What the fused kernel must compute: eager PyTorch, two ops."""
    return F.gelu(F.layer_norm(x, (x.shape[-1],), weight, bias, eps), approximate=approximate)


def make_inputs(
    shape: tuple[int, ...],
    affine: str = "weight_and_bias",
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    seed: int = 0,
    offset: float = 0.5,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """``(x, weight, bias)``: x ~ N(offset, 2^2) and affine parameters far from the identity (so ignoring
    them fails); ``affine`` is one of :data:`~lab03_triton_lowering.interface.AFFINE_FORMS`."""
    assert affine in AFFINE_FORMS, f"affine={affine!r}: one of {AFFINE_FORMS}"
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=generator) * 2 + offset
    n = shape[-1]
    weight = torch.rand(n, generator=generator) + 0.5 if affine != "none" else None
    bias = torch.rand(n, generator=generator) - 0.5 if affine == "weight_and_bias" else None
    move = lambda t: None if t is None else t.to(device=device, dtype=dtype)  # noqa: E731
    return move(x), move(weight), move(bias)


def assert_matches_reference(
    lab: ModuleType,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float = 1e-5,
    approximate: str = "none",
    data: str = "",
) -> None:
    """``layernorm_gelu`` within TOLERANCE of PyTorch's; the message names the inputs (``data``: what kind)."""
    expected = reference(x, weight, bias, eps, approximate)
    actual = lab.layernorm_gelu(x, weight, bias, eps=eps, approximate=approximate)
    error = output_error(actual, expected)
    assert error.max_abs <= TOLERANCE, (
        f"{data + ', ' if data else ''}shape {list(x.shape)}, eps={eps}, approximate={approximate!r}: "
        f"max |error| {error.max_abs:.3g} > {TOLERANCE}"
    )


def assert_rounds_once(lab: ModuleType, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    """Loads half, computes in fp32, rounds once on the store: within 2 ulps of the fp32 result."""
    x, weight, bias = make_inputs(shape, dtype=dtype)
    out = lab.layernorm_gelu(x, weight, bias, approximate="tanh")
    assert out.dtype == dtype, f"{dtype} in, {out.dtype} out: the output has the input's dtype"
    expected = reference(x.float(), weight.float(), bias.float(), 1e-5, "tanh").to(dtype)
    error = output_error(out, expected)
    assert outputs_close(out, expected, **HALF_TOLERANCE[dtype]), (
        f"{dtype} rows of {shape[-1]}: max |error| {error.max_abs:.3g} next to the fp32 result rounded once to "
        f"{dtype}: convert every load to fp32 and accumulate in fp32 (the sums, the "
        "statistics, the GELU); round to the output dtype once, on the store"
    )


# -- step 2: data that finds bugs ----------------------------------------------------------------


def with_outliers(shape: tuple[int, int]) -> torch.Tensor:
    """:func:`make_inputs`' x with one value per row (of the first two) far from the rest: normalised, it is
    about sqrt(row length), where a tanh written with exp(+2z) overflows."""
    x = make_inputs(shape)[0]
    x[0, 5], x[1, 7] = 4e3, -4e3
    return x


# -- steps 2, 3 and 6: checks in a fresh process -------------------------------------------------


def run_python(
    lab: ModuleType, *args: str, env: dict[str, str] | None = None, unset: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    """Run ``python <args>`` (``-m module ...`` or ``-c code``) in a fresh process,
    against the implementation under test.

    From the folder the tested package was imported from (``-m`` and ``-c`` put it first on
    ``sys.path``), so the subprocess sees the same code as this test. ``TRITON_INTERPRET`` is removed: the
    subprocess decides per launch, as a user's process does; so is every variable named in ``unset``.
    """
    root = Path(lab.__file__).resolve().parents[len(lab.__name__.split("."))]
    base = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET" and key not in unset}
    env = {**base, IMPL_ENV_VAR: os.environ.get(IMPL_ENV_VAR, "student"), **(env or {})}
    return subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True, text=True, timeout=600)


def run_simulated_gpu_check(lab: ModuleType, check: str) -> subprocess.CompletedProcess:
    """Run ``python -m lab03_triton_lowering.simulated_gpu <check>`` for the implementation under test."""
    return run_python(lab, "-m", "lab03_triton_lowering.simulated_gpu", check)


# -- step 4: the operator --------------------------------------------------------------------------


def the_custom_operator(
    lab: ModuleType, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None
) -> torch._ops.OpOverload:
    """The one custom operator ``layernorm_gelu`` dispatches to, found by tracing it."""
    graph = make_fx(lambda x, w, b: lab.layernorm_gelu(x, w, b, eps=1e-5, approximate="none"), tracing_mode="fake")(
        x, weight, bias
    ).graph
    targets = [node.target for node in graph.nodes if node.op == "call_function"]
    custom = [t for t in targets if isinstance(t, torch._ops.OpOverload) and t.namespace not in ("aten", "prims")]
    assert len(custom) == 1, f"expected one call of a custom operator in the traced graph, got {targets}"
    return custom[0]


# -- step 5: the lowering, seen through Inductor's generated code -----------------------------------


@dataclass(frozen=True)
class FusedCall:
    """One call of the fused operator found in Inductor's generated code."""

    eps: float
    approximate: str


#: ``buf3 = torch.ops.<namespace>.<op>.default(x, weight, bias, 1e-06, 'tanh')`` in CPU wrapper code.
FUSED_CALL = re.compile(
    r"torch\.ops\.\w+\.layernorm_gelu\w*\.default\(.*, (?P<eps>[-+0-9.e]+), '(?P<approximate>\w+)'\)"
)


@dataclass(frozen=True)
class CompiledRun:
    """A model compiled by default ``torch.compile`` with the lowering installed, and what came out."""

    eager: dict[str, torch.Tensor]
    compiled: dict[str, torch.Tensor]
    code: str
    replacements: int
    handle: CountingHandle

    @property
    def fused_calls(self) -> list[FusedCall]:
        """Every fused call in the generated code, in order."""
        return [FusedCall(float(m["eps"]), m["approximate"]) for m in FUSED_CALL.finditer(self.code)]

    def calls_with_eps(self, eps: float) -> list[FusedCall]:
        """The fused calls of the site whose LayerNorm has this ``eps`` (each site of the models has its own)."""
        return [call for call in self.fused_calls if math.isclose(call.eps, eps, rel_tol=1e-6)]


def compile_with_lowering(
    lab: ModuleType, model_class: type[nn.Module], device: str = "cpu", dtype: torch.dtype = torch.float32
) -> CompiledRun:
    """Build ``model_class()`` (one of :mod:`lab03_triton_lowering.models`), compile it with the lowering
    installed, run it on a (2, 5, 32) input and uninstall; eager's outputs come along for comparison."""
    torch.manual_seed(0)
    model = model_class().to(device=device, dtype=dtype).eval()
    x = torch.randn(2, 5, 32, device=device, dtype=dtype)
    handle = lab.install_lowering()
    try:
        # Inductor's caches stay on, as users have them: a compile served from the cache counts too.
        with torch.no_grad():
            compiled, code = run_and_get_code(torch.compile(model), x)
            eager = model(x)
        replacements = handle.replacements
    finally:
        lab.uninstall_lowering()
    return CompiledRun(eager, compiled, "\n".join(code), replacements, handle)


def layer_norm_affine_forms() -> list[tuple[str, ...]]:
    """Every choice of affine tensors ``aten::layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None,
    Tensor? bias=None, float eps=1e-05, ...)`` allows: each optional tensor (of shape normalized_shape)
    present or absent. Read from the schema, so a new optional tensor fails here rather than going untested."""
    optional = [
        a.name
        for a in torch.ops.aten.layer_norm.default._schema.arguments
        if isinstance(a.type, torch.OptionalType) and a.type.getElementType() == torch.TensorType.get()
    ]
    assert optional == ["weight", "bias"], f"aten.layer_norm's optional tensors are {optional}: update the test"
    return [
        tuple(name for name, used in zip(optional, present) if used)
        for present in itertools.product((True, False), repeat=len(optional))
    ]


def affine_name(affine: tuple[str, ...]) -> str:
    """A test id for one of :func:`layer_norm_affine_forms`: ``weight_and_bias``, ``weight_only``, ..."""
    names = {("weight", "bias"): "weight_and_bias", ("weight",): "weight_only", ("bias",): "bias_only"}
    return names.get(affine, "none")


class SentinelPass(CustomGraphPass):
    """Someone else's post-grad pass, installed before ours: it does nothing, under its own uuid."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        pass

    def uuid(self) -> str:
        return "sentinel"


class RecordingPass(SentinelPass):
    """A previous post-grad pass that records the graphs it was run on."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.Graph] = []

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.graphs.append(graph)
