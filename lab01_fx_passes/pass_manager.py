"""Run passes in order, prove after each one that the outputs did not change, and report.

Every graph transformation must be shown to preserve the program's outputs. The pass manager does
that between passes, so a broken pass is caught *and named* the moment it diverges, not three
passes later in a benchmark:

1. before any pass, run the graph on the example inputs: these are the reference outputs;
2. after each pass, check the graph (``graph.lint()``), run it again and measure the distance
   to the reference with :func:`labkit.numerics.output_error`; outside the tolerance
   (``|actual - expected| <= atol + rtol * |expected|``, element by element) it raises
   :class:`PassValidationError` naming the pass and the error;
3. a pass that changes the outputs *on purpose* (``relu -> hardswish``) declares it with a
   ``changes_semantics = True`` attribute. It is not checked against the tolerance; its
   deviation is reported, and its outputs become the reference for the passes after it.

PyTorch has a pass manager too (``torch.fx.passes.infra.pass_manager.PassManager``), with the same
``PassResult`` convention; its checks receive only the module, not inputs, so numerical checks
need a manager like this one, which owns the example inputs and the reference outputs.
"""

from __future__ import annotations

import time  # noqa: F401
from collections.abc import Sequence
from typing import Any

import torch  # noqa: F401
from torch import fx
from torch.fx.passes.infra.pass_base import PassResult

from lab01_fx_passes.pass_report import Pass, PassReport, PassValidationError, pass_name  # noqa: F401
from labkit.numerics import OutputError, output_error, outputs_close  # noqa: F401

class PassManager:
    """Apply passes in order with numerical validation after each one.

    Args:
        passes: callables ``GraphModule -> PassResult``. A pass with a true ``changes_semantics``
            attribute is allowed to change the outputs (reported, not checked).
        example_inputs: inputs to run the graph on (for Dynamo graphs, including the parameters);
            None skips validation (errors are then reported as None).
        rtol, atol: the tolerance, ``|actual - expected| <= atol + rtol * |expected|``. The default
            1e-5/1e-5 fits a float32 model whose outputs are of order one (see the handout).

    After a call, :attr:`report` holds one :class:`PassReport` per pass.

    Raises:
        TypeError: on construction, if a pass is not callable; during a call, if a pass does not
            return a ``PassResult``.
        ValueError: if a tolerance is negative.
        PassValidationError: during a call, naming the first pass whose outputs diverge.
    """

    def __init__(
        self,
        passes: Sequence[Pass],
        *,
        example_inputs: Sequence[Any] | None = None,
        rtol: float = 1e-5,
        atol: float = 1e-5,
    ) -> None:
        # TODO(step 7): check the arguments (TypeError for a pass that is not callable, ValueError
        #  for a negative tolerance), then keep: self.passes (a list), self.example_inputs (a
        #  tuple or None), self.rtol, self.atol, and self.report = [].
        raise NotImplementedError("PassManager: check and store the passes and the tolerance")

    def __call__(self, graph_module: fx.GraphModule) -> PassResult:
        """Run every pass on ``graph_module`` (passes may modify it in place) and return the result.

        TODO(step 7), following the module docstring:
          - with example inputs, run the graph once first (under torch.no_grad()): the reference;
          - for each pass: count nodes, time it (time.perf_counter), check it returned a
            PassResult (TypeError naming the pass otherwise), continue with result.graph_module;
          - validate: graph.lint(), run, output_error(outputs, reference); a failure to run, or
            outputs_close(..., rtol=, atol=) False for a pass that does not declare
            changes_semantics, raises PassValidationError(pass_name, message, error) whose
            message names the pass and gives the error as f"{error.max_abs:.3e}";
          - a declared semantic change: report its deviation, then its outputs become the reference;
          - append a PassReport per pass to self.report; return PassResult(final_gm, any_modified).
        """
        raise NotImplementedError("PassManager.__call__: run, validate and report every pass")
