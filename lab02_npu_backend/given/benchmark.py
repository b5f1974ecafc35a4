"""Benchmark: ``python -m lab02_npu_backend.given.benchmark`` (``nox -s bench-lab02``; about 1-2 min on 2 cores).

1. Latency of LLaMA-tiny compiled with ``npu_simulator`` vs eager PyTorch (batch 1 and 8, seq 64),
   interleaved rounds: each time is the median with its interquartile range, and the simulator's
   cost relative to eager is computed round by round. The simulator is an interpreter over PyTorch
   CPU kernels; the target is <= 1.5x eager latency (the cost of dispatching instructions one by
   one). The verdict is ``met`` or ``missed`` only when the whole interquartile range of the ratio
   is on one side of 1.5x, else ``inconclusive (noise)``: pin threads (``--threads 1``) and run
   again on a quieter machine.
2. Compile time (first call, including Dynamo tracing, partitioning and lowering) per batch size.
3. The NPU coverage of every standard model (node count and FLOPs).

Writes ``benchmark.json`` and ``latency.png`` under ``--out``. Uses the implementation ``LABKIT_IMPL``
selects (the nox session defaults to the reference solution).
"""

from __future__ import annotations

import time

import torch

from lab02_npu_backend.given.models import STANDARD_MODELS, build_model
from labkit.bench import (
    Timing,
    apply_threads,
    bar_chart,
    benchmark_parser,
    machine_info,
    paired_ratio,
    print_table,
    progress,
    time_interleaved,
    verdict,
    write_json,
)
from labkit.impl import load_lab, selected_impl
from labkit.unfinished import finish_steps_first

PACKAGE = "lab02_npu_backend"
LATENCY_TARGET = 1.5
SEQ = 64
BATCHES = (1, 8)
#: Timed rounds by default: each takes ~5 ms at batch 1 and ~40 ms at batch 8 on 2 cores.
DEFAULT_REPEATS = 100


def latency_verdict(eager: Timing, npu: Timing) -> str:
    """Is the simulator within :data:`LATENCY_TARGET` times eager, beyond the noise of these rounds?"""
    return verdict(paired_ratio(npu, eager), LATENCY_TARGET, at_least=False)


def measure_latency(lab, batch: int, repeats: int) -> dict:
    """Compile LLaMA-tiny at ``batch`` and time it against eager (interleaved rounds)."""
    case = build_model("llama-tiny", batch=batch, seq=SEQ)
    torch._dynamo.reset()
    with torch.no_grad():
        start = time.perf_counter()
        compiled = torch.compile(case.model, backend=lab.npu_backend)
        compiled(*case.example_inputs)
        compile_s = time.perf_counter() - start
        timings = time_interleaved(
            {"eager": lambda: case.model(*case.example_inputs),
             "npu_simulator": lambda: compiled(*case.example_inputs)},
            repeats=repeats, description=f"timing batch {batch}",
        )  # fmt: skip
    eager, npu = timings["eager"], timings["npu_simulator"]
    return {"eager": eager, "npu_simulator": npu, "ratio": paired_ratio(npu, eager),
            "verdict": latency_verdict(eager, npu), "compile_s": compile_s}  # fmt: skip


def measure_coverage(lab) -> dict[str, dict]:
    """Every standard model's partition report (one Dynamo explain + compile each)."""
    coverage = {}
    with progress("coverage (explain + compile)", len(STANDARD_MODELS), unit="models") as advance:
        for name in STANDARD_MODELS:
            case = build_model(name)
            start = time.perf_counter()
            report = lab.partition_report(case.model, *case.example_inputs, name=name)
            coverage[name] = {"report": report, "seconds": time.perf_counter() - start}
            advance()
    return coverage


def print_latency(latency: dict[int, dict], repeats: int) -> None:
    rows = [[f"llama-tiny b{batch} s{SEQ}", entry["eager"].describe(), entry["npu_simulator"].describe(),
             entry["ratio"].describe(), f"{entry['npu_simulator'].min_s / entry['eager'].min_s:.3f}x",
             entry["verdict"], entry["compile_s"]] for batch, entry in latency.items()]  # fmt: skip
    print_table(
        f"LLaMA-tiny latency ({repeats} interleaved rounds: median [interquartile range])",
        ["case", "eager", "npu_simulator", "npu / eager", "by minimums", f"<= {LATENCY_TARGET}x", "compile s"],
        rows,
    )


def print_coverage(coverage: dict[str, dict]) -> None:
    rows = []
    for name, entry in coverage.items():
        report = entry["report"]
        fallback = sorted({d.op for d in report.fallbacks})
        rows.append([name, report.total_nodes, report.npu_nodes, f"{report.npu_fraction:.1%}",
                     f"{report.npu_flop_fraction:.1%}", report.num_partitions, len(report.graph_breaks),
                     ", ".join(fallback) or "-", entry["seconds"]])  # fmt: skip
    print_table("NPU coverage (torch-level graphs)", ["model", "nodes", "NPU", "NPU % nodes", "NPU % FLOPs",
                                                     "partitions", "breaks", "CPU fallback ops", "explain+compile s"],
                rows)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__.splitlines()[0], "results/lab02", __spec__.name)
    parser.set_defaults(repeats=DEFAULT_REPEATS)  # calls take milliseconds: many rounds cost little
    args = parser.parse_args(argv)
    apply_threads(args.threads)
    with finish_steps_first(PACKAGE, "the NPU benchmark"):
        return measure(args, load_lab(PACKAGE))


def measure(args, lab) -> int:
    """Time and cover the models, write the JSON and the chart."""
    started = time.perf_counter()
    print(f"npu_simulator benchmark ({selected_impl()} implementation), {machine_info()}", flush=True)

    latency = {batch: measure_latency(lab, batch, args.repeats) for batch in BATCHES}
    print_latency(latency, args.repeats)
    coverage = measure_coverage(lab)
    print_coverage(coverage)

    wall_s = time.perf_counter() - started
    json_path = write_json(args.out / "benchmark.json", {
        "impl": selected_impl(), "latency_target": LATENCY_TARGET, "seq": SEQ, "wall_s": wall_s,
        "latency": {f"batch{batch}": entry for batch, entry in latency.items()},
        "coverage": {name: entry["report"].to_dict() | {"report_s": entry["seconds"]}
                     for name, entry in coverage.items()},
    })  # fmt: skip
    ratios = [latency[batch]["ratio"] for batch in BATCHES]
    png = bar_chart(args.out / "latency.png", [f"batch {batch}" for batch in BATCHES], [r.median for r in ratios],
                    spread=[(r.q1, r.q3) for r in ratios], target=LATENCY_TARGET, target_label="target (at most)",
                    ylabel="npu_simulator / eager latency",
                    title=f"LLaMA-tiny, seq {SEQ}: simulator cost over eager")  # fmt: skip
    print(f"wrote {json_path} and {png} ({wall_s:.0f} s in all)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
