"""The model zoo: the families of ``transformers`` people deploy, tiny and random, in one table.

The standard models (:mod:`lab02_npu_backend.given.models`) are the ones the graded tests name. The zoo is
the ecosystem instead: every decoder-only, encoder and encoder-decoder family below, built from its
configuration class with tiny sizes and random weights (nothing is downloaded), called the way its
users call it. The lab's ``test_zoo.py`` compiles each with the backend in both dialects and holds it to
eager's answer and to the coverage bar; ``python -m lab02_npu_backend.given.report --zoo`` prints the same
table for your code.

Every family gets two layers, hidden size 32, 4 heads (2 key/value heads where the family has
grouped-query attention) and a vocabulary of 128, and is called on ``[2, 12]`` token ids. Every
family reaches the bar in both dialects with the reference, whose backend folds what depends only on
shapes and constants (optional step 7: without it OPT, Falcon, T5 and BART stay under, their masks and
position ids computed on the host per call). A family that could not would say so in ``below_bar``:
the dialect, the floor the reference keeps, and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from lab02_npu_backend.given.models import SEED, ModelCase
from labkit.batch_norm import randomize_batch_norm

#: Vocabulary, batch and sequence length of every zoo model.
VOCAB, BATCH, SEQ = 128, 2, 12
#: The coverage bar by nodes that do work, in both dialects.
ZOO_BAR = 0.90

_DECODER = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64
)
_GQA = dict(_DECODER, num_key_value_heads=2)


@dataclass(frozen=True)
class Family:
    """One ``transformers`` family of the zoo.

    Attributes:
        name: the zoo's name for it.
        kind: ``decoder``, ``encoder`` or ``encoder-decoder``.
        config, model: the ``transformers`` configuration and model classes; for torchvision's classifiers
            (``kind="vision"``) ``config`` is ``"torchvision"`` and ``model`` the constructor's name.
        sizes: the tiny configuration (besides the vocabulary and token ids); a constructor's keyword arguments.
        output: the output field returned (``logits`` or ``last_hidden_state``).
        shift_labels: an encoder-decoder whose decoder input is the input shifted right inside the
            call (T5's ``_shift_right``, BART's ``shift_tokens_right``: a write in place).
        below_bar: dialect -> (the reference's floor, why it stays under :data:`ZOO_BAR`).
    """

    name: str
    kind: str
    config: str
    model: str
    sizes: dict[str, Any]
    output: str
    shift_labels: bool = False
    below_bar: dict[str, tuple[float, str]] = field(default_factory=dict)


FAMILIES: tuple[Family, ...] = (
    Family("llama", "decoder", "LlamaConfig", "LlamaForCausalLM", _GQA, "logits"),
    Family("mistral", "decoder", "MistralConfig", "MistralForCausalLM", _GQA, "logits"),
    Family("qwen2", "decoder", "Qwen2Config", "Qwen2ForCausalLM", _GQA, "logits"),
    Family("phi", "decoder", "PhiConfig", "PhiForCausalLM", _DECODER, "logits"),
    Family("phi3", "decoder", "Phi3Config", "Phi3ForCausalLM", _DECODER, "logits"),
    Family("gemma", "decoder", "GemmaConfig", "GemmaForCausalLM", dict(_GQA, head_dim=8), "logits"),
    Family(
        "gpt2",
        "decoder",
        "GPT2Config",
        "GPT2LMHeadModel",
        dict(n_embd=32, n_layer=2, n_head=4, n_positions=64),
        "logits",
    ),
    Family("gpt-neox", "decoder", "GPTNeoXConfig", "GPTNeoXForCausalLM", _DECODER, "logits"),
    Family(
        "opt",
        "decoder",
        "OPTConfig",
        "OPTForCausalLM",
        dict(
            hidden_size=32,
            ffn_dim=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            word_embed_proj_dim=32,
            max_position_embeddings=64,
        ),
        "logits",
    ),
    Family(
        "falcon",
        "decoder",
        "FalconConfig",
        "FalconForCausalLM",
        dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64),
        "logits",
    ),
    Family("bert", "encoder", "BertConfig", "BertModel", _DECODER, "last_hidden_state"),
    Family(
        "distilbert",
        "encoder",
        "DistilBertConfig",
        "DistilBertModel",
        dict(dim=32, hidden_dim=64, n_layers=2, n_heads=4, max_position_embeddings=64),
        "last_hidden_state",
    ),
    Family(
        "t5-encoder",
        "encoder",
        "T5Config",
        "T5EncoderModel",
        dict(d_model=32, d_ff=64, num_layers=2, num_heads=4, d_kv=8),
        "last_hidden_state",
    ),
    Family(
        "bart",
        "encoder-decoder",
        "BartConfig",
        "BartModel",
        dict(
            d_model=32,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            max_position_embeddings=64,
        ),
        "last_hidden_state",
    ),
    Family(
        "t5",
        "encoder-decoder",
        "T5Config",
        "T5ForConditionalGeneration",
        dict(d_model=32, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4, d_kv=8, decoder_start_token_id=0),
        "logits",
        shift_labels=True,
    ),
)
#: Max pooling has no exact decomposition into the ISA (no ``max``; ``a + relu(b - a)`` rounds twice).
_MAX_POOLING = (
    "max pooling (and an adaptive average pool to a grid other than 1x1) runs on the host: the ISA has no "
    "max, and a + relu(b - a) rounds twice, so no exact decomposition exists"
)
#: torchvision's classifiers (``config="torchvision"``: ``model`` is the constructor's name), called on
#: ``[2, 3, 64, 64]`` images with random weights and BatchNorm statistics that look trained.
VISION_FAMILIES: tuple[Family, ...] = (
    Family("resnet18", "vision", "torchvision", "resnet18", {}, ""),
    Family("mobilenet-v3-small", "vision", "torchvision", "mobilenet_v3_small", {}, ""),
    Family("efficientnet-b0", "vision", "torchvision", "efficientnet_b0", {}, ""),
    Family("squeezenet", "vision", "torchvision", "squeezenet1_0", {}, ""),
    Family("shufflenet-v2", "vision", "torchvision", "shufflenet_v2_x0_5", {}, ""),
    Family("regnet-y", "vision", "torchvision", "regnet_y_400mf", {}, ""),
    Family("mnasnet", "vision", "torchvision", "mnasnet0_5", {}, ""),
    Family("googlenet", "vision", "torchvision", "googlenet", {"aux_logits": False, "init_weights": True}, ""),
    Family("convnext-tiny", "vision", "torchvision", "convnext_tiny", {}, ""),
    Family(
        "vgg11", "vision", "torchvision", "vgg11", {}, "",
        below_bar={dialect: (floor, _MAX_POOLING) for dialect, floor in (("torch", 0.78), ("aten", 0.80))},
    ),
    Family(
        "alexnet", "vision", "torchvision", "alexnet", {}, "",
        below_bar={dialect: (floor, _MAX_POOLING) for dialect, floor in (("torch", 0.79), ("aten", 0.82))},
    ),
)  # fmt: skip
#: Image size of the vision families.
IMAGE = 64

#: The zoo's families by name.
BY_NAME: dict[str, Family] = {family.name: family for family in (*FAMILIES, *VISION_FAMILIES)}


class ZooModel(nn.Module):
    """A ``transformers`` model called as its users call it, returning one output tensor."""

    def __init__(self, model: nn.Module, family: Family) -> None:
        super().__init__()
        self.model, self.output, self.shift_labels = model, family.output, family.shift_labels

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.shift_labels:  # the decoder reads the input shifted right, as in training with labels
            decoder_input_ids = self.model._shift_right(input_ids)
            return getattr(self.model(input_ids=input_ids, decoder_input_ids=decoder_input_ids), self.output)
        return getattr(self.model(input_ids=input_ids), self.output)


def build_family(name: str) -> ModelCase:
    """A zoo family's tiny model (seeded, eval mode, random weights) and its token ids.

    Raises:
        KeyError: for an unknown name (the message lists the zoo).
    """
    import transformers

    if name not in BY_NAME:
        raise KeyError(f"unknown zoo family {name!r}; the zoo: {', '.join(BY_NAME)}")
    family = BY_NAME[name]
    if family.config == "torchvision":
        return _build_vision(family)
    config = getattr(transformers, family.config)(
        vocab_size=VOCAB, pad_token_id=0, bos_token_id=1, eos_token_id=2, attn_implementation="sdpa", **family.sizes,
    )  # fmt: skip
    torch.manual_seed(SEED)
    model = getattr(transformers, family.model)(config).eval()
    ids = torch.randint(3, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(SEED))
    return ModelCase(name, ZooModel(model, family), (ids,))


def _build_vision(family: Family) -> ModelCase:
    import torchvision

    torch.manual_seed(SEED)
    model = getattr(torchvision.models, family.model)(weights=None, num_classes=10, **family.sizes)
    randomize_batch_norm(model, SEED)
    images = torch.randn(BATCH, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(SEED))
    return ModelCase(family.name, model.eval(), (images,))
