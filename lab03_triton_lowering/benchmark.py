"""Benchmark: ``python -m lab03_triton_lowering.benchmark`` (``nox -s bench-lab03``; needs a CUDA GPU).

For LayerNorm -> GELU at the spec's shape (batch 32, seq 2048, d 4096) and a sweep of d
(1024 .. 16384, same 65536 rows), four candidates:

- ``eager``: ``F.gelu(F.layer_norm(x))``, two kernels, four passes over memory;
- ``torch.compile``: Inductor's own fused kernel for the same function (``dynamic=False``);
- ``fused kernel``: the lab's ``layernorm_gelu`` called directly;
- ``compile + lowering``: ``torch.compile`` with the lab's lowering installed (the kernel chosen by Inductor).

Each is timed with ``triton.testing.do_bench`` (CUDA events, L2 flushed between runs, median).
GB/s is *effective* bandwidth: the bytes a perfect kernel must move (read x, write y, read the
affine parameters) over the time; the device-to-device copy of x is the practical ceiling.
Targets: >= 1.8x over eager, at least parity with torch.compile, >= 80% of copy bandwidth at the
spec shape. Writes ``benchmark.json``, ``spec_latency.png`` and ``sweep_speedup.png`` under ``--out``.

Without CUDA it says so and exits 0: Triton's interpreter is a correctness tool, not a benchmark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch._inductor import config as inductor_config

from labkit.bench import apply_threads, bar_chart, benchmark_parser, machine_info, print_table, write_json
from labkit.impl import load_lab, selected_impl

PACKAGE = "lab03_triton_lowering"
#: The spec's target shape: (batch, seq, d_model).
SPEC_SHAPE = (32, 2048, 4096)
#: Row lengths of the sweep (rows fixed at batch * seq of the spec shape).
SWEEP_D = (1024, 2048, 4096, 8192, 12288, 16384)
CANDIDATES = ("eager", "torch.compile", "fused kernel", "compile + lowering")
TARGET_SPEEDUP_OVER_EAGER = 1.8
TARGET_COPY_FRACTION = 0.8


def sequential(x, weight=None, bias=None, eps: float = 1e-5, approximate: str = "none"):
    """The unfused baseline: PyTorch's LayerNorm kernel, then its GELU kernel."""
    return F.gelu(F.layer_norm(x, (x.shape[-1],), weight, bias, eps), approximate=approximate)


def median_ms(fn: Callable[[], object]) -> float:
    """Median time of ``fn`` in milliseconds, with ``triton.testing.do_bench`` (GPU only)."""
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def ideal_bytes(x: torch.Tensor) -> int:
    """Bytes a perfect fused kernel moves: read x once, write y once, read weight and bias."""
    return 2 * x.numel() * x.element_size() + 2 * x.shape[-1] * x.element_size()


@dataclass(frozen=True)
class Measurement:
    """One candidate at one shape."""

    d: int
    candidate: str
    ms: float
    gbps: float
    speedup_over_eager: float


def measure_shape(
    lab, shape: tuple[int, ...], dtype: torch.dtype, timer: Callable = median_ms, device: str = "cuda"
) -> tuple[list[Measurement], float]:
    """Time every candidate at ``shape``; returns the measurements and the copy bandwidth (GB/s)."""
    generator = torch.Generator(device=device).manual_seed(0)
    d = shape[-1]
    x = torch.randn(shape, device=device, dtype=dtype, generator=generator)
    weight = torch.rand(d, device=device, dtype=dtype, generator=generator) + 0.5
    bias = torch.rand(d, device=device, dtype=dtype, generator=generator) - 0.5

    torch._dynamo.reset()  # Dynamo caches per code object: start each shape from scratch
    compiled = torch.compile(sequential, dynamic=False)
    compiled(x, weight, bias)

    def lowered_fn(x, weight, bias):  # its own code object, so Dynamo compiles it anew
        return sequential(x, weight, bias)

    handle = lab.install_lowering()
    try:
        lowered = torch.compile(lowered_fn, dynamic=False)
        with inductor_config.patch(fx_graph_cache=False):  # a cached graph would skip the pass
            lowered(x, weight, bias)  # compiled now, while the lowering is installed
    finally:
        lab.uninstall_lowering()
    if handle.replacements != 1:
        print(f"  warning: the lowering replaced {handle.replacements} sites at d={d} (expected 1)")

    runs = {
        "eager": lambda: sequential(x, weight, bias),
        "torch.compile": lambda: compiled(x, weight, bias),
        "fused kernel": lambda: lab.layernorm_gelu(x, weight, bias),
        "compile + lowering": lambda: lowered(x, weight, bias),
    }
    times = {name: timer(run) for name, run in runs.items()}
    copy_ms = timer(lambda: torch.empty_like(x).copy_(x))
    moved = ideal_bytes(x)
    measurements = [
        Measurement(d, name, ms, moved / ms / 1e6, times["eager"] / ms) for name, ms in times.items()
    ]
    return measurements, 2 * x.numel() * x.element_size() / copy_ms / 1e6


def report(measurements: list[Measurement], copy_gbps: dict[int, float], *, rows: int, dtype: str, out: Path) -> None:
    """Print the table and the target checks; write the JSON and the two charts under ``out``."""
    measurements.sort(key=lambda m: (m.d, CANDIDATES.index(m.candidate)))

    print_table(
        f"LayerNorm -> GELU, {rows} rows, {dtype} (do_bench median)",
        ["d", "candidate", "ms", "GB/s", "x eager", "% of copy"],
        [[m.d, m.candidate, m.ms, m.gbps, m.speedup_over_eager, f"{m.gbps / copy_gbps[m.d]:.0%}"] for m in measurements],
    )
    spec = {m.candidate: m for m in measurements if m.d == SPEC_SHAPE[-1]}
    fused = spec["fused kernel"]
    checks = {
        f">= {TARGET_SPEEDUP_OVER_EAGER}x over eager": fused.speedup_over_eager >= TARGET_SPEEDUP_OVER_EAGER,
        "parity with torch.compile": fused.ms <= spec["torch.compile"].ms * 1.05,
        f">= {TARGET_COPY_FRACTION:.0%} of copy bandwidth": fused.gbps >= TARGET_COPY_FRACTION * copy_gbps[fused.d],
        "spec's graded bar: > 1.2x over eager": fused.speedup_over_eager > 1.2,
    }
    for name, met in checks.items():
        print(f"  {'met ' if met else 'MISS'}  {name}")

    json_path = write_json(
        out / "benchmark.json",
        {"impl": selected_impl(), "dtype": dtype, "spec_shape": SPEC_SHAPE, "rows": rows,
         "copy_gbps": copy_gbps, "measurements": measurements, "targets_met": checks},
    )
    spec_png = bar_chart(out / "spec_latency.png", list(CANDIDATES), [spec[c].ms for c in CANDIDATES],
                         ylabel="median latency (ms)", title=f"LayerNorm->GELU {list(SPEC_SHAPE)} {dtype}")
    sweep = [m for m in measurements if m.candidate == "fused kernel"]
    sweep_png = bar_chart(out / "sweep_speedup.png", [f"d={m.d}" for m in sweep],
                          [m.speedup_over_eager for m in sweep], ylabel="speedup over eager (x)",
                          title=f"fused kernel vs eager, {rows} rows, {dtype}")
    print(f"wrote {json_path}, {spec_png} and {sweep_png}")


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__.splitlines()[0], "results/lab03")
    parser.add_argument("--dtype", choices=("float16", "bfloat16", "float32"), default="float16")
    parser.add_argument("--quick", action="store_true", help="the spec shape only, no sweep")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print(
            "No CUDA device: lab 3's benchmark times GPU kernels, and Triton's interpreter (what runs the "
            "kernel on CPU) is a correctness tool, not a benchmark. Nothing measured. "
            "Run `nox -s gpu` or `nox -s bench-lab03` on a machine with an NVIDIA GPU."
        )
        return 0
    apply_threads(args.threads)
    lab = load_lab(PACKAGE)
    dtype = getattr(torch, args.dtype)
    rows = SPEC_SHAPE[0] * SPEC_SHAPE[1]
    shapes = [SPEC_SHAPE] + ([] if args.quick else [(rows, d) for d in SWEEP_D if d != SPEC_SHAPE[-1]])
    print(f"LayerNorm+GELU benchmark ({selected_impl()} implementation, {args.dtype}), {machine_info()}", flush=True)

    measurements: list[Measurement] = []
    copy_gbps: dict[int, float] = {}
    with torch.no_grad():
        for shape in shapes:
            found, copy_gbps[shape[-1]] = measure_shape(lab, shape, dtype)
            measurements += found
            fused = next(m for m in found if m.candidate == "fused kernel")
            print(f"  d={shape[-1]}: fused {fused.ms:.3f} ms, {fused.speedup_over_eager:.2f}x over eager", flush=True)
    report(measurements, copy_gbps, rows=rows, dtype=args.dtype, out=args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
