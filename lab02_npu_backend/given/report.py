"""NPU coverage report: ``python -m lab02_npu_backend.given.report --model llama-tiny``.

Compiles standard models with the selected implementation's backend (``LABKIT_IMPL``; default:
your code), prints each coverage table (Markdown), writes each report as JSON, and ends with one
summary row per model and dialect: the nodes that do work, how many ran on the NPU, the nodes
elided because they do no work, and the ops that fell back.

    python -m lab02_npu_backend.given.report --model all --dialect both --out results/lab02
    python -m lab02_npu_backend.given.report --model resnet18 --dialect aten
    python -m lab02_npu_backend.given.report --model mlp --dialect both --draw   # + pictures of the partitions
    python -m lab02_npu_backend.given.report --zoo      # every transformers family of the zoo, both dialects

``--profile`` also profiles each model on the NPU (the optional step 6, :mod:`lab02_npu_backend.profiling`):
time, bytes and FLOPs per ISA op over five runs, written as ``profile-<model>.json``, and the
``torch.profiler`` trace as ``trace-<model>.json`` (open it in https://ui.perfetto.dev).

    python -m lab02_npu_backend.given.report --model llama-tiny --profile

``--draw`` also draws every graph the backend received, its NPU partitions boxed and coloured, its
CPU fallbacks labelled with their reasons (:mod:`lab02_npu_backend.given.partition_drawing`): DOT text,
and SVG and PNG when Graphviz is installed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lab02_npu_backend.given import coverage
from lab02_npu_backend.given.coverage import PartitionReport
from lab02_npu_backend.given.models import STANDARD_MODELS, build_model
from lab02_npu_backend.given.partition_drawing import draw_model
from lab02_npu_backend.given.profiling_tools import NpuProfile, profile_npu
from lab02_npu_backend.given.registration import npu_simulator
from lab02_npu_backend.given.zoo import BY_NAME, ZOO_BAR, Family, build_family
from labkit.graph_drawing import GRAPHVIZ_MISSING, graphviz_available
from labkit.impl import load_lab, selected_impl
from labkit.numerics import output_error
from labkit.unfinished import finish_steps_first

PACKAGE = "lab02_npu_backend"
DIALECTS = {"torch": ("torch",), "aten": ("aten",), "both": ("torch", "aten")}


def summary_row(report: PartitionReport) -> str:
    """One Markdown row: model, dialect, NPU/work nodes, %, FLOPs %, elided, CPU fallback ops with counts."""
    return (
        f"| {report.model} | {report.dialect} | {report.npu_nodes}/{report.total_nodes} | "
        f"{report.npu_fraction:.1%} | {report.npu_flop_fraction:.1%} | {report.elided_nodes} | "
        f"{fallback_summary(report)} |"
    )


#: The zoo's coverage table: one row per family and dialect (:func:`zoo_row`).
ZOO_TABLE_HEADER = (
    "| family | kind | dialect | NPU nodes | NPU % | NPU % FLOPs | elided | CPU fallback | max abs error |",
    "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: |",
)


def fallback_summary(report: PartitionReport) -> str:
    """The ops that fell back, most frequent first: ``embedding`` x2, ``arange``."""
    fallbacks = Counter(decision.op for decision in report.fallbacks)
    ordered = sorted(fallbacks.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"`{op}`" + (f" x{count}" if count > 1 else "") for op, count in ordered) or "-"


def zoo_row(report: PartitionReport, family: Family, max_abs: float) -> str:
    """One row of the zoo's table; a family under the bar is marked (its reason is in the zoo's table)."""
    mark = " (under the bar: see below)" if report.npu_fraction < ZOO_BAR else ""
    return (
        f"| {family.name} | {family.kind} | {report.dialect} | {report.npu_nodes}/{report.total_nodes} | "
        f"{report.npu_fraction:.1%}{mark} | {report.npu_flop_fraction:.1%} | {report.elided_nodes} | "
        f"{fallback_summary(report)} | {max_abs:.2g} |"
    )


def zoo_reasons() -> list[str]:
    """Why each family under the bar stays there (the zoo's ``below_bar`` entries)."""
    return [
        f"- {family.name} ({dialect}): {reason}"
        for family in BY_NAME.values()
        for dialect, (_, reason) in family.below_bar.items()
    ]


def zoo_report(lab, dialects: tuple[str, ...]) -> list[str]:
    """Compile every zoo family with the backend; return the table's lines (header, rows, reasons)."""
    rows = []
    for family in BY_NAME.values():
        case = build_family(family.name)
        with torch.no_grad():
            expected = case.model(*case.example_inputs)
        for dialect in dialects:
            print(f"compiling {family.name} ({dialect} graphs) ...", flush=True)
            torch._dynamo.reset()
            backend = lab.npu_backend if dialect == "torch" else lab.npu_aot_backend
            with coverage.collect() as graphs, torch.no_grad():
                actual = torch.compile(case.model, backend=backend)(*case.example_inputs)
            report = PartitionReport.from_graphs(graphs, model=family.name)
            rows.append(zoo_row(report, family, output_error(actual, expected).max_abs))
    return zoo_table_lines(rows)


def zoo_table_lines(rows: list[str]) -> list[str]:
    """The zoo's table: header, rows, then why each family under the bar stays there."""
    reasons = zoo_reasons()
    why = ["", f"Under the bar of {ZOO_BAR:.0%} of the nodes that do work, and why:", "", *reasons] if reasons else []
    return [*ZOO_TABLE_HEADER, *rows, *why]


def main(argv: list[str] | None = None) -> int:
    """Print and write the report; on an unfinished lab, one line naming the step to finish (exit 3)."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {__spec__.name}",
        description="NPU coverage of standard models under the npu_simulator backend.",
    )
    parser.add_argument("--model", default="llama-tiny", choices=[*STANDARD_MODELS, "all"])
    parser.add_argument(
        "--dialect",
        default=None,
        choices=list(DIALECTS),
        help="torch: Dynamo graphs (plain backend); aten: through AOTAutograd; both (default: torch, both with --zoo)",
    )
    parser.add_argument("--out", type=Path, default=Path("results/lab02"), help="folder for the JSON reports")
    parser.add_argument(
        "--zoo", action="store_true", help="instead: every transformers family of the zoo (--dialect both by default)"
    )
    parser.add_argument(
        "--draw",
        action="store_true",
        help="also draw each graph's partitions: NPU partitions boxed, CPU fallbacks with "
        "their reasons (DOT; SVG and PNG with Graphviz)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also profile each model on the NPU (optional step 6): time, bytes and FLOPs per ISA op, and a "
        "torch.profiler trace (torch graphs)",
    )
    args = parser.parse_args(argv)
    if args.profile and args.zoo:
        parser.error("--profile profiles the standard models (--model)")
    if args.draw and args.zoo:
        parser.error("--draw draws the standard models (--model); the zoo's report has no pictures")

    with finish_steps_first(PACKAGE, "the coverage report"):
        return write_reports(args, load_lab(PACKAGE))


def write_reports(args: argparse.Namespace, lab) -> int:
    """The zoo's table, or each standard model's coverage table and JSON, then the summary."""
    if args.zoo:
        lines = zoo_report(lab, DIALECTS[args.dialect or "both"])
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "zoo-coverage.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
        print("\n".join(lines))
        print(f"\nwrote {args.out / 'zoo-coverage.md'}")
        return 0
    names = STANDARD_MODELS if args.model == "all" else (args.model,)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in names:
        for dialect in DIALECTS[args.dialect or "torch"]:
            print(
                f"compiling {name} with npu_simulator ({selected_impl()} implementation, {dialect} graphs) ...",
                flush=True,
            )
            case = build_model(name)
            report = lab.partition_report(case.model, *case.example_inputs, dialect=dialect, name=name)
            print(report.to_markdown())
            path = args.out / f"coverage-{name}-{dialect}.json"
            path.write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
            print(f"wrote {path}")
            if args.draw:
                print(f"drawing the partitions of {name} ({dialect} graphs) ...", flush=True)
                for drawing in draw_model(lab, name, case.model, case.example_inputs, dialect, args.out):
                    print(drawing.describe())
            print()
            rows.append(summary_row(report))
        if args.profile:
            write_profile(name, args.out)
    print("## Summary (NPU nodes / nodes that do work; elided nodes do no work and are not counted)\n")
    print("| model | dialect | NPU nodes | NPU % | NPU % FLOPs | elided | CPU fallback |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
    print("\n".join(rows))
    if args.draw and not graphviz_available():
        print(f"\n{GRAPHVIZ_MISSING}", file=sys.stderr)
    return 0


def profile_model(model: nn.Module, example_inputs: Sequence[Any], *, runs: int = 5) -> tuple[NpuProfile, Any]:
    """Profile ``model`` on the NPU: compile it with ``options={"profile": True}`` (Dynamo's torch-level
    graphs, inference), run it once so every program is lowered and loaded (first-call costs are not the
    kernels'), then ``runs`` times inside :func:`profile_npu`, then once more under ``torch.profiler``
    for the trace. The profile's runs are kept apart from the trace's: ``torch.profiler`` records every
    aten op a kernel calls, which makes the kernels themselves look 1.4 to 4 times slower.

    Returns:
        The profile of the ``runs`` runs, and the ``torch.profiler`` session of the last run
        (``.export_chrome_trace(path)`` writes the trace).
    """
    torch._dynamo.reset()
    with torch.no_grad():
        compiled = torch.compile(model, backend=npu_simulator, options={"profile": True})
        compiled(*example_inputs)
        with profile_npu() as profile:
            for _ in range(runs):
                compiled(*example_inputs)
        with torch.profiler.profile() as trace:
            compiled(*example_inputs)
    return profile, trace


def write_profile(name: str, out: Path) -> None:
    """Profile model ``name`` on the NPU; print the per-op table; write its JSON and the trace."""
    print(f"profiling {name} on the NPU (5 runs after one to load the programs) ...", flush=True)
    case = build_model(name)
    profile, trace = profile_model(case.model, case.example_inputs, runs=5)
    print(profile.table())
    (out / f"profile-{name}.json").write_text(profile.to_json() + "\n", encoding="utf-8")
    trace.export_chrome_trace(str(out / f"trace-{name}.json"))
    print(
        f"wrote {out / f'profile-{name}.json'} and {out / f'trace-{name}.json'} (open it in https://ui.perfetto.dev)\n"
    )


if __name__ == "__main__":
    raise SystemExit(main())
