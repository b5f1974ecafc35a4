"""The standard models every test, report and benchmark of this lab uses.

Each model is built with a fixed seed and random weights (no downloads), in ``eval()`` mode, with
example inputs small enough that compiling it takes seconds on a laptop CPU. The first four are
written for the course; the last three are *real implementations* written by others (torchvision's
and Hugging Face ``transformers``' own model code, tiny configurations), so the backend is held to
code nobody here wrote:

=======================  ============================================================  ==================
name                     what it exercises                                             example input
=======================  ============================================================  ==================
``mlp``                  ``Linear -> GELU -> Linear -> ReLU -> Linear``                ``[4, 64]``
``resnet18``             torchvision ResNet-18: conv, batch norm, pooling, adds        ``[2, 3, 32, 32]``
``transformer-encoder``  ``nn.TransformerEncoderLayer``: fused multi-head attention    ``[16, 2, 32]`` (seq, batch, dim)
``llama-tiny``           :mod:`lab02_npu_backend.given.llama_tiny`: RMSNorm, rotary, GQA     ``[2, 32]`` token ids
``mobilenet-v2``         torchvision MobileNetV2: depthwise convs, ReLU6 (hardtanh)    ``[2, 3, 32, 32]``
``hf-llama``             ``transformers.LlamaForCausalLM``: hidden 64, 2 layers,       ``[2, 32]`` token ids
                         4 heads, 2 KV heads (GQA), rotary tables, a KV cache
``hf-gpt2``              ``transformers.GPT2LMHeadModel``: n_embd 64, 2 layers,        ``[2, 32]`` token ids
                         ``Conv1D`` (addmm), split q/k/v, GELU written with tanh
=======================  ============================================================  ==================

The Hugging Face models are called the way their users call them, ``model(input_ids).logits``, with
the library's defaults (SDPA attention, a ``DynamicCache`` even for a single forward pass).
Dropout is 0 in the models that have it, so that a training-mode call is deterministic and can be
compared with eager; in eval mode dropout is the identity whatever its probability.

After the standard models come the small ones of ``test_lab.py``'s cases, by handout step: each
isolates one thing a backend must get right (writes in place, a decomposition, a dtype the NPU
cannot hold, a graph break), so a failing case names it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from lab02_npu_backend.given.llama_tiny import LlamaConfig, LlamaTiny
from labkit.batch_norm import randomize_batch_norm

SEED = 0


@dataclass(frozen=True)
class ModelCase:
    """A model in eval mode and example inputs for it."""

    name: str
    model: nn.Module
    example_inputs: tuple[torch.Tensor, ...]


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))


def _resnet18() -> nn.Module:
    import torchvision

    return torchvision.models.resnet18(weights=None, num_classes=10)


def _transformer_encoder() -> nn.Module:
    # dropout=0.0 so that a training-mode call is deterministic and can be compared with eager.
    return nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0)


def _llama_tiny() -> nn.Module:
    return LlamaTiny(LlamaConfig())


def _llama_tokens(batch: int, seq: int) -> tuple[torch.Tensor, ...]:
    return (torch.randint(0, LlamaConfig().vocab_size, (batch, seq)),)


def _mobilenet_v2() -> nn.Module:
    import torchvision

    return torchvision.models.mobilenet_v2(weights=None, num_classes=10, dropout=0.0)


#: Vocabulary of the Hugging Face models (tiny, like the rest of their configuration).
HF_VOCAB = 256


class CausalLMLogits(nn.Module):
    """A Hugging Face causal LM called as its users call it, ``model(input_ids)``, returning the logits."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids).logits


def _hf_llama() -> nn.Module:
    from transformers import LlamaConfig as HfLlamaConfig
    from transformers import LlamaForCausalLM

    config = HfLlamaConfig(
        vocab_size=HF_VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        attn_implementation="sdpa",
    )
    return CausalLMLogits(LlamaForCausalLM(config))


def _hf_gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=HF_VOCAB,
        n_embd=64,
        n_layer=2,
        n_head=4,
        n_positions=128,
        bos_token_id=HF_VOCAB - 1,
        eos_token_id=HF_VOCAB - 1,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        attn_implementation="sdpa",
    )
    return CausalLMLogits(GPT2LMHeadModel(config))


def _hf_tokens(batch: int, seq: int) -> tuple[torch.Tensor, ...]:
    return (torch.randint(0, HF_VOCAB, (batch, seq)),)


#: name -> (model factory, example-input factory taking (batch, seq))
_BUILDERS: dict[str, tuple[Callable[[], nn.Module], Callable[[int, int], tuple[torch.Tensor, ...]]]] = {
    "mlp": (_mlp, lambda batch, seq: (torch.randn(batch, 64),)),
    "resnet18": (_resnet18, lambda batch, seq: (torch.randn(batch, 3, 32, 32),)),
    "transformer-encoder": (_transformer_encoder, lambda batch, seq: (torch.randn(seq, batch, 32),)),
    "llama-tiny": (_llama_tiny, _llama_tokens),
    "mobilenet-v2": (_mobilenet_v2, lambda batch, seq: (torch.randn(batch, 3, 32, 32),)),
    "hf-llama": (_hf_llama, _hf_tokens),
    "hf-gpt2": (_hf_gpt2, _hf_tokens),
}
#: The models the tests hold to the coverage bar, in the order reports list them.
STANDARD_MODELS: tuple[str, ...] = tuple(_BUILDERS)
#: The standard models whose code was written outside this course (torchvision, transformers).
REAL_MODELS: tuple[str, ...] = ("mobilenet-v2", "hf-llama", "hf-gpt2")
#: Default (batch, seq) of each model's example inputs (seq is ignored by image/vector models).
DEFAULT_SHAPES: dict[str, tuple[int, int]] = {
    "mlp": (4, 1),
    "resnet18": (2, 1),
    "transformer-encoder": (2, 16),
    "llama-tiny": (2, 32),
    "mobilenet-v2": (2, 1),
    "hf-llama": (2, 32),
    "hf-gpt2": (2, 32),
}


def build_model(name: str, *, batch: int | None = None, seq: int | None = None) -> ModelCase:
    """Build a standard model (seeded, eval mode) and its example inputs.

    Args:
        name: one of :data:`STANDARD_MODELS`.
        batch, seq: override the default example-input shape.

    Raises:
        KeyError: for an unknown name (the message lists the known ones).
    """
    if name not in _BUILDERS:
        raise KeyError(f"unknown model {name!r}; standard models: {', '.join(STANDARD_MODELS)}")
    make_model, make_inputs = _BUILDERS[name]
    default_batch, default_seq = DEFAULT_SHAPES[name]
    torch.manual_seed(SEED)
    model = make_model().eval()
    inputs = make_inputs(batch or default_batch, seq or default_seq)
    return ModelCase(name, model, inputs)


# ----------------------------------------------------- writes in place (step 3; compiled in step 5)
class ShiftRight(nn.Module):
    """An encoder-decoder's decoder input, as transformers' BART builds it (``shift_tokens_right``): the ids
    shifted right by writes in place, then embedded and projected. ``setitem`` returns nothing, so no edge of
    the graph tells the partitioner that the embedding must run after the writes."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.project = nn.Embedding(32, 8), nn.Linear(8, 8)

    def forward(self, input_ids):
        shifted = input_ids.new_zeros(input_ids.shape)
        shifted[:, 1:] = input_ids[:, :-1].clone()
        shifted[:, 0] = 2  # the decoder's start token
        shifted.masked_fill_(shifted == -100, 1)  # labels' -100 become padding
        return self.project(self.embed(shifted))


def clone_then_write(h):
    """A slice of x, computed before the write, written back into x; then x is read again."""
    x = h.clone()
    y = x[:, :-1] * 2
    x[:, 1:] = y
    return x * 3 + 1


def add_in_place_read_around(h):
    """An intermediate read before its in-place add and after it."""
    t = h * 2
    before = t + 1
    t.add_(1)
    return before * t


def read_around_a_fallback_write(h):
    """``u`` reads ``t`` before a write the NPU cannot run (``masked_fill_``: it falls back to the CPU, a
    private write): the partition must be cut there, or ``u`` runs after the write and sees it."""
    t = h @ h.T
    u = t * 2
    y = t.masked_fill_(t > 0, 0.0)
    return u + y


# -------------------------------------------------------------------------- lowering cases (step 4)
class RMSNormChain(nn.Module):
    """RMSNorm written out, as Llama-style code spells it: ``weight * (x * rsqrt(mean(x**2) + eps))``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def scaled_by_another_rms(x, y, weight):
    """Not an RMSNorm, though it reads like one: ``y`` is scaled by the reciprocal RMS of another tensor, ``x``.
    A matcher that checks the chain's shape but not that the rsqrt multiplies the same ``x`` fuses it."""
    return weight * (y * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def rms_over_another_dim(x):
    """``x * rsqrt(mean(x**2, dim=1) + eps)``: the RMSNorm chain's shape, but over dim 1, not the last dim: no
    rmsnorm instruction (it normalizes the trailing dims)."""
    return x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-6)


def causal_attention(q, k, v):
    """Attention with ``is_causal``: the softmax's causal flag, no mask tensor."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def grouped_attention_with_boolean_mask(q, k, v, mask):
    """Grouped-query attention with a per-batch boolean mask, as transformers' Falcon hands it to SDPA."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def attention_with_float_mask(q, k, v, bias):
    """An additive float mask of shape [L, S], like T5's relative-position bias."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def boolean_mask_inputs():
    """Inputs of :func:`grouped_attention_with_boolean_mask`: 4 query heads, 2 key/value heads, a mask per batch."""
    generator = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(2, 4, 6, 8), torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8)
    mask = torch.rand(2, 1, 6, 6, generator=generator) > 0.5
    mask |= torch.eye(6, dtype=torch.bool)  # every query keeps at least one key
    return q, k, v, mask


def neg_sub_div(x, y):
    """Negation, subtraction and division by a constant: none in the ISA, each exact as add and mul."""
    return (-x - y) / 4


class Gpt2Mlp(nn.Module):
    """GPT-2's first MLP layer as transformers writes it: ``Conv1D`` (an addmm) and GELU spelled out with tanh."""

    def __init__(self) -> None:
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.randn(8, 16)), nn.Parameter(torch.randn(16))

    def forward(self, x):
        h = torch.addmm(self.bias, x.view(-1, 8), self.weight).view(2, 5, 16)
        return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))


def split_heads(x):
    """q, k and v split from one projection, as GPT-2 does: a slice per piece."""
    query, key, value = x.split(4, dim=-1)
    return query * key + value


def clamps(x):
    """ReLU6, hardtanh and clamp (the activation unit's clamp), and a sigmoid."""
    return torch.sigmoid(F.relu6(x)) + F.hardtanh(x) + x.clamp(min=0.5)


def identities(x):
    """Ops that do no work: eval dropout, ``.float()``/``.to()`` that keep the dtype, ``contiguous``,
    a view to the same shape."""
    return F.dropout(x.float().to(torch.float32).contiguous().view(x.shape), 0.5, training=False) * 3


# -------------------------------------------- dtypes the NPU cannot run, and a graph break (step 5)
def int_and_float(a, b, x):
    """An int64 matmul (no int64 matmul on the NPU) beside float32 work."""
    return (a @ b) + 1, torch.relu(x @ x)


def complex_and_float(z, x):
    """A complex64 matmul (the NPU holds no complex dtype) beside float32 work."""
    return z @ z, torch.relu(x) * 2


def float64_and_float(d, x):
    """A float64 GELU (the NPU holds no float64) beside float32 work."""
    return torch.nn.functional.gelu(d), x - 1


def conversion_and_float(x):
    """A float32 to float16 conversion (the ISA has no conversion op) beside float32 work."""
    return (x * 2).to(torch.float16) + 1, torch.relu(x.float())


class ConvBatchNorms(nn.Module):
    """Two eval BatchNorms that look trained (:func:`labkit.batch_norm.randomize_batch_norm`): one
    affine, one without weight and bias. Fresh statistics and affine parameters (0, 1, 1, 0) make a
    BatchNorm almost the identity, so a lowering that drops its scale, or multiplies by a weight that is
    not there, would still match eager on the standard models."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.norm1 = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.conv2, self.norm2 = nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4, affine=False)
        randomize_batch_norm(self, seed=2)
        self.eval()

    def forward(self, x):
        return self.norm2(self.conv2(torch.relu(self.norm1(self.conv1(x)))))


class WithGraphBreak(nn.Module):
    """A graph break in the middle, an op outside the ISA (max pooling), and a dropout (eval: no work)."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second, self.dropout = nn.Linear(16, 16), nn.Linear(16, 8), nn.Dropout(0.1)

    def forward(self, x):
        x = torch.nn.functional.max_pool1d(torch.relu(self.first(x)), 1)
        torch._dynamo.graph_break()
        return self.dropout(self.second(x)).softmax(-1)


# ------------------------------------------------------------ folding at compile time (optional step 7)
class BuildsItsMask(nn.Module):
    """Per-call bookkeeping that depends only on the input's shape, as Falcon, OPT and T5 build it: a
    causal mask from two index vectors (``arange``, a comparison, a cast), position ids from
    ``ones(...).cumsum(dim=1) - 1`` (a method called with a keyword: Dynamo keeps ``call_method``), and a
    literal table (``torch.tensor([...])``), and a reduction that returns a tuple (``max(1)``, unpacked by
    ``.values``). The position ids are read twice: by the embedding lookup, which stays, and by the
    constant ``scale``. All of it is constant once the shapes are known; the
    projection, the embedding lookup and the products are not."""

    def __init__(self, features: int = 8, positions: int = 16) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.project, self.position = nn.Linear(features, features), nn.Embedding(positions, features)

    def forward(self, x):
        batch, seq, _ = x.shape
        mask = (torch.arange(seq).unsqueeze(0) <= torch.arange(seq).unsqueeze(1)).float()  # [seq, seq]
        positions = torch.ones(batch, seq, dtype=torch.long).cumsum(dim=1) - 1  # a method called with a keyword
        top = torch.arange(float(seq)).reshape(1, seq).max(1).values  # a tuple (values, indices), then unpacked
        scale = torch.tensor([0.5, 1.5]).sum() / 2 + (positions.float().mean() + top.sum()) * 0  # positions: read twice
        return (mask @ (self.project(x) + self.position(positions))) * scale


class LooksConstantButIsNot(nn.Module):
    """Values built from shapes and literals alone, most of which must be computed on every call: random
    draws (``torch.rand``, and ``bernoulli`` called as a method), a buffer the input is then added into
    through a view (as BART's shift right writes its ids), and values the graph returns, directly or
    through a view (the caller may write to what it receives). Only ``ramp`` is constant."""

    def forward(self, x):  # x: [4]
        noise = torch.rand(4) + torch.full((4,), 0.5).bernoulli()  # bernoulli: a method that draws
        shifted = torch.zeros(4)
        shifted[1:].add_(x[:3])  # a write through a view: folded, the buffer would accumulate
        ramp = torch.arange(4.0) + 1
        returned = torch.full((4,), 2.0) * 3
        shown = torch.arange(4.0) * 2
        return x * ramp + shifted + noise * 0.01, returned, shown[:2]  # shown reaches the caller through a view
