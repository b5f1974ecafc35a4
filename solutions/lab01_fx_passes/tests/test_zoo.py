"""The reference's default pipeline on every classification model torchvision ships, in every dialect.

Course test (instructor-only, not graded; marker ``zoo``: ``nox -s zoo-lab01``). Each cell is one
model captured in one dialect (:mod:`.zoo` builds them), run through ``default_pipeline`` (freezing
included: in Dynamo graphs the weights are inputs until then), and checked for what the lab
promises on real model code nobody here wrote:

- the pipeline runs to the end: the pass manager validated every pass on the model's input against
  float32's own error (a float64 run of the captured graph: ``ReferenceOutputs``, 4x budget);
- the graph it returns, executed node by node (``labkit.fx_nodes.run_graph``), gives exactly the
  outputs the pass manager validated (the same kernels on the same inputs), and its ``forward`` is
  the code of its graph: the table's error is the last pass's, as a multiple of float32's own error;
- every foldable Conv+BN pair is folded (an eval BatchNorm fed by a convolution that nothing else
  reads: counted here, independently of the pass), and no other BatchNorm is touched;
- every 2-D convolution runs channels-last.

The run ends with a table of the cells (``zoo-lab01`` results): folds, convolutions converted,
error against budget, seconds.
"""

from __future__ import annotations

import functools
import time

import pytest
import torch
from torch import fx, nn

from lab01_fx_passes.given.capture import CapturedGraph, capture
from lab01_fx_passes.given.checks import (
    BATCH_NORM_FUNCTIONS,
    CONVOLUTION_FUNCTIONS,
    batch_norms,
    conv_weights,
)
from labkit.fx_nodes import code_matches_graph, run_graph
from labkit.impl import load_lab
from labkit.numerics import output_error

from . import zoo

pytestmark = pytest.mark.zoo
aten = torch.ops.aten
#: Convolutions of any dimension (the Conv+BN fold handles 1-D to 3-D).
ANY_CONVOLUTION = CONVOLUTION_FUNCTIONS + (
    torch.conv1d,
    torch.conv3d,
    aten.conv1d.default,
    aten.conv3d.default,
)
#: One row per cell that ran: filled by the test, printed by the conftest's terminal summary.
RESULTS: list[dict] = []


@functools.lru_cache(maxsize=1)
def built(name: str) -> nn.Module:
    return zoo.build(name)


@functools.lru_cache(maxsize=1)
def exported(name: str) -> torch.export.ExportedProgram:
    """One ``torch.export`` per model, for its ``export`` and ``export_core_aten`` cells."""
    return torch.export.export(built(name), (zoo.example_input(name),))


def captured_cell(name: str, dialect: str) -> CapturedGraph:
    """The model captured in ``dialect`` (as ``capture`` does; the two export dialects share one export)."""
    x = zoo.example_input(name)
    if dialect == "export":
        return CapturedGraph(dialect, exported(name).module(), (x,))
    if dialect == "export_core_aten":
        return CapturedGraph(dialect, exported(name).run_decompositions().module(), (x,))
    return capture(built(name), [x], dialect)


def _is_convolution(gm: fx.GraphModule, node: fx.Node) -> bool:
    if node.op == "call_module":
        module = gm.get_submodule(node.target)
        return isinstance(module, nn.modules.conv._ConvNd) and not module.transposed
    if node.op != "call_function" or node.target not in ANY_CONVOLUTION:
        return False
    return not (node.target is aten.convolution.default and node.args[6])


def _is_eval_batch_norm(gm: fx.GraphModule, node: fx.Node) -> bool:
    if node.op == "call_module":
        module = gm.get_submodule(node.target)
        return isinstance(module, nn.modules.batchnorm._BatchNorm) and not module.training
    return node.op == "call_function" and node.target in BATCH_NORM_FUNCTIONS


def foldable_pairs(gm: fx.GraphModule) -> int:
    """Eval BatchNorms whose input is a convolution read by nothing else (the zoo is in eval mode)."""
    return sum(
        _is_eval_batch_norm(gm, node) and isinstance(node.args[0], fx.Node) and _is_convolution(gm, node.args[0])
        and len(node.args[0].users) == 1
        for node in gm.graph.nodes
    )  # fmt: skip


@pytest.fixture(scope="module")
def reference_lab():
    return load_lab("lab01_fx_passes", "solution")


@pytest.mark.parametrize("model_name, dialect", zoo.cells(), ids=[f"{m}-{d}" for m, d in zoo.cells()])
def test_default_pipeline_on_the_torchvision_zoo(reference_lab, model_name, dialect):
    reason = zoo.EXCLUDED.get((model_name, dialect))
    if reason is not None:
        RESULTS.append({"model": model_name, "dialect": dialect, "excluded": reason})
        pytest.skip(f"excluded: {reason}")
    start = time.perf_counter()
    row = {"model": model_name, "dialect": dialect, "ok": False, "failure": None}
    RESULTS.append(row)
    try:
        check_cell(reference_lab, model_name, dialect, row)
    except BaseException as error:
        row["failure"] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]
        raise
    finally:
        row["seconds"] = time.perf_counter() - start


def check_cell(lab, model_name: str, dialect: str, row: dict) -> None:
    with torch.no_grad():
        captured = captured_cell(model_name, dialect)
        gm = captured.graph_module
        norms, pairs = batch_norms(gm), foldable_pairs(gm)
        manager = lab.default_pipeline(captured.inputs)
        result = manager(gm)  # raises PassValidationError naming a pass that leaves float32's budget
        validated = result.graph_module(*captured.inputs)
    ran = run_graph(result.graph_module, *captured.inputs)
    weights = conv_weights(result.graph_module)
    converted = sum(w is not None and w.is_contiguous(memory_format=torch.channels_last) for w in weights)
    row.update(batch_norms=norms, foldable=pairs, left=batch_norms(result.graph_module), convs=len(weights),
               channels_last=converted, max_abs_error=manager.report[-1].max_abs_error)  # fmt: skip
    lines = "\n  ".join(entry.line() for entry in manager.report)
    assert code_matches_graph(result.graph_module), f"{model_name} ({dialect}): forward is not the graph's code"
    assert output_error(ran, validated).max_abs == 0, (
        f"{model_name} ({dialect}): the graph does not compute what was validated"
    )
    assert row["left"] == norms - pairs, (
        f"{model_name} ({dialect}): {norms} BatchNorms, {pairs} foldable, {row['left']} left\n  {lines}"
    )
    assert converted == len(weights), (
        f"{model_name} ({dialect}): {converted} of {len(weights)} convolutions channels-last"
    )
    row["ok"] = True
