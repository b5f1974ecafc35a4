"""A submission that shows a rewrite it does not run, and its honest twin (a pytest plugin, ``-p``).

The attack (``LAB01_SUBMISSION=stale``): the reference, except that every pass hands back a
``GraphModule`` whose *graph* is the reference's rewritten graph but whose *code* (``gm.code``,
``gm.forward``) is the program as it was before the pass: counting nodes sees the optimisation,
calling ``gm(...)`` runs the original. Its honest twin (``LAB01_SUBMISSION=honest``) is what that
code really does: the same reference API, every pass returning the module it received, untouched,
with the reference's ``modified`` flag. A test suite that runs what it inspects scores the two alike.

The plugin replaces the lab that the ``lab`` fixture loads (``labkit.impl.load_lab``) and writes
``{nodeid: [outcome, points]}`` to ``$LAB01_SCORES`` at the end of the session.
"""

from __future__ import annotations

import copy
import json
import os
import types
from typing import Any

import pytest
from torch import fx
from torch.fx.passes.infra.pass_base import PassResult

from labkit import impl

PACKAGE = "lab01_fx_passes"
#: The API functions that are passes (``gm -> PassResult``, extra arguments allowed), where they exist.
PASS_FUNCTIONS = ("fuse_conv_bn", "fold_constants", "eliminate_dead_code", "replace_ops", "fuse_linear_gelu",
                  "convert_to_channels_last", "freeze_parameters")  # fmt: skip
#: The API classes whose instances are passes.
PASS_CLASSES = ("OpReplacer", "ParameterFreezer", "DCEPass", "LinearGeluFuser", "ChannelsLastConverter")


def _copy(gm: fx.GraphModule) -> fx.GraphModule:
    """A module sharing ``gm``'s attributes with a graph of its own (passes never edit attributes in place)."""
    return fx.GraphModule(gm, copy.deepcopy(gm.graph))


def _stale(gm: fx.GraphModule, result: PassResult, forward: Any, code: str) -> PassResult:
    """``result``'s rewritten graph on ``gm``, with the code ``gm`` had before the pass."""
    rewritten = result.graph_module
    if rewritten is not gm:  # a new module (fx.Transformer): give gm what its graph reads
        for name, child in rewritten.named_children():
            if not hasattr(gm, name):
                gm.add_submodule(name, child)
        for name, value in [*rewritten.named_parameters(recurse=False), *rewritten.named_buffers(recurse=False)]:
            if not hasattr(gm, name):
                setattr(gm, name, value)
    gm._graph = rewritten.graph  # the graph setter would recompile: bypass it
    type(gm).forward = forward
    gm._code = code
    return PassResult(gm, result.modified)


def attack(kind: str, function: Any) -> Any:
    """Wrap a pass function of the reference: stale code (``stale``) or no change at all (``honest``)."""

    def run(gm: fx.GraphModule, *args: Any, **kwargs: Any) -> PassResult:
        if kind == "honest":
            return PassResult(gm, function(_copy(gm), *args, **kwargs).modified)
        forward, code = type(gm).forward, gm._code
        return _stale(gm, function(gm, *args, **kwargs), forward, code)

    run.__name__ = getattr(function, "__name__", "pass")
    return run


def attack_class(kind: str, cls: type) -> type:
    """A subclass of a reference pass class whose instances behave like :func:`attack`'s passes."""

    def __call__(self, gm: fx.GraphModule) -> PassResult:
        return attack(kind, super(wrapped, self).__call__)(gm)

    wrapped = type(cls.__name__, (cls,), {"__call__": __call__})
    return wrapped


def submission(kind: str) -> types.ModuleType:
    """The reference lab with its passes replaced (``kind``: ``stale`` or ``honest``)."""
    reference = impl.load_lab(PACKAGE, "solution")
    lab = types.ModuleType(f"{PACKAGE}_{kind}")
    lab.__dict__.update({name: getattr(reference, name) for name in dir(reference) if not name.startswith("__")})
    for name in PASS_FUNCTIONS:
        if hasattr(reference, name):
            setattr(lab, name, attack(kind, getattr(reference, name)))
    for name in PASS_CLASSES:
        if hasattr(reference, name):
            setattr(lab, name, attack_class(kind, getattr(reference, name)))

    def default_pipeline(example_inputs):
        manager = reference.default_pipeline(example_inputs)
        passes = [attack_class(kind, type(p))(example_inputs)
                  if hasattr(reference, "ParameterFreezer") and isinstance(p, reference.ParameterFreezer)
                  else attack(kind, p) for p in manager.passes]  # fmt: skip
        return reference.PassManager(passes, example_inputs=example_inputs)

    lab.default_pipeline = default_pipeline
    return lab


# -- the plugin ---------------------------------------------------------------------------------
_SCORES: dict[str, list[Any]] = {}
_POINTS: dict[str, int] = {}


def pytest_configure(config: pytest.Config) -> None:
    kind = os.environ["LAB01_SUBMISSION"]
    lab = submission(kind)
    real = impl.load_lab
    impl.load_lab = lambda package, which=None: lab if package == PACKAGE else real(package, which)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("points")
        _POINTS[item.nodeid] = marker.args[0] if marker else 0


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    first = report.nodeid not in _SCORES or _SCORES[report.nodeid][0] == "passed"  # a failure sticks
    if (report.when == "call" or report.failed or report.skipped) and first:
        _SCORES[report.nodeid] = [report.outcome, _POINTS.get(report.nodeid, 0)]


def pytest_sessionfinish() -> None:
    with open(os.environ["LAB01_SCORES"], "w", encoding="utf-8") as handle:
        json.dump(_SCORES, handle, indent=1)
