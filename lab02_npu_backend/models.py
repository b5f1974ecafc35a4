"""The standard models every test, report and benchmark of this lab uses.

Each model is built with a fixed seed and random weights (no downloads), in ``eval()`` mode, with
example inputs small enough that compiling it takes seconds on a laptop CPU:

=====================  ========================================================  ====================
name                   what it exercises                                         example input
=====================  ========================================================  ====================
``mlp``                ``Linear -> GELU -> Linear -> ReLU -> Linear``            ``[4, 64]``
``resnet18``           torchvision ResNet-18: conv, batch norm, pooling, adds    ``[2, 3, 32, 32]``
``transformer-encoder``  ``nn.TransformerEncoderLayer``: fused multi-head attention  ``[16, 2, 32]`` (seq, batch, dim)
``llama-tiny``         :mod:`lab02_npu_backend.llama_tiny`: RMSNorm, rotary, GQA     ``[2, 32]`` token ids
=====================  ========================================================  ====================
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
    return nn.Sequential(
        nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10)
    )


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


#: name -> (model factory, example-input factory taking (batch, seq))
_BUILDERS: dict[str, tuple[Callable[[], nn.Module], Callable[[int, int], tuple[torch.Tensor, ...]]]] = {
    "mlp": (_mlp, lambda batch, seq: (torch.randn(batch, 64),)),
    "resnet18": (_resnet18, lambda batch, seq: (torch.randn(batch, 3, 32, 32),)),
    "transformer-encoder": (_transformer_encoder, lambda batch, seq: (torch.randn(seq, batch, 32),)),
    "llama-tiny": (_llama_tiny, _llama_tokens),
}
#: The models the tests hold to the coverage bar, in the order reports list them.
STANDARD_MODELS: tuple[str, ...] = tuple(_BUILDERS)
#: Default (batch, seq) of each model's example inputs (seq is ignored by image/vector models).
DEFAULT_SHAPES: dict[str, tuple[int, int]] = {
    "mlp": (4, 1),
    "resnet18": (2, 1),
    "transformer-encoder": (2, 16),
    "llama-tiny": (2, 32),
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
