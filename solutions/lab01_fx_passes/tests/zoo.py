"""The torchvision zoo the lab's pipeline is checked on: which models, at which input, how built.

Every classification model ``torchvision.models.list_models(module=torchvision.models)`` returns,
in eval mode, with random weights (``weights=None``, 10 classes, BatchNorm statistics randomised so
that a wrong fold shows), on one small input (1x3x32x32, or the model's minimum), in every dialect
the lab claims. A cell that cannot run is listed in :data:`EXCLUDED` with its reason: never skipped
silently.

``python -m solutions.lab01_fx_passes.tests.zoo`` prints the table of models, inputs and exclusions
(the handout's zoo table).
"""

from __future__ import annotations

import torch
import torchvision
from torch import nn

from lab01_fx_passes.given.capture import DIALECTS
from lab01_fx_passes.given.models import randomize_batch_norm

#: Every classification model torchvision ships, in its own order.
MODELS: tuple[str, ...] = tuple(torchvision.models.list_models(module=torchvision.models))
#: Side of the square input: 32 (the smallest most models take), or what a model needs.
INPUT_SIZES = {"alexnet": 64, "inception_v3": 75, "maxvit_t": 224}
#: Vision transformers take their image size as an argument: the smallest that holds 2x2 patches
#: (``vit_b_32``: 64, as its patches are 32 pixels wide).
VIT_IMAGE_SIZES = {"vit_b_16": 32, "vit_b_32": 64, "vit_l_16": 32, "vit_l_32": 64, "vit_h_14": 28}
CLASSES = 10

#: Models above this many parameters are left out of every dialect (see :data:`EXCLUDED`).
MAX_PARAMETERS = 150e6
#: The largest models, their parameter counts (10 classes), and the family member that runs the same code.
TOO_LARGE = {
    "convnext_large": (196e6, "convnext_base"),
    "vit_l_16": (303e6, "vit_b_16"),
    "vit_l_32": (305e6, "vit_b_32"),
    "vit_h_14": (631e6, "vit_b_16"),
    "regnet_y_128gf": (644e6, "regnet_y_32gf"),
}


def _too_large(params: float, sibling: str) -> str:
    return (f"{params / 1e6:.0f}M parameters (over {MAX_PARAMETERS / 1e6:.0f}M): the float64 validation alone holds "
            f"{params * 12 / 1e9:.1f} GB (a float32 and a float64 copy) and takes minutes per dialect on two cores; "
            f"{sibling} runs the same code")  # fmt: skip


#: (model, dialect) -> why the cell does not run: never silently skipped, reported as a skip with
#: this reason and in the zoo's table. Every cell not listed here runs. (Every model that runs
#: captures in all five dialects at these input sizes; the five left out are left out for size.)
EXCLUDED: dict[tuple[str, str], str] = {
    (model, dialect): _too_large(params, sibling)
    for model, (params, sibling) in TOO_LARGE.items()
    for dialect in DIALECTS
}


def input_size(name: str) -> int:
    """The side of the model's square test input."""
    return VIT_IMAGE_SIZES.get(name, INPUT_SIZES.get(name, 32))


def build(name: str, seed: int = 0) -> nn.Module:
    """The model ``name``, eval mode, random weights, 10 classes, BatchNorm statistics randomised."""
    torch.manual_seed(seed)
    kwargs = {"num_classes": CLASSES}
    if name in VIT_IMAGE_SIZES:
        kwargs["image_size"] = VIT_IMAGE_SIZES[name]
    if name in ("googlenet", "inception_v3"):
        kwargs.update(aux_logits=False, init_weights=False)
    return randomize_batch_norm(torchvision.models.get_model(name, **kwargs), seed).eval()


def example_input(name: str, seed: int = 0) -> torch.Tensor:
    size = input_size(name)
    return torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(seed))


def cells() -> list[tuple[str, str]]:
    """Every (model, dialect) pair, model by model (consecutive cells share a built model)."""
    return [(model, dialect) for model in MODELS for dialect in DIALECTS]


def main() -> None:
    print(f"{len(MODELS)} models x {len(DIALECTS)} dialects; input 1x3xSxS")
    for model in MODELS:
        reasons = {dialect: EXCLUDED.get((model, dialect)) for dialect in DIALECTS}
        excluded = ", ".join(f"{d}: {r}" for d, r in reasons.items() if r)
        print(f"  {model:22s} S={input_size(model):3d}  {excluded or 'every dialect'}")


if __name__ == "__main__":
    main()
