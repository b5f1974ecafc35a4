"""Run passes in order, prove after each one that the outputs did not change, and report.

Every graph transformation must be shown to preserve the program's outputs. The pass manager does
that between passes, so a broken pass is caught *and named* the moment it diverges, not three
passes later in a benchmark:

1. before any pass, measure the reference with :meth:`labkit.numerics.ReferenceOutputs.measure`:
   the graph's outputs on the example inputs, and the same outputs computed in float64, which say
   how far float32 itself already is from the exact answer on this model;
2. after each pass, check the graph (``graph.lint()``), run it again and compare with
   :meth:`ReferenceOutputs.compare`: each output may move by at most ``tolerance_factor`` times
   float32's own error on it; beyond that it raises :class:`PassValidationError` naming the pass,
   its error and the budget;
3. a pass that changes the outputs *on purpose* (``relu -> hardswish``) declares it with a
   ``changes_semantics = True`` attribute. It is not checked against the budget; its deviation is
   reported, and its outputs (measured again, float64 included) become the reference for the
   passes after it.

Why a measured budget and not a fixed ``atol``: see :mod:`labkit.numerics` and the handout. A
ResNet-50 whose logits are of order 1e4 is ~4e-3 away from exact in plain float32; a correct fold
moves it by about as much, which a fixed ``atol = 1e-3`` would call a bug.

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

from lab01_fx_passes.given.pass_report import Pass, PassReport, PassValidationError, pass_name, reason_of  # noqa: F401
from labkit.numerics import TOLERANCE_FACTOR, OutputError, ReferenceOutputs, fresh_copies, output_error  # noqa: F401


class PassManager:
    """Apply passes in order with numerical validation after each one.

    Args:
        passes: callables ``GraphModule -> PassResult``. A pass with a true ``changes_semantics``
            attribute is allowed to change the outputs (reported, not checked).
        example_inputs: inputs to run the graph on (for Dynamo graphs, including the parameters);
            None skips validation (errors are then reported as None).
        tolerance_factor: how many times float32's own error (measured against a float64 run of
            the graph) each output may move; the default 4 is explained in :mod:`labkit.numerics`.

    After a call, :attr:`report` holds one :class:`PassReport` per pass; a pass that changed nothing
    has its reason there (``reason_of(result)``), so a pipeline that silently does nothing on some
    dialect says why.

    Raises:
        TypeError: on construction, if a pass is not callable; during a call, if a pass does not
            return a ``PassResult``.
        ValueError: if ``tolerance_factor`` is not positive.
        PassValidationError: during a call, naming the first pass whose outputs diverge.
    """

    def __init__(
        self,
        passes: Sequence[Pass],
        *,
        example_inputs: Sequence[Any] | None = None,
        tolerance_factor: float = TOLERANCE_FACTOR,
    ) -> None:
        # TODO(step 7): check the arguments (TypeError for a pass that is not callable, ValueError
        #  naming tolerance_factor when it is not positive), then keep: self.passes (a list),
        #  self.example_inputs (a tuple or None), self.tolerance_factor, and self.report = [].
        raise NotImplementedError("PassManager: check and store the passes and the tolerance factor")

    def __call__(self, graph_module: fx.GraphModule) -> PassResult:
        """Run every pass on ``graph_module`` (passes may modify it in place) and return the result.

        Returns ``PassResult(final_graph_module, any_pass_modified)`` and fills :attr:`report`: one
        :class:`PassReport` per pass, with ``reason_of(result)`` for a pass that changed nothing.
        """
        # TODO(step 7): run, validate and report every pass, following the module docstring.
        # guidance: begin
        #  - with example inputs, measure the reference first:
        #    reference = ReferenceOutputs.measure(graph_module, self.example_inputs);
        #  - for each pass: count nodes, time it (time.perf_counter), check it returned a
        #    PassResult (TypeError naming the pass otherwise), continue with result.graph_module;
        #  - validate: graph.lint(), run the graph (under torch.no_grad()) on fresh_copies(self.example_inputs):
        #    a graph may write its inputs in place (x.sub_(mean)), and a run on written inputs
        #    differs from the first, blaming an innocent pass; a failure to run raises
        #    PassValidationError(pass_name, message) naming the pass; for a pass that does not
        #    declare changes_semantics, verdict = reference.compare(outputs,
        #    factor=self.tolerance_factor), and a verdict that is not ok raises
        #    PassValidationError(pass_name, message, verdict.error) whose message names the pass and
        #    includes verdict.describe() (it gives the error as f"{error.max_abs:.3e}" and the budget);
        #  - a declared semantic change: report its deviation (output_error against
        #    reference.outputs), then measure a new reference on the changed graph;
        #  - append a PassReport per pass to self.report (its errors: verdict.error, or the
        #    deviation; its reason: reason_of(result) when the pass changed nothing); return
        #    PassResult(final_gm, any_modified).
        # guidance: end
        raise NotImplementedError("PassManager.__call__: run, validate and report every pass")
