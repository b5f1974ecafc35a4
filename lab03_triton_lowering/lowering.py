"""Teach Inductor to use the fused kernel wherever a model computes GELU(LayerNorm(x)).  [YOU WRITE THIS]

Where Inductor's graph stands when your pass runs (``torch._inductor.config.post_grad_custom_post_pass``):
AOTAutograd has functionalized the model and Inductor has *decomposed* it. ``F.layer_norm`` is now
``var_mean -> add(eps) -> rsqrt -> sub -> mul [-> mul weight] [-> add bias]`` and ``F.gelu`` is
``mul(0.5), mul(1/sqrt 2) -> erf -> add 1 -> mul`` (or the tanh polynomial), with dtype converts
around both in half precision. A pattern written on ``aten.layer_norm`` / ``aten.gelu`` would never
match. ``torch._inductor.pattern_matcher.register_replacement`` solves this by *tracing* an ordinary
PyTorch search function through the same decompositions, so the pattern is exactly the subgraph
Inductor produces.

What a correct lowering guarantees (the tests check each):

- any eps: ``scalar_workaround={"eps": ...}`` turns the traced literal into an argument;
- never when an intermediate (the LayerNorm output) has a user outside the pattern;
- each GELU form has its own pattern and replacement: an erf kernel never stands in for tanh;
- a LayerNorm over two trailing dims does not match a pattern over one;
- only dtypes the kernel computes exactly (float64 stays with Inductor: see ``extra_check``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: F401
from torch._dynamo.utils import counters  # noqa: F401
from torch._inductor import config as inductor_config  # noqa: F401
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files  # noqa: F401
from torch._inductor.pattern_matcher import Match, PatternMatcherPass, fwd_only, register_replacement  # noqa: F401

from lab03_triton_lowering.given.interface import AFFINE_FORMS, CountingHandle  # noqa: F401  (given: the affine forms, the handle)
from lab03_triton_lowering.given.round_trips import fwd_only_folding_round_trips  # noqa: F401

from .kernel import GELU_APPROXIMATIONS  # noqa: F401
from .op import OP_NAMESPACE, SUPPORTED_DTYPES, layernorm_gelu_replacement  # noqa: F401

#: This pass's key in ``torch._dynamo.utils.counters["inductor"]`` (see LayerNormGeluPass and LoweringHandle).
REPLACEMENTS_COUNTER = f"{OP_NAMESPACE}_layernorm_gelu_replacements"
#: Files whose contents decide what the pass does: part of its cache key (see LayerNormGeluPass.uuid).
_SOURCE_FILES = tuple(str(Path(__file__).with_name(name)) for name in ("kernel.py", "op.py", "lowering.py"))


def search_and_replacement(approximate: str, affine: str) -> tuple[Callable, Callable]:
    """The (search, replacement) pair for one GELU form and one affine form.

    Contract: both functions take the same arguments, ``x``, then the affine tensors the form has
    (``weight``, ``bias``), then ``eps`` last; the names matter (``scalar_workaround`` finds eps by
    name). The search function is plain eager code (``F.gelu(F.layer_norm(...))`` over the last
    dim); the replacement calls ``layernorm_gelu_replacement``.

    Raises:
        ValueError: for an affine form not in :data:`AFFINE_FORMS`.
    """
    raise NotImplementedError("TODO(step 5): write the search and replacement functions")


def kernel_supports(match: Match) -> bool:
    """``extra_check`` for every pattern: True only when the kernel computes the match as eager does.

    A float64 LayerNorm decomposes into the same nodes as a float32 one, so the pattern cannot tell
    them apart; the matched ``x`` node's ``meta["val"]`` (a fake tensor) can. Contract: True when
    ``x`` has a supported dtype on CPU or CUDA and ``weight``/``bias`` (when matched) have the same
    dtype and device; ``match.kwargs`` maps the search function's argument names to graph nodes.
    """
    raise NotImplementedError("TODO(step 5): accept only supported dtypes and devices")


def build_patterns() -> PatternMatcherPass:
    """Register every (GELU form, affine form, dtype) pattern into a new ``PatternMatcherPass``.

    Contract: every site of ``given.models.FusableSites`` matches, in every dtype of ``SUPPORTED_DTYPES``,
    whatever its eps; no site of ``given.models.NonFusableSites`` but the control does. Half precision is
    matched whether or not the LayerNorm output is rounded to half before GELU (PyTorch releases
    differ: see ``given/round_trips.py``).

    Rank: the matcher ignores the integers a pattern was traced with (dims, sizes), so a pattern
    traced on 2-D example inputs also matches (batch, seq, d) activations, any rank: one pattern per
    form and dtype is enough, and the replacement gets ``x`` of any rank (the kernel's launcher
    flattens it to rows).
    """
    # guidance: begin
    # One pattern per dtype in SUPPORTED_DTYPES (half precision adds convert nodes); example inputs of
    # that dtype, a distinct tensor per argument; fwd_only as the trace function; skip_duplicates=True;
    # extra_check=kernel_supports; scalar_workaround={"eps": ...}. Half precision needs each pattern
    # twice: traced with fwd_only and with fwd_only_folding_round_trips.
    # guidance: end
    raise NotImplementedError("TODO(step 5): register_replacement for every form and dtype")


class LayerNormGeluPass(CustomGraphPass):
    """The post-grad pass Inductor calls on every graph it compiles while the lowering is installed.

    Counting: a compile served from Inductor's FX graph cache runs no passes at all, so a count
    kept in the pass misses it. Inductor records how much each compile moved
    ``counters["inductor"]`` and replays that on every cache hit: add this compile's replacements
    (``PatternMatcherPass.apply`` returns how many matches it replaced) to
    ``counters["inductor"][REPLACEMENTS_COUNTER]``.

    Attributes:
        previous: the custom post-grad pass installed before, run first and restored on uninstall.
    """

    def __init__(self, patterns: PatternMatcherPass, previous: Callable | None) -> None:
        self.patterns = patterns
        self.previous = previous

    def __call__(self, graph: torch.fx.Graph) -> None:
        raise NotImplementedError("TODO(step 5): run the previous pass, then apply the patterns and count them")

    def uuid(self) -> bytes | None:
        """Cache key of the pass: Inductor reuses a cached graph only if this is unchanged.

        Contract: not None for a pass that can be cached; changes when the files defining the pass
        change (``get_hash_for_files(_SOURCE_FILES, extra=...)``) and when ``OP_NAMESPACE`` changes
        (the cached code calls your operator by its qualified name: the same files imported under
        another package name must not reuse it), and folds in the previous pass's key.
        """
        raise NotImplementedError("TODO(step 5): a stable key for Inductor's FX graph cache")


class LoweringHandle(CountingHandle):
    """What :func:`install_lowering` returns (given, in ``given/interface.py``): ``.replacements`` counts
    this pass's sites.

    Build it as ``LoweringHandle(graph_pass, counted_before=...)``; it reads :data:`REPLACEMENTS_COUNTER`.
    """

    counter = REPLACEMENTS_COUNTER


def install_lowering() -> LoweringHandle:
    """Make every later ``torch.compile`` (Inductor) use the fused kernel for LayerNorm -> GELU.

    Contract: sets ``torch._inductor.config.post_grad_custom_post_pass`` to a new
    :class:`LayerNormGeluPass` (remembering the pass that was there) and returns
    ``LoweringHandle(the_pass, counted_before=counters["inductor"][REPLACEMENTS_COUNTER])``.
    Idempotent: while installed (the config still holds your pass), calling it again returns the same
    handle and installs nothing; once something else has replaced or reset it, a call installs anew.
    Trace the patterns once per process, on the first call (it takes about a second).
    """
    raise NotImplementedError("TODO(step 5): install the pass and return a handle")


def uninstall_lowering() -> None:
    """Restore ``post_grad_custom_post_pass`` as it was before :func:`install_lowering` (no-op if not installed)."""
    raise NotImplementedError("TODO(step 5): restore Inductor's configuration")
