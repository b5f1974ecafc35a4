"""ResNet-50 and the images the benchmark evaluates it on (harness: do not edit).

Two sources, same interface (:func:`evaluation_batches` yields ``(images, labels_or_None)``):

- **Real**: ``--data DIR --weights FILE``: an ImageNet validation folder in ``ImageFolder``
  layout (one sub-folder per class, named by WordNet id: sorted, they give the standard class
  indices) and a ResNet-50 ``state_dict`` file (e.g. torchvision's ``IMAGENET1K_V2`` weights).
  The first ``count`` images in sorted order are used, with the standard preprocessing.
- **Synthetic** (default, no download): deterministic images (smooth random colour fields at
  two scales, normalised like ImageNet) and seeded random weights. A random network is a poor
  test bed as it comes: its BatchNorm layers have fresh statistics (folding them is close to the
  identity) and it predicts the same class for every image (top-1 agreement is then trivially
  100%). So the BN statistics and affine parameters are randomised, and the classifier's bias is
  centred on a separate calibration batch: predictions then spread over hundreds of classes with
  small top-1 margins, which makes agreement a real test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from lab01_fx_passes.given.models import randomize_batch_norm

IMAGE_SIZE = 224
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: Seeds: weights, evaluation images and calibration images never share random numbers.
WEIGHT_SEED, IMAGE_SEED, CALIBRATION_SEED = 0, 1, 2


def synthetic_images(count: int, seed: int, first: int = 0) -> torch.Tensor:
    """Images ``first .. first+count-1`` of the deterministic synthetic set ``seed``: ``[count, 3, 224, 224]``.

    Each image is generated from its own index, so any batch size gives the same images.
    """
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    images = []
    for index in range(first, first + count):
        generator = torch.Generator().manual_seed(seed * 1_000_003 + index)
        coarse = torch.rand(1, 3, 7, 7, generator=generator)
        fine = torch.rand(1, 3, 28, 28, generator=generator)
        image = 0.6 * F.interpolate(coarse, size=IMAGE_SIZE, mode="bilinear") + 0.4 * F.interpolate(
            fine, size=IMAGE_SIZE, mode="bilinear"
        )
        images.append((image - mean) / std)
    return torch.cat(images)


@torch.no_grad()
def _centre_classifier(model: torchvision.models.ResNet, calibration: torch.Tensor) -> None:
    """Set the classifier bias so the mean logit over ``calibration`` is zero for every class."""
    features: list[torch.Tensor] = []
    hook = model.fc.register_forward_hook(lambda module, inputs, output: features.append(inputs[0]))
    model(calibration)
    hook.remove()
    model.fc.bias.copy_(-(features[0] @ model.fc.weight.T).mean(0))


def build_resnet50(weights: Path | None = None, calibration_images: int = 16) -> nn.Module:
    """ResNet-50 in eval mode: from a ``state_dict`` file, or seeded random weights prepared as described above."""
    torch.manual_seed(WEIGHT_SEED)
    model = torchvision.models.resnet50()
    if weights is not None:
        state = torch.load(weights, map_location="cpu", weights_only=True)
        model.load_state_dict(state.get("state_dict", state) if isinstance(state, dict) else state)
        return model.eval()
    randomize_batch_norm(model, WEIGHT_SEED).eval()
    _centre_classifier(model, synthetic_images(calibration_images, CALIBRATION_SEED))
    return model


def _imagenet_batches(data_dir: Path, count: int, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    from torchvision import transforms

    preprocess = transforms.Compose(
        [
            transforms.Resize(256),
            transforms.CenterCrop(IMAGE_SIZE),
            transforms.ToTensor(),
            transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )
    dataset = torchvision.datasets.ImageFolder(str(data_dir), transform=preprocess)
    if len(dataset) < count:
        raise ValueError(f"{data_dir} holds {len(dataset)} images, fewer than the {count} requested")
    subset = torch.utils.data.Subset(dataset, range(count))
    yield from torch.utils.data.DataLoader(subset, batch_size=batch_size, shuffle=False)


def evaluation_batches(
    count: int, batch_size: int, data_dir: Path | None = None
) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
    """The evaluation set in batches: ``(images [B, 3, 224, 224], labels [B] or None for synthetic images)``."""
    if data_dir is not None:
        yield from _imagenet_batches(data_dir, count, batch_size)
        return
    for first in range(0, count, batch_size):
        yield synthetic_images(min(batch_size, count - first), IMAGE_SEED, first), None
