"""Teach Inductor to use the fused kernel wherever a model computes GELU(LayerNorm(x)).

Where Inductor's graph stands when our pass runs (``torch._inductor.config.post_grad_custom_post_pass``):
AOTAutograd has functionalized the model and Inductor has *decomposed* it. ``F.layer_norm`` is now
``var_mean -> add(eps) -> rsqrt -> sub -> mul [-> mul weight] [-> add bias]`` and ``F.gelu`` is
``mul(0.5), mul(1/sqrt 2) -> erf -> add 1 -> mul`` (or the tanh polynomial), with dtype converts
around both in half precision. A pattern written on ``aten.layer_norm`` / ``aten.gelu`` would never
match. ``register_replacement`` solves this by *tracing* an ordinary PyTorch search function
through the same decompositions, so the pattern is exactly the subgraph Inductor produces.

Rules the pattern matcher enforces for us, and the tests check:

- eps is a wildcard: ``scalar_workaround={"eps": ...}`` turns the traced literal into an argument.
- A match is refused when an intermediate node (the LayerNorm output, say) has a user outside
  the pattern: replacing it would drop a value someone else reads.
- Each GELU form is its own pattern with its own replacement: the tanh polynomial never matches
  the erf pattern, so an erf kernel can never stand in for a tanh GELU.
- Shapes, dims and dtypes are re-checked on the real node values (the initial match ignores
  ints), so a LayerNorm over two trailing dims does not match a pattern over one.

Two things this file does that the pattern matcher does not do for us:

- **Half precision, with or without the round trip.** Whether the model's graph still rounds
  the LayerNorm output to fp16 before GELU depends on the PyTorch release (see
  :mod:`lab03_triton_lowering.given.round_trips`), so every half-precision pattern is registered
  twice: as traced, and with the round trip folded away. The kernel rounds once, on its store,
  which is what Inductor computes in the folded case and closer to fp32 than eager in the other.
- **A count that survives Inductor's caches.** A compile served from the FX graph cache (or
  AOTAutograd's cache, which wraps it) runs no passes, so a count kept by the pass would miss
  it. Inductor records how much each compile moved its ``counters["inductor"]`` and replays
  that on every cache hit, so the pass counts its replacements there, under its own key, and the
  handle reads the counter.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files
from torch._inductor.pattern_matcher import Match, PatternMatcherPass, fwd_only, register_replacement

from lab03_triton_lowering.given.interface import AFFINE_FORMS, CountingHandle
from lab03_triton_lowering.given.round_trips import fwd_only_folding_round_trips

from .kernel import GELU_APPROXIMATIONS
from .op import OP_NAMESPACE, SUPPORTED_DTYPES, layernorm_gelu_replacement

#: The literal traced in place of eps; any value works as long as it is distinctive in the graph.
_EPS_PLACEHOLDER = 1e-5
#: This pass's key in ``torch._dynamo.utils.counters["inductor"]`` (replayed by Inductor on cache hits).
REPLACEMENTS_COUNTER = f"{OP_NAMESPACE}_layernorm_gelu_replacements"
#: Files whose contents decide what the pass does: part of its cache key.
_SOURCE_FILES = tuple(str(Path(__file__).with_name(name)) for name in ("kernel.py", "op.py", "lowering.py"))


def search_and_replacement(approximate: str, affine: str) -> tuple[Callable, Callable]:
    """The (search, replacement) pair for one GELU form and one affine form.

    Both take the same arguments: ``x``, the affine tensors the form has, and ``eps`` last.
    The search function is plain eager code; ``register_replacement`` traces it into a pattern.
    """
    if affine == "weight_and_bias":

        def search(x, weight, bias, eps):
            return F.gelu(F.layer_norm(x, (x.shape[-1],), weight, bias, eps), approximate=approximate)

        def replacement(x, weight, bias, eps):
            return layernorm_gelu_replacement(x, weight, bias, eps, approximate)

    elif affine == "weight_only":

        def search(x, weight, eps):
            return F.gelu(F.layer_norm(x, (x.shape[-1],), weight, None, eps), approximate=approximate)

        def replacement(x, weight, eps):
            return layernorm_gelu_replacement(x, weight, None, eps, approximate)

    elif affine == "none":

        def search(x, eps):
            return F.gelu(F.layer_norm(x, (x.shape[-1],), None, None, eps), approximate=approximate)

        def replacement(x, eps):
            return layernorm_gelu_replacement(x, None, None, eps, approximate)

    else:
        raise ValueError(f"affine={affine!r}: expected one of {AFFINE_FORMS}")
    return search, replacement


def _example_inputs(affine: str, dtype: torch.dtype) -> list[torch.Tensor]:
    # Values do not matter, only dtypes and ranks: the pattern is re-checked on the real shapes.
    # Distinct tensors for weight and bias: tracing one tensor twice would yield a pattern in
    # which weight and bias are the same node.
    x, weight, bias = torch.empty(2, 8, dtype=dtype), torch.empty(8, dtype=dtype), torch.empty(8, dtype=dtype)
    return {"weight_and_bias": [x, weight, bias], "weight_only": [x, weight], "none": [x]}[affine]


def kernel_supports(match: Match) -> bool:
    """``extra_check`` for every pattern: replace only what the kernel computes exactly as eager does.

    The pattern itself cannot see dtypes (a float64 LayerNorm decomposes into the same nodes as a
    float32 one), but the kernel computes in fp32: a float64 site must stay with Inductor. Mixed
    dtypes or devices among x, weight and bias are left alone too (rare, and not worth the risk).
    """
    x = match.kwargs["x"].meta["val"]
    tensors = [arg.meta["val"] for arg in match.kwargs.values() if isinstance(arg, torch.fx.Node)]
    return (
        x.dtype in SUPPORTED_DTYPES
        and x.device.type in ("cpu", "cuda")
        and all(t.dtype == x.dtype and t.device == x.device for t in tensors)
    )


def build_patterns() -> PatternMatcherPass:
    """Register every (GELU form, affine form, dtype, round trip or not) pattern into a new ``PatternMatcherPass``.

    One pattern per dtype because half-precision decompositions add ``convert_element_type``
    nodes (compute in fp32, round back) that an fp32 pattern does not have; half precision gets a
    second pattern without the LayerNorm -> GELU round trip (see the module docstring).
    """
    patterns = PatternMatcherPass(pass_name="layernorm_gelu_fusion")
    for approximate, affine, dtype in itertools.product(GELU_APPROXIMATIONS, AFFINE_FORMS, SUPPORTED_DTYPES):
        search, replacement = search_and_replacement(approximate, affine)
        trace_functions = [fwd_only] if dtype == torch.float32 else [fwd_only, fwd_only_folding_round_trips]
        for trace in trace_functions:  # fwd_only: inference graphs, dead nodes dropped from the pattern
            register_replacement(
                search,
                replacement,
                _example_inputs(affine, dtype),
                trace,
                [patterns],
                extra_check=kernel_supports,
                scalar_workaround={"eps": _EPS_PLACEHOLDER},
                skip_duplicates=True,
            )
    return patterns


class LayerNormGeluPass(CustomGraphPass):
    """The post-grad pass Inductor calls on every graph it compiles while the lowering is installed.

    Each compile's replacements are added to ``counters["inductor"][REPLACEMENTS_COUNTER]``, which
    Inductor records with the compiled graph and adds again whenever the cache serves it.

    Attributes:
        previous: the custom post-grad pass that was installed before, run first and restored on uninstall.
    """

    def __init__(self, patterns: PatternMatcherPass, previous: Callable | None) -> None:
        self.patterns = patterns
        self.previous = previous

    def __call__(self, graph: torch.fx.Graph) -> None:
        if self.previous is not None:
            self.previous(graph)
        counters["inductor"][REPLACEMENTS_COUNTER] += self.patterns.apply(graph)

    def uuid(self) -> bytes | None:
        """Cache key of the pass: Inductor reuses a cached graph only if this is unchanged.

        A hash of everything that decides the code the pass leaves behind: the files defining it
        (editing the kernel or the patterns invalidates cached graphs), the operators' namespace
        (the generated code calls ``torch.ops.<namespace>.layernorm_gelu`` by name: the same files
        under another package name must not reuse it) and the previous pass's key. ``None`` (no
        caching) if the previous pass cannot be keyed.
        """
        extra = OP_NAMESPACE
        if self.previous is not None:
            previous_uuid = self.previous.uuid() if isinstance(self.previous, CustomGraphPass) else None
            if previous_uuid is None:
                return None
            extra += repr(previous_uuid)
        return get_hash_for_files(_SOURCE_FILES, extra=extra)


class LoweringHandle(CountingHandle):
    """What :func:`install_lowering` returns (given, in ``given/interface.py``): ``.replacements`` counts
    this pass's sites.

    Build it as ``LoweringHandle(graph_pass, counted_before=...)``; it reads :data:`REPLACEMENTS_COUNTER`.
    """

    counter = REPLACEMENTS_COUNTER


_patterns: PatternMatcherPass | None = None
_installed: LoweringHandle | None = None


def install_lowering() -> LoweringHandle:
    """Make every later ``torch.compile`` (Inductor) use the fused kernel for LayerNorm -> GELU.

    Idempotent: while installed, calling it again returns the same handle. Patterns are traced
    once per process (about a second), on the first call.
    """
    global _patterns, _installed
    if _installed is not None and inductor_config.post_grad_custom_post_pass is _installed.graph_pass:
        return _installed
    if _patterns is None:
        _patterns = build_patterns()
    graph_pass = LayerNormGeluPass(_patterns, previous=inductor_config.post_grad_custom_post_pass)
    inductor_config.post_grad_custom_post_pass = graph_pass
    _installed = LoweringHandle(graph_pass, counted_before=counters["inductor"][REPLACEMENTS_COUNTER])
    return _installed


def uninstall_lowering() -> None:
    """Restore Inductor's configuration as it was before :func:`install_lowering` (no-op if not installed)."""
    global _installed
    if _installed is None:
        return
    if inductor_config.post_grad_custom_post_pass is _installed.graph_pass:
        inductor_config.post_grad_custom_post_pass = _installed.graph_pass.previous
    _installed = None
