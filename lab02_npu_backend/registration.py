"""The ``torch_dynamo_backends`` entry point: ``torch.compile(model, backend="npu_simulator")``
works after ``pip install`` without importing the lab first.

``pyproject.toml`` declares::

    [project.entry-points.torch_dynamo_backends]
    npu_simulator = "lab02_npu_backend.registration:npu_simulator"

PyTorch loads this function the first time the name is used. It dispatches to the implementation
selected by ``LABKIT_IMPL`` (the student's package by default).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import fx

from labkit.impl import load_lab

PACKAGE = "lab02_npu_backend"


def npu_simulator(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Compile ``gm`` with the selected implementation's ``npu_backend``."""
    return load_lab(PACKAGE).npu_backend(gm, example_inputs)
