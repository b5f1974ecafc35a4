"""NPU coverage report: ``python -m lab02_npu_backend.report --model llama-tiny``.

Compiles a standard model with the selected implementation's backend (``LABKIT_IMPL``; default:
your code), prints the coverage table (Markdown) and writes the report as JSON.

    python -m lab02_npu_backend.report --model all --out results/lab02
    python -m lab02_npu_backend.report --model resnet18 --dialect aten
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from labkit.impl import load_lab, selected_impl
from lab02_npu_backend.models import STANDARD_MODELS, build_model

PACKAGE = "lab02_npu_backend"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="NPU coverage of a standard model under the npu_simulator backend.")
    parser.add_argument("--model", default="llama-tiny", choices=[*STANDARD_MODELS, "all"])
    parser.add_argument("--dialect", default="torch", choices=["torch", "aten"],
                        help="torch: Dynamo graphs (plain backend); aten: through AOTAutograd")
    parser.add_argument("--out", type=Path, default=Path("results/lab02"), help="folder for the JSON reports")
    args = parser.parse_args(argv)

    lab = load_lab(PACKAGE)
    names = STANDARD_MODELS if args.model == "all" else (args.model,)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in names:
        print(f"compiling {name} with npu_simulator ({selected_impl()} implementation, {args.dialect} graphs) ...",
              flush=True)
        case = build_model(name)
        report = lab.partition_report(case.model, *case.example_inputs, dialect=args.dialect, name=name)
        print(report.to_markdown())
        path = args.out / f"coverage-{name}-{args.dialect}.json"
        path.write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
