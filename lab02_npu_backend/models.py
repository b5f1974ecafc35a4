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
``llama-tiny``           :mod:`lab02_npu_backend.llama_tiny`: RMSNorm, rotary, GQA     ``[2, 32]`` token ids
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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from lab02_npu_backend.llama_tiny import LlamaConfig, LlamaTiny

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
