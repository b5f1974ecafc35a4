"""A pytest plugin for the instructor's argument audit of lab 1 (``test_argument_audit.py`` runs it).

With ``--argument-audit PATH``, every run of an audited pass of the reference records, for each call node of the
graph it was given, the call's target and

- which of its arguments with a default it passes at that default (:func:`labkit.spellings.arguments_at_default`:
  a function's parameters, a module's configuration), and for each argument it passes at another value, the
  others it passes at another value too (*partners*: an argument always set together with another can be read
  wrongly by a check that reads only the other, as ``addmm``'s ``beta`` and ``alpha``);
- the values of its arguments without a default (:func:`labkit.spellings.required_argument_values`: aten's
  ``transposed``, ``groups``, dims; a graph value is ``"<value>"``);

and which targets the pass removed from the graph. At the end of the session the record is written to ``PATH``
as JSON::

    {"ConvBNFuser": {"removed": ["torch.nn.modules.batchnorm.BatchNorm2d", ...],
                     "met": {"torch.conv2d": {"stride": ["another", "default"], ...}, ...},
                     "partners": {"aten.addmm.default": {"beta": ["alpha"], "alpha": []}, ...},
                     "values": {"aten.convolution.default": {"transposed": ["False", "True"], ...}, ...}}, ...}

A pass *claims* the targets it removes: it rewrote those calls, so each of their arguments is a case its tests
should try at its default and at another value. The passes whose job is not one op's meaning (dead code,
constant folding, freezing, the pass manager) are not audited: they remove whatever they are given.
"""

from __future__ import annotations

import collections
import functools
import json
from pathlib import Path
from typing import Any

import pytest
from torch import fx
from torch.fx.passes.infra.pass_base import PassBase

from lab01_fx_passes.given.interface import ConvBNFuserBase
from labkit.spellings import (
    arguments_at_default,
    full_target_name,
    note_changed_together,
    required_argument_values,
)

#: The reference's passes whose job is rewriting particular calls.
AUDITED = ("ConvBNFuser", "LinearGeluFuser", "OneDNNLowering", "AlgebraicSimplifier", "OpReplacer")


class ArgumentAudit:
    """What the audited passes were given (:meth:`saw`) and what they removed (:meth:`left`), per pass."""

    def __init__(self) -> None:
        self.met: dict[str, dict[str, dict[str, set[str]]]] = collections.defaultdict(
            lambda: collections.defaultdict(lambda: collections.defaultdict(set))
        )
        self.values: dict[str, dict[str, dict[str, set[str]]]] = collections.defaultdict(
            lambda: collections.defaultdict(lambda: collections.defaultdict(set))
        )
        #: pass -> target -> argument -> the arguments at another value in every call with it at another value
        self.partners: dict[str, dict[str, dict[str, set[str]]]] = collections.defaultdict(
            lambda: collections.defaultdict(dict)
        )
        self.removed: dict[str, set[str]] = collections.defaultdict(set)

    def saw(self, pass_name: str, gm: fx.GraphModule) -> collections.Counter:
        """Record the calls of ``gm`` before ``pass_name`` runs on it; return how many calls each target has."""
        modules = dict(gm.named_modules())
        counts: collections.Counter = collections.Counter()
        for node in gm.graph.nodes:
            name = _call_name(node, modules)
            if name is None:
                continue
            counts[name] += 1
            at_default = arguments_at_default(node, modules) or {}
            for argument, default in at_default.items():
                self.met[pass_name][name][argument].add("default" if default else "another")
            note_changed_together(self.partners[pass_name][name], at_default, ignore=("training",))  # the mode
            for argument, value in (required_argument_values(node) or {}).items():
                self.values[pass_name][name][argument].add(value)
        return counts

    def left(self, pass_name: str, before: collections.Counter, gm: Any) -> None:
        """Record the targets ``pass_name`` removed: fewer calls of them in its result ``gm`` than before."""
        if not isinstance(gm, fx.GraphModule):
            return
        modules = dict(gm.named_modules())
        after = collections.Counter(_call_name(node, modules) for node in gm.graph.nodes)
        self.removed[pass_name] |= {name for name, count in before.items() if after[name] < count}

    def as_json(self) -> dict[str, Any]:
        return {
            pass_name: {
                "removed": sorted(self.removed[pass_name]),
                "met": {t: {a: sorted(v) for a, v in args.items()} for t, args in self.met[pass_name].items()},
                "partners": {
                    t: {a: sorted(v) for a, v in args.items()} for t, args in self.partners[pass_name].items()
                },
                "values": {t: {a: sorted(v) for a, v in args.items()} for t, args in self.values[pass_name].items()},
            }
            for pass_name in sorted(set(self.met) | set(self.removed))
        }


def _call_name(node: fx.Node, modules: dict[str, Any]) -> str | None:
    """A call node's full target name (a module call: its class's), None for other nodes."""
    if node.op == "call_module":
        module = modules.get(node.target)
        return None if module is None else f"{type(module).__module__}.{type(module).__qualname__}"
    if node.op in ("call_function", "call_method"):
        return full_target_name(node.target)
    return None


def _audited_name(instance: Any) -> str | None:
    """The pass's class name when it is one of the reference's audited passes."""
    cls = type(instance)
    audited = cls.__name__ in AUDITED and cls.__module__.startswith("solutions.lab01_fx_passes")
    return cls.__name__ if audited else None


def _install(audit: ArgumentAudit, patch: pytest.MonkeyPatch) -> None:
    """Wrap ``PassBase.__call__`` (every pass but Conv+BN) and ``ConvBNFuserBase.transform`` (an fx.Transformer)."""
    run_pass, transform = PassBase.__call__, ConvBNFuserBase.transform

    @functools.wraps(run_pass)
    def recorded_call(self: PassBase, graph_module: fx.GraphModule) -> Any:
        name = _audited_name(self)
        before = audit.saw(name, graph_module) if name else None
        result = run_pass(self, graph_module)
        if name:
            audit.left(name, before, getattr(result, "graph_module", None))
        return result

    @functools.wraps(transform)
    def recorded_transform(self: ConvBNFuserBase) -> Any:
        name = _audited_name(self)
        before = audit.saw(name, self.module) if name else None
        result = transform(self)
        if name:
            audit.left(name, before, result)
        return result

    patch.setattr(PassBase, "__call__", recorded_call)
    patch.setattr(ConvBNFuserBase, "transform", recorded_transform)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--argument-audit", default=None, metavar="PATH", help="write lab 1's argument audit to PATH")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--argument-audit")
    if path:
        audit, patch = ArgumentAudit(), pytest.MonkeyPatch()
        _install(audit, patch)
        config.stash[_AUDIT] = (audit, patch, Path(path))


def pytest_unconfigure(config: pytest.Config) -> None:
    recorded = config.stash.get(_AUDIT, None)
    if recorded:
        audit, patch, path = recorded
        patch.undo()
        path.write_text(json.dumps(audit.as_json(), indent=1))


_AUDIT = pytest.StashKey[tuple]()
