"""The ``torch_dynamo_backends`` entry point: ``torch.compile(model, backend="npu_simulator")``
works after ``pip install`` without importing the lab first.

``pyproject.toml`` declares::

    [project.entry-points.torch_dynamo_backends]
    npu_simulator = "lab02_npu_backend.given.registration:npu_simulator"

PyTorch loads this function the first time the name is used. It dispatches to the implementation
selected by ``LABKIT_IMPL`` (the student's package by default).

``torch.compile(model, backend="npu_simulator", options={"profile": True})`` passes the options here
(PyTorch hands a backend its ``options`` as a keyword argument): profiling mode, the optional step 6
(:mod:`lab02_npu_backend.given.profiling_tools`). Unknown options are refused by name.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

from torch import fx

from labkit.impl import load_lab

PACKAGE = "lab02_npu_backend"


def npu_simulator(
    gm: fx.GraphModule, example_inputs: list[Any], options: Mapping[str, Any] | None = None
) -> Callable[..., Any]:
    """Compile ``gm`` with the selected implementation's ``npu_backend``; with ``options={"profile": True}``,
    every NPU partition then runs profiled (:func:`~lab02_npu_backend.given.profiling_tools.profile_partitions`)."""
    from lab02_npu_backend.given.profiling_tools import backend_options, profile_partitions

    checked = backend_options(options)
    lab = load_lab(PACKAGE)
    compiled = lab.npu_backend(gm, example_inputs)
    if checked.get("profile") and not profile_partitions(compiled, lab.ProfiledProgram):
        warnings.warn(
            "npu_simulator: profile=True found no NPU partition to profile in this graph: nothing in it runs on "
            "the NPU, or it was compiled for training (through AOTAutograd, which profiling mode does not reach: "
            "profile under torch.no_grad())",
            stacklevel=2,
        )
    return compiled
