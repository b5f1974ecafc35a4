"""NPU coverage report: ``python -m lab02_npu_backend.report --model llama-tiny``.

Compiles standard models with the selected implementation's backend (``LABKIT_IMPL``; default:
your code), prints each coverage table (Markdown), writes each report as JSON, and ends with one
summary row per model and dialect: the nodes that do work, how many ran on the NPU, the nodes
elided because they do no work, and the ops that fell back.

    python -m lab02_npu_backend.report --model all --dialect both --out results/lab02
    python -m lab02_npu_backend.report --model resnet18 --dialect aten
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from labkit.impl import load_lab, selected_impl
from lab02_npu_backend.coverage import PartitionReport
from lab02_npu_backend.models import STANDARD_MODELS, build_model

PACKAGE = "lab02_npu_backend"
DIALECTS = {"torch": ("torch",), "aten": ("aten",), "both": ("torch", "aten")}


def summary_row(report: PartitionReport) -> str:
    """One Markdown row: model, dialect, NPU/work nodes, %, FLOPs %, elided, CPU fallback ops with counts."""
    fallbacks = Counter(decision.op for decision in report.fallbacks)
    shown = ", ".join(f"`{op}` {count}" for op, count in sorted(fallbacks.items(), key=lambda item: (-item[1], item[0])))
    return (f"| {report.model} | {report.dialect} | {report.npu_nodes}/{report.total_nodes} | "
            f"{report.npu_fraction:.1%} | {report.npu_flop_fraction:.1%} | {report.elided_nodes} | {shown or '-'} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="NPU coverage of standard models under the npu_simulator backend.")
    parser.add_argument("--model", default="llama-tiny", choices=[*STANDARD_MODELS, "all"])
    parser.add_argument("--dialect", default="torch", choices=list(DIALECTS),
                        help="torch: Dynamo graphs (plain backend); aten: through AOTAutograd; both")
    parser.add_argument("--out", type=Path, default=Path("results/lab02"), help="folder for the JSON reports")
    args = parser.parse_args(argv)

    lab = load_lab(PACKAGE)
    names = STANDARD_MODELS if args.model == "all" else (args.model,)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in names:
        for dialect in DIALECTS[args.dialect]:
            print(f"compiling {name} with npu_simulator ({selected_impl()} implementation, {dialect} graphs) ...",
                  flush=True)
            case = build_model(name)
            report = lab.partition_report(case.model, *case.example_inputs, dialect=dialect, name=name)
            print(report.to_markdown())
            path = args.out / f"coverage-{name}-{dialect}.json"
            path.write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
            print(f"wrote {path}\n")
            rows.append(summary_row(report))
    print("## Summary (NPU nodes / nodes that do work; elided nodes do no work and are not counted)\n")
    print("| model | dialect | NPU nodes | NPU % | NPU % FLOPs | elided | CPU fallback |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
