"""What lab 3's graded tests check with, in the handout's step order (harness: do not edit).

``test_lab.py`` holds the tests and their cases; this module holds the machinery they share, so a
test reads as what it proves:

- step 1: :func:`reference` (what the kernel must compute), :func:`make_inputs`,
  :func:`assert_matches_reference` (fp32, within :data:`TOLERANCE`), :func:`assert_rounds_once`
  (half precision, within :data:`HALF_TOLERANCE`) and :func:`assert_raises_as_promised` (the errors
  a docstring promises; step 7's too);
- step 2: :func:`with_outliers`, data a well-behaved ``randn`` row hides;
- steps 2, 3 and 6: :func:`run_python` / :func:`run_simulated_gpu_check`, a check in a fresh process;
- step 4: :func:`the_custom_operator`, the operator ``layernorm_gelu`` dispatches to;
- step 5: :func:`compile_with_lowering` and its :class:`CompiledRun` (what Inductor generated, and
  each fused call's ``eps``, which names the site), :func:`layer_norm_affine_forms`, and two
  stand-ins for someone else's post-grad pass (:class:`SentinelPass`, :class:`RecordingPass`);
- step 7 (the optional extension): :data:`ATTENTION_SHAPES`, :func:`attention_inputs`,
  :func:`attention_reference` (``scaled_dot_product_attention`` in fp32) and
  :func:`assert_attention_matches` (within :data:`ATTENTION_TOLERANCE`; a causal result that a wrong
  mask explains, :data:`CAUSAL_MISTAKES`, is named in the message).

Every function that needs the implementation under test takes it as ``lab`` (the ``lab`` fixture: the
package the tests grade).
"""

from __future__ import annotations

import itertools
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch._inductor.utils import run_and_get_code
from torch.fx.experimental.proxy_tensor import make_fx

from lab03_triton_lowering.given.interface import AFFINE_FORMS, CountingHandle
from labkit.impl import IMPL_ENV_VAR
from labkit.labspec import load_lab_spec
from labkit.numerics import output_error, outputs_close
from labkit.step_summary import starter_todo

#: The spec's bar: the kernel matches F.gelu(F.layer_norm(...)) within 1e-4 (fp32).
TOLERANCE = 1e-4
#: ``layernorm_gelu``'s ``eps`` when a caller leaves it out: nn.LayerNorm's, as the starter's signature says.
DEFAULT_EPS = 1e-5
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
    them fails); ``affine`` is one of :data:`~lab03_triton_lowering.given.interface.AFFINE_FORMS`."""
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
    eps: float | None = 1e-5,
    approximate: str = "none",
    data: str = "",
) -> None:
    """``layernorm_gelu`` within TOLERANCE of PyTorch's; the message names the inputs (``data``: what kind),
    the files that compute it, and, for a NaN or inf where PyTorch's output is finite, where those come from.

    ``eps=None`` calls ``layernorm_gelu`` without ``eps``: the contract's default, :data:`DEFAULT_EPS`, applies.
    An error the call raises (other than a TODO's ``NotImplementedError``) fails the test with the same
    description of the inputs, the error kept as its cause.
    """
    shown = f"eps left to its default ({DEFAULT_EPS:g})" if eps is None else f"eps={eps}"
    case = f"{data + ', ' if data else ''}shape {list(x.shape)}, {shown}, approximate={approximate!r}"
    expected = reference(x, weight, bias, DEFAULT_EPS if eps is None else eps, approximate)
    given_eps = {} if eps is None else {"eps": eps}
    try:
        actual = lab.layernorm_gelu(x, weight, bias, approximate=approximate, **given_eps)
    except NotImplementedError:
        raise
    except Exception as error:
        pytest.fail(f"layernorm_gelu (op.py, its kernel in kernel.py) raised on {case}: {error}")
    error = output_error(actual, expected)
    not_finite = bool(expected.isfinite().all()) and not bool(actual.isfinite().all())
    hint = (
        ": NaN or inf where PyTorch's output is finite (a division by zero or an overflow: the variance is the "
        "biased one, divided by the row's length, and eps is added before the square root; or a load past the "
        "row or the last row: on CPU every element outside a tensor reads as NaN, so check your loads' masks)"
        if not_finite
        else f" (op.py: layernorm_gelu's eps defaults to {DEFAULT_EPS:g}, nn.LayerNorm's)"
        if eps is None
        else ""
    )
    assert error.max_abs <= TOLERANCE, (
        f"layernorm_gelu (op.py, its kernel in kernel.py) on {case}: "
        f"max |error| {error.max_abs:.3g} > {TOLERANCE}{hint}"
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


def assert_raises_as_promised(
    call: Callable[[], object], case: str, error: type[Exception], words: list[str], promiser: str
) -> None:
    """``call()`` raises ``error`` whose message holds each of ``words`` (as words), as ``promiser``'s
    docstring promises. A starter's ``NotImplementedError`` goes through: reported as not implemented."""
    promise = f"{promiser}'s docstring promises a {error.__name__} naming {' and '.join(map(repr, words))}"
    try:
        call()
    except NotImplementedError as raised:
        if starter_todo(raised, load_lab_spec(Path(__file__).parents[1].name, Path(__file__).parents[2])):
            raise  # a TODO of the starter: reported as not implemented
        pytest.fail(f"{case}: NotImplementedError from PyTorch: {raised}; {promise}")
    except error as raised:
        missing = [word for word in words if not re.search(rf"\b{re.escape(word)}\b", str(raised))]
        assert not missing, f"{case}: the {error.__name__} does not name {missing}: {raised!r}"
    except Exception as other:
        pytest.fail(f"{case}: {type(other).__name__}: {other}; {promise}")
    else:
        pytest.fail(f"{case}: no error; {promise}")


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
    """Run ``python -m lab03_triton_lowering.given.simulated_gpu <check>`` for the implementation under test."""
    return run_python(lab, "-m", "lab03_triton_lowering.given.simulated_gpu", check)


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


def assert_passes_opcheck(operator: torch._ops.OpOverload, arguments: tuple, inputs: str, rule: str) -> None:
    """``torch.library.opcheck(operator, arguments)``: PyTorch's own checklist (schema, fake/real agreement,
    autograd registration, AOT dispatch). Its message names the check that failed; this one adds which
    ``inputs`` it failed on and the ``rule`` of op.py they point to."""
    try:
        torch.library.opcheck(operator, arguments)
    except Exception as error:
        raise AssertionError(f"torch.library.opcheck failed on {inputs}: {rule}. {error}") from None


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
    """Build ``model_class()`` (one of :mod:`lab03_triton_lowering.given.models`), compile it with the lowering
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


# -- step 7 (extension): attention in one kernel, against scaled_dot_product_attention --------------

#: How far ``fused_attention`` may be from SDPA computed in fp32 on the same inputs. float32: the online
#: softmax reorders sums and exponentials (measured ~1e-6 on outputs of order one), 10x that allowed.
#: float16: the probabilities are rounded to half for the second product and the output once on the
#: store, about two half-precision units at the outputs' magnitude (measured below 1e-3).
ATTENTION_TOLERANCE = {torch.float32: dict(rtol=0.0, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=2e-3)}


@dataclass(frozen=True)
class AttentionShape:
    """``q: [batch, heads, queries, head_dim]``, ``k, v: [batch, heads, keys, head_dim]``."""

    batch: int
    heads: int
    queries: int
    keys: int
    head_dim: int

    def describe(self) -> str:
        return f"q [{self.batch}, {self.heads}, {self.queries}, {self.head_dim}], k and v with {self.keys} keys"


#: Sequence lengths and head dims on either side of the block sizes a kernel picks (16, 32, 64, 128),
#: queries and keys of different lengths (where the causal mask's alignment shows), and keys that no
#: block of a reasonable kernel holds at once (the online softmax's rescaling across blocks).
ATTENTION_SHAPES = {
    "one_token": AttentionShape(1, 1, 1, 1, 16),
    "seq_31_head_40": AttentionShape(1, 2, 31, 31, 40),
    "seq_64_head_64": AttentionShape(1, 2, 64, 64, 64),
    "seq_65_head_128": AttentionShape(1, 1, 65, 65, 128),
    "seq_33_head_8": AttentionShape(2, 1, 33, 33, 8),
    "queries_17_keys_70": AttentionShape(2, 1, 17, 70, 32),
    "queries_70_keys_17": AttentionShape(1, 2, 70, 17, 32),
    "queries_8_keys_520": AttentionShape(1, 1, 8, 520, 16),
}


def attention_inputs(
    shape: AttentionShape, dtype: torch.dtype = torch.float32, device: str = "cpu", seed: int = 0, spread: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(q, k, v)`` of ``shape``: q and k ~ N(0, spread^2) (spread 4 makes scores of several hundred),
    v ~ N(0.5, 1) (a mean away from zero, so a missing normalisation shows)."""
    generator = torch.Generator().manual_seed(seed)
    size = lambda n: (shape.batch, shape.heads, n, shape.head_dim)  # noqa: E731
    q = torch.randn(size(shape.queries), generator=generator) * spread
    k = torch.randn(size(shape.keys), generator=generator) * spread
    v = torch.randn(size(shape.keys), generator=generator) + 0.5
    return tuple(t.to(device=device, dtype=dtype) for t in (q, k, v))


def attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: float | None = None
) -> torch.Tensor:
    """What ``fused_attention`` must compute: PyTorch's ``scaled_dot_product_attention``, in fp32."""
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal, scale=scale)


def _masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor, scale: float | None):
    """SDPA in fp32 with an explicit ``[queries, keys]`` mask (True: the query sees the key)."""
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=visible, scale=scale)


#: The causal masks students write instead of SDPA's ``is_causal`` (keys ``j <= i``, aligned top left):
#: ``(what is wrong, mask(queries, keys))``. The diagonal masked out leaves query 0 no key, so rows from 1 on
#: are compared.
CAUSAL_MISTAKES = (
    (
        "the diagonal is masked out: causal attention keeps keys j <= i, a query attends to its own key "
        "(mask keys > query, not keys >= query)",
        lambda m, n: torch.ones(m, n, dtype=torch.bool).tril(-1),
    ),
    (
        "the mask is aligned bottom right (key j visible to query i when j <= i + keys - queries); "
        "is_causal aligns it top left: j <= i",
        lambda m, n: torch.ones(m, n, dtype=torch.bool).tril(n - m),
    ),
    ("no causal mask is applied: every query sees every key", lambda m, n: torch.ones(m, n, dtype=torch.bool)),
)


def _causal_mistake(out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None) -> str:
    """Which of :data:`CAUSAL_MISTAKES` ``out`` computes (compared from query 1 on), or ``""``."""
    tolerance = ATTENTION_TOLERANCE[q.dtype]
    m, n = q.shape[2], k.shape[2]
    for mistake, mask in CAUSAL_MISTAKES:
        visible = mask(m, n)
        if torch.equal(visible, torch.ones(m, n, dtype=torch.bool).tril()):
            continue  # this shape cannot tell the mistake from the contract
        wrong = _masked_attention(q, k, v, visible.to(q.device), scale)
        if m > 1 and outputs_close(out[:, :, 1:].float(), wrong[:, :, 1:], **tolerance):
            return f"; {mistake}"
    return ""


def assert_attention_matches(
    lab: ModuleType,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    scale: float | None = None,
    data: str = "",
    tolerance: dict[str, float] | None = None,
) -> None:
    """``fused_attention`` returns SDPA's shape, dtype and device, within ``tolerance`` (by default
    :data:`ATTENTION_TOLERANCE`) of its values.

    A causal result that another mask explains says which (:data:`CAUSAL_MISTAKES`).
    """
    tolerance = tolerance or ATTENTION_TOLERANCE[q.dtype]
    out = lab.fused_attention(q, k, v, causal=causal, scale=scale)
    where = f"attention.py's fused_attention on {data + ', ' if data else ''}"
    where += f"{q.dtype} q {list(q.shape)}, k {list(k.shape)}, causal={causal}"
    where += f", scale={scale}" if scale is not None else ", scale left to its default (1/sqrt(head_dim))"
    expected_shape = (*q.shape[:3], v.shape[-1])
    assert tuple(out.shape) == expected_shape and out.dtype == q.dtype and out.device == q.device, (
        f"{where}: returned {list(out.shape)} {out.dtype} on {out.device}; expected {list(expected_shape)} "
        f"{q.dtype} on {q.device}"
    )
    expected = attention_reference(q, k, v, causal, scale)
    if outputs_close(out.float(), expected, **tolerance):
        return
    error = output_error(out.float(), expected)
    mistake = _causal_mistake(out, q, k, v, scale) if causal else ""
    bad_rows = (~torch.isfinite(out.float())).flatten(end_dim=1).any(dim=(0, 2)).nonzero().flatten().tolist()
    if bad_rows:
        mistake += (
            f"; NaN or inf at queries {bad_rows[:5]}{'...' if len(bad_rows) > 5 else ''}: every query sees at "
            "least key 0 (causal attention keeps the diagonal), so it is a 0/0, an exp that overflowed, or a load "
            "outside q, k or v (on CPU every element outside a tensor reads as NaN: check each load's mask, over "
            "the sequence and over the head dim)"
        )
    raise AssertionError(
        f"{where}: max |error| {error.max_abs:.3g} next to scaled_dot_product_attention (allowed: {tolerance}){mistake}"
    )


# -- step 8 (optional): FP8 input ----------------------------------------------------------------

#: One unit in the last place of the output dtype (against float64, rounded to it): the kernel's fp32
#: error is far below half a unit, so only the last rounding may differ. atol covers outputs near 0.
FP8_TOLERANCE = {torch.float16: dict(rtol=2**-10, atol=1e-5), torch.bfloat16: dict(rtol=2**-7, atol=1e-4)}


def fp8_inputs(
    shape: tuple[int, ...], dtype: torch.dtype, scale: float, seed: int = 0, spread: float = 3.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scale)``: real values ~ N(1, spread^2) quantized to ``dtype`` with the per-tensor ``scale``
    (each stored ``q`` stands for ``q * scale``); the scale is a one-element fp32 tensor."""
    generator = torch.Generator().manual_seed(seed)
    real = (torch.randn(shape, generator=generator) * spread + 1.0) * abs(scale)
    return (real / scale).to(dtype), torch.tensor([scale], dtype=torch.float32)


def fp8_reference(q, scale, weight, bias, eps, approximate, out_dtype) -> torch.Tensor:
    """The formula in float64, rounded once to ``out_dtype``."""
    wide = lambda t: None if t is None else t.double()  # noqa: E731
    x = q.double() * scale.double()
    normed = F.layer_norm(x, (x.shape[-1],), wide(weight), wide(bias), eps)
    return F.gelu(normed, approximate=approximate).to(out_dtype)


def assert_fp8_matches(lab: ModuleType, q, scale, weight=None, bias=None, eps=1e-5, approximate="none",
                       out_dtype=torch.bfloat16, why: str = "") -> None:  # fmt: skip
    """``layernorm_gelu_fp8`` within :data:`FP8_TOLERANCE` of :func:`fp8_reference`, of ``out_dtype``;
    the message names the inputs and, given ``why``, what the failure most likely means."""
    actual = lab.layernorm_gelu_fp8(q, scale, weight, bias, eps=eps, approximate=approximate, out_dtype=out_dtype)
    assert actual.dtype == out_dtype and actual.shape == q.shape, (
        f"layernorm_gelu_fp8 returned {actual.dtype}{list(actual.shape)}; expected {out_dtype}{list(q.shape)}"
    )
    expected = fp8_reference(q, scale, weight, bias, eps, approximate, out_dtype)
    tolerance = FP8_TOLERANCE[out_dtype]
    close = torch.isclose(actual.double(), expected.double(), **tolerance)
    if not bool(close.all()):
        error = output_error(actual.double(), expected.double())
        raise AssertionError(
            f"{q.dtype} {list(q.shape)} with scale {scale.item():g}, eps={eps}, out {out_dtype}: "
            f"{int((~close).sum())} values outside rtol={tolerance['rtol']:.3g}, atol={tolerance['atol']:g} "
            f"(max |error| {error.max_abs:.3g}){'; ' + why if why else ''}"
        )
