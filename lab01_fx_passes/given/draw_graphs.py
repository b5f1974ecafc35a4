"""Draw a model's graph before and after the lab's pipeline, per dialect, with what each pass did marked.

    python -m lab01_fx_passes.given.draw_graphs --model tiny_resnet --dialect all
    python -m lab01_fx_passes.given.draw_graphs --model linear_gelu_mlp --dialect make_fx
    python -m lab01_fx_passes.given.draw_graphs --model resnet50 --dialect symbolic_trace --full-labels

For each dialect the model is captured (:mod:`lab01_fx_passes.given.capture`), the selected
implementation's ``default_pipeline`` runs on a copy of the graph with every pass recorded
(:mod:`lab01_fx_passes.given.pass_changes`), and two pictures are drawn with PyTorch's ``FxGraphDrawer``
(:mod:`labkit.graph_drawing`):

- ``<dialect>-before``: the captured graph; a node a pass later removed or changed has that pass's
  colour (dashed outline: removed) and says so;
- ``<dialect>-after``: the graph the pipeline returned; a node a pass added (thick outline) or
  changed has that pass's colour and says which passes touched it.

Each pass keeps its colour in every dialect, so the same model's pictures side by side show what
each pass found to do in each graph form, and where it found nothing. ``changes.md`` lists, per
dialect and pass, the nodes added, removed, changed and rewired (an input now comes from another
node) and how far the pass moved the outputs. Everything goes to ``<out>/<model>/``: DOT text
always, SVG and PNG when Graphviz is installed (without it the command says how to install it).
``LABKIT_IMPL`` selects the implementation (default: yours).
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import fx, nn

from lab01_fx_passes.given.capture import DIALECTS, capture
from lab01_fx_passes.given.models import (
    ConvBNStack,
    LinearGeluMLP,
    TinyResNet,
    large_output_resnet50,
    randomize_batch_norm,
)
from lab01_fx_passes.given.pass_changes import Event, NodeHistories, PassChanges, node_histories, run_recorded
from labkit.graph_drawing import GRAPHVIZ_MISSING, PALETTE, Drawing, NodeStyle, graphviz_available, write_graph
from labkit.impl import load_lab, selected_impl
from labkit.step_summary import shorten
from labkit.unfinished import UNFINISHED_EXIT, unfinished_step_line

PACKAGE = "lab01_fx_passes"
#: How many node names a cell of ``changes.md`` lists before it says how many more there are.
NAMES_SHOWN = 8


def _seeded(build: Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]) -> Callable[[], Any]:
    def seeded() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        torch.manual_seed(0)
        return build()

    return seeded


#: name -> builder of (model in eval mode, example inputs); BatchNorm statistics randomised.
MODELS: dict[str, Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]] = {
    "tiny_resnet": _seeded(lambda: (randomize_batch_norm(TinyResNet()).eval(), (torch.randn(2, 3, 12, 12),))),
    "conv_bn_stack": _seeded(lambda: (randomize_batch_norm(ConvBNStack()).eval(), (torch.randn(2, 3, 8, 8),))),
    "linear_gelu_mlp": _seeded(lambda: (LinearGeluMLP().eval(), (torch.randn(4, 8),))),
    "resnet50": _seeded(lambda: (large_output_resnet50(), (torch.randn(1, 3, 64, 64),))),
}


@dataclass
class DialectDrawing:
    """What :func:`draw_dialect` did for one dialect."""

    dialect: str
    nodes_before: int
    changes: list[PassChanges] = field(default_factory=list)
    #: how far each pass moved the outputs (the pass manager's report; None where unknown).
    errors: list[float | None] = field(default_factory=list)
    drawings: list[Drawing] = field(default_factory=list)
    #: why the pipeline did not finish (a pass diverged, a TODO), or None.
    problem: str | None = None
    #: the captured graph, and the graph the last pass that ran returned (None: no pass ran).
    captured: fx.GraphModule | None = None
    final: fx.GraphModule | None = None


def pass_colors(names: Sequence[str]) -> dict[str, str]:
    """Each pass's fill colour, in pipeline order (the same in every dialect)."""
    return {name: PALETTE[index % len(PALETTE)] for index, name in enumerate(names)}


def _describe(events: Sequence[Event]) -> str:
    return "; ".join(f"{what} by {name}" for name, what in events)


def before_styles(histories: NodeHistories, colors: dict[str, str]) -> dict[str, NodeStyle]:
    """The captured graph's marks: what the passes later changed or removed there.

    A removed node has the colour of the pass that removed it; a changed one, of the first pass
    that changed it (a later one, such as the layout pass, changes what an earlier one made).
    """
    styles = {}
    for name, events in histories.original.items():
        removed = events[-1][1] == "removed"
        color = colors[events[-1][0] if removed else events[0][0]]
        styles[name] = NodeStyle(fill=color, note=_describe(events), dashed=removed)
    return styles


def after_styles(histories: NodeHistories, colors: dict[str, str]) -> dict[str, NodeStyle]:
    """The returned graph's marks: the colour of the pass that added (thick outline) or first changed each node."""
    return {
        name: NodeStyle(fill=colors[events[0][0]], note=_describe(events), bold=events[0][1] == "added")
        for name, events in histories.final.items()
    }


def legend(changes: Sequence[PassChanges], colors: dict[str, str]) -> list[tuple[str, NodeStyle]]:
    """One legend entry per pass (its colour and what it did here), then what white and the outlines mean."""
    entries = [
        (
            f"{c.name}: {len(c.added)} added, {len(c.removed)} removed, {len(c.changed)} changed",
            NodeStyle(fill=colors[c.name]),
        )
        for c in changes
    ]
    return [
        *entries,
        ("untouched by every pass", NodeStyle()),
        ("dashed: removed (before) / thick: added (after)", NodeStyle(dashed=True, bold=True)),
    ]


#: What a TODO stops in a drawing (:func:`labkit.unfinished.unfinished_step_line`).
PIPELINE_NEEDS = "the pictures' default_pipeline"


def _problem(error: BaseException) -> str:
    unfinished = unfinished_step_line(error, PACKAGE, PIPELINE_NEEDS)
    return unfinished or shorten(f"{type(error).__name__}: {error}")


def draw_dialect(
    lab: Any, label: str, model: nn.Module, inputs: tuple[Any, ...], dialect: str, out: Path, *, compact: bool = True
) -> DialectDrawing:
    """Capture ``model`` in ``dialect``, run the lab's pipeline recorded, draw before and after into ``out``."""
    captured = capture(model, inputs, dialect)
    original = captured.graph_module
    result = DialectDrawing(dialect, len(original.graph.nodes), captured=original)
    names = [node.name for node in original.graph.nodes]
    record, error, manager = None, None, None
    # The lab's backend runs the pipeline inside the compiled call, under ``torch.no_grad()`` (an
    # inference graph): with gradients on, frozen weights would still require grad and Conv+BN
    # folding and the layout pass would rightly refuse them, so the picture would show another run.
    with torch.no_grad():
        try:
            manager = lab.default_pipeline(captured.inputs)
            record, error = run_recorded(manager, copy.deepcopy(original))
        except Exception as failure:  # noqa: BLE001 - an unfinished pipeline: draw the captured graph alone
            error = failure
    if error is not None:
        result.problem = _problem(error)
    elif record is not None and manager.passes and not record.changes:
        result.problem = (
            "the pass manager ran none of the passes in its `passes` list (step 7's contract: "
            "keep them in self.passes and run them from there)"
        )
    changes = record.changes if record else []
    result.changes = changes
    reports = list(getattr(manager, "report", None) or [])
    result.errors = [reports[i].max_abs_error if i < len(reports) else None for i in range(len(changes))]
    colors = pass_colors([p.name for p in manager.passes] if record else [c.name for c in changes])
    histories = node_histories(names, changes)
    key = legend(changes, colors)
    title = f"{label}, {dialect}: before the pipeline ({len(names)} nodes)"
    result.drawings.append(
        write_graph(
            original,
            title,
            out / f"{dialect}-before",
            styles=before_styles(histories, colors),
            legend=key,
            compact=compact,
        )
    )
    if record and record.graphs:
        final = result.final = record.graphs[-1]
        stopped = f" (stopped: {changes[-1].name} failed)" if error is not None else ""
        passes = ", ".join(c.name for c in changes)
        title = f"{label}, {dialect}: after {passes}{stopped} ({len(final.graph.nodes)} nodes)"
        result.drawings.append(
            write_graph(
                final,
                title,
                out / f"{dialect}-after",
                styles=after_styles(histories, colors),
                legend=key,
                compact=compact,
            )
        )
    return result


def _names(names: Sequence[str]) -> str:
    if not names:
        return "-"
    shown = ", ".join(f"`{name}`" for name in names[:NAMES_SHOWN])
    return shown + (f" (+{len(names) - NAMES_SHOWN} more)" if len(names) > NAMES_SHOWN else "")


def changes_table(drawing: DialectDrawing) -> list[str]:
    """Markdown lines for one dialect: a row per pass (nodes, what it added, removed, changed, rewired)."""
    lines = [f"## {drawing.dialect}: {drawing.nodes_before} nodes captured", ""]
    if drawing.problem:
        lines += [f"The pipeline did not finish: {drawing.problem}", ""]
    if drawing.changes:
        lines += [
            "| pass | nodes | added | removed | changed | inputs rewired | max abs error |",
            "| --- | --- | --- | --- | --- | --- | ---: |",
        ]
        for change, error in zip(drawing.changes, drawing.errors):
            lines.append(
                f"| {change.name} | {change.nodes_before} -> {change.nodes_after} | {_names(change.added)} | "
                f"{_names(change.removed)} | {_names(change.changed)} | {_names(change.rewired)} | "
                f"{'-' if error is None else f'{error:.2e}'} |"
            )
        idle = [c.name for c in drawing.changes if not c.touched]
        if idle:
            lines += ["", f"Found nothing to do here: {', '.join(idle)}."]
    files = [path.name for d in drawing.drawings for path in (d.source, *d.images, *((d.index,) if d.index else ()))]
    lines += ["", "Pictures: " + ", ".join(f"`{name}`" for name in files), ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny_resnet", choices=sorted(MODELS))
    parser.add_argument("--dialect", default="all", choices=[*DIALECTS, "all"])
    parser.add_argument(
        "--out", type=Path, default=Path("results/lab01/graphs"), help="folder for the pictures (a subfolder per model)"
    )
    parser.add_argument(
        "--full-labels",
        action="store_true",
        help="every field FxGraphDrawer writes (module constants, strides, users), not the compact labels",
    )
    args = parser.parse_args(argv)

    lab = load_lab(PACKAGE)
    model, inputs = MODELS[args.model]()
    out = args.out / args.model
    dialects = DIALECTS if args.dialect == "all" else (args.dialect,)
    lines = [f"# {args.model}: the graph before and after the pipeline ({selected_impl()} implementation)", ""]
    finished, unfinished = True, None
    for dialect in dialects:
        print(f"{args.model}, {dialect}: capturing, running the pipeline, drawing ...", flush=True)
        drawing = draw_dialect(lab, args.model, model, inputs, dialect, out, compact=not args.full_labels)
        table = changes_table(drawing)
        print("\n".join(table))
        for written in drawing.drawings:
            print(f"  {written.describe()}")
        lines += table
        finished = finished and drawing.problem is None
        if drawing.problem and drawing.problem.startswith(PIPELINE_NEEDS):
            unfinished = drawing.problem
    report = out / "changes.md"
    report.write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {report}")
    if not graphviz_available():
        print(GRAPHVIZ_MISSING, file=sys.stderr)
    if unfinished:  # the graphs as captured are drawn; the last line names the step to finish
        print(unfinished, file=sys.stderr, flush=True)
        return UNFINISHED_EXIT
    return 0 if finished else 1


if __name__ == "__main__":
    raise SystemExit(main())
