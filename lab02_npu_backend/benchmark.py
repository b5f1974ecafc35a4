"""Benchmark: ``python -m lab02_npu_backend.benchmark`` (``nox -s bench-lab02``).

1. Latency of LLaMA-tiny compiled with ``npu_simulator`` vs eager PyTorch (batch 1 and 8, seq 64),
   interleaved, median of ``--repeats`` rounds. The simulator is an interpreter over PyTorch CPU
   kernels; the target is <= 1.5x eager latency (the cost of dispatching instructions one by one).
2. Compile time (first call, including Dynamo tracing, partitioning and lowering) per model.
3. The NPU coverage of every standard model (node count and FLOPs).

Writes ``benchmark.json`` and ``latency.png`` under ``--out``. Uses the implementation ``LABKIT_IMPL``
selects (the nox session defaults to the reference solution).
"""

from __future__ import annotations

import time

import torch

from labkit.bench import apply_threads, bar_chart, benchmark_parser, machine_info, print_table, time_interleaved, write_json
from labkit.impl import load_lab, selected_impl
from lab02_npu_backend.models import STANDARD_MODELS, build_model

PACKAGE = "lab02_npu_backend"
LATENCY_TARGET = 1.5
SEQ = 64


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__.splitlines()[0], "results/lab02")
    args = parser.parse_args(argv)
    apply_threads(args.threads)
    lab = load_lab(PACKAGE)
    print(f"npu_simulator benchmark ({selected_impl()} implementation), {machine_info()}", flush=True)

    latency_rows, latency = [], {}
    for batch in (1, 8):
        case = build_model("llama-tiny", batch=batch, seq=SEQ)
        torch._dynamo.reset()
        with torch.no_grad():
            start = time.perf_counter()
            compiled = torch.compile(case.model, backend=lab.npu_backend)
            compiled(*case.example_inputs)
            compile_s = time.perf_counter() - start
            timings = time_interleaved(
                {"eager": lambda: case.model(*case.example_inputs), "npu_simulator": lambda: compiled(*case.example_inputs)},
                repeats=args.repeats,
            )
        ratio = timings["npu_simulator"].median_s / timings["eager"].median_s
        latency[f"batch{batch}"] = {"eager": timings["eager"], "npu_simulator": timings["npu_simulator"],
                                    "ratio": ratio, "compile_s": compile_s}
        latency_rows.append([f"llama-tiny b{batch} s{SEQ}", timings["eager"].median_s * 1e3,
                             timings["npu_simulator"].median_s * 1e3, ratio,
                             "yes" if ratio <= LATENCY_TARGET else "no", compile_s])
        print(f"  batch {batch}: ratio {ratio:.2f}", flush=True)
    print_table("LLaMA-tiny latency (median)", ["case", "eager ms", "npu_simulator ms", "ratio",
                                                 f"<= {LATENCY_TARGET}x", "compile s"], latency_rows)

    coverage_rows, coverage = [], {}
    for name in STANDARD_MODELS:
        case = build_model(name)
        start = time.perf_counter()
        report = lab.partition_report(case.model, *case.example_inputs, name=name)
        elapsed = time.perf_counter() - start
        coverage[name] = report.to_dict() | {"report_s": elapsed}
        fallback = sorted({d.op for d in report.fallbacks})
        coverage_rows.append([name, report.total_nodes, report.npu_nodes, f"{report.npu_fraction:.1%}",
                              f"{report.npu_flop_fraction:.1%}", report.num_partitions,
                              len(report.graph_breaks), ", ".join(fallback) or "-", elapsed])
    print_table("NPU coverage (torch-level graphs)", ["model", "nodes", "NPU", "NPU % nodes", "NPU % FLOPs",
                                                     "partitions", "breaks", "CPU fallback ops", "explain+compile s"],
                coverage_rows)

    json_path = write_json(args.out / "benchmark.json", {"impl": selected_impl(), "latency_target": LATENCY_TARGET,
                                                         "seq": SEQ, "latency": latency, "coverage": coverage})
    png = bar_chart(args.out / "latency.png", [f"b{b} {k}" for b in (1, 8) for k in ("eager", "npu")],
                    [latency[f"batch{b}"][k].median_s * 1e3 for b in (1, 8) for k in ("eager", "npu_simulator")],
                    ylabel="median latency (ms)", title="LLaMA-tiny, seq 64: eager vs npu_simulator")
    print(f"wrote {json_path} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
