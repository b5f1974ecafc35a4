"""ResNet-50 on CPU: the lab's pass pipeline against PyTorch's own FX optimisers.

    python -m lab01_fx_passes.benchmark                 # 1,000 synthetic images, batch 1 and 8
    python -m lab01_fx_passes.benchmark --quick         # a smoke run: 64 images, 3 repeats
    python -m lab01_fx_passes.benchmark --data DIR --weights FILE   # real ImageNet val + weights
    LABKIT_IMPL=solution python -m lab01_fx_passes.benchmark        # the reference pipeline

Candidates (all in eval mode, under ``torch.no_grad``, the same thread count):

- ``original``: the eager ``nn.Module``;
- ``lab pipeline``: ``symbolic_trace`` + the lab's ``default_pipeline`` (student's or reference,
  chosen by ``LABKIT_IMPL``), validated on two images while it runs;
- ``fx.fuse``: ``torch.fx.experimental.optimization.fuse`` (Conv+BN folding only);
- ``optimize_for_inference``: the same module's TorchScript + oneDNN optimiser.

Latency: per batch size, the candidates run interleaved (A, B, C, D, A, B, ...) after warm-up
rounds; the median of the timed rounds is reported (``labkit.bench.time_interleaved``).
Accuracy: every candidate's logits on the evaluation set against the original's: top-1
agreement and the largest absolute logit difference (plus top-1 accuracy with real labels).

Writes ``<out>/lab01_benchmark.json`` and ``<out>/lab01_speedup.png``; prints three tables.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import fx, nn
from torch.fx.experimental import optimization

from labkit.bench import apply_threads, bar_chart, benchmark_parser, print_table, time_interleaved, write_json
from labkit.impl import load_lab, selected_impl
from lab01_fx_passes.resnet_eval import CALIBRATION_SEED, build_resnet50, evaluation_batches, synthetic_images

PACKAGE = "lab01_fx_passes"
BASELINE = "original"
PIPELINE = "lab pipeline"
#: The issue's targets: speed-up of the lab pipeline at batch 8, and agreement with the original.
TARGET_SPEEDUP, TARGET_BATCH, TARGET_AGREEMENT = 1.12, 8, 0.999


def build_candidates(model: nn.Module, example: torch.Tensor) -> tuple[dict[str, nn.Module], list[Any]]:
    """The four models to compare, and the lab pipeline's per-pass report."""
    lab = load_lab(PACKAGE)
    print(f"building candidates (lab implementation: {selected_impl()})")
    manager = lab.default_pipeline([example])
    start = time.perf_counter()
    result = manager(fx.symbolic_trace(copy.deepcopy(model)))
    print(f"  lab pipeline: {len(manager.report)} passes in {time.perf_counter() - start:.1f} s (with validation)")
    with torch.no_grad():
        fused = optimization.fuse(model)
        optimized = optimization.optimize_for_inference(model)
    candidates = {BASELINE: model, PIPELINE: result.graph_module, "fx.fuse": fused, "optimize_for_inference": optimized}
    return candidates, manager.report


def _runner(module: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> Callable[[], torch.Tensor]:
    def run() -> torch.Tensor:
        with torch.no_grad():
            return module(x)

    return run


def measure_latency(
    candidates: dict[str, Any], batch_sizes: Sequence[int], warmup: int, repeats: int
) -> dict[int, dict[str, Any]]:
    """Median latency of every candidate at every batch size (interleaved rounds)."""
    timings = {}
    for batch in batch_sizes:
        x = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(batch))
        print(f"timing batch {batch}: {warmup} warm-up + {repeats} timed rounds of {len(candidates)} candidates")
        timings[batch] = time_interleaved(
            {name: _runner(module, x) for name, module in candidates.items()}, warmup=warmup, repeats=repeats
        )
    return timings


def measure_accuracy(
    candidates: dict[str, Any], images: int, batch_size: int, data: Path | None
) -> tuple[dict[str, dict], dict[str, Any]]:
    """Per candidate: top-1 agreement with the original, max |logit difference|, top-1 accuracy (with labels).

    Also describes the evaluation set as the original model sees it (how many distinct classes it
    predicts, its median top-1 margin): agreement means little when every image gets one class.
    """
    stats = {name: {"agree": 0, "max_logit_deviation": 0.0, "correct": 0} for name in candidates}
    classes: set[int] = set()
    margins: list[torch.Tensor] = []
    seen, labelled, start = 0, False, time.perf_counter()
    for x, labels in evaluation_batches(images, batch_size, data):
        with torch.no_grad():
            reference = candidates[BASELINE](x)
            top2 = reference.topk(2, dim=1).values
            margins.append(top2[:, 0] - top2[:, 1])
            classes.update(reference.argmax(1).tolist())
            for name, module in candidates.items():
                logits = reference if name == BASELINE else module(x)
                entry = stats[name]
                entry["agree"] += int((logits.argmax(1) == reference.argmax(1)).sum())
                entry["max_logit_deviation"] = max(entry["max_logit_deviation"], (logits - reference).abs().max().item())
                if labels is not None:
                    labelled = True
                    entry["correct"] += int((logits.argmax(1) == labels).sum())
        seen += len(x)
        if seen % (10 * batch_size) == 0 or seen == images:
            print(f"  accuracy: {seen}/{images} images ({time.perf_counter() - start:.0f} s)")
    per_candidate = {
        name: {
            "top1_agreement": entry["agree"] / seen,
            "max_logit_deviation": entry["max_logit_deviation"],
            "top1_accuracy": entry["correct"] / seen if labelled else None,
        }
        for name, entry in stats.items()
    }
    evaluation_set = {
        "images": seen,
        "distinct_top1_classes": len(classes),
        "median_top1_margin": torch.cat(margins).median().item(),
    }
    return per_candidate, evaluation_set


def _report_tables(timings, accuracy, pass_report) -> list[str]:
    print_table(
        "Lab pipeline, pass by pass (validated on 2 images)",
        ["pass", "nodes before", "nodes after", "time (ms)", "max abs error", "max rel error", "semantics"],
        [
            (r.name, r.nodes_before, r.nodes_after, r.seconds * 1e3, r.max_abs_error if r.max_abs_error is not None else "-",
             r.max_rel_error if r.max_rel_error is not None else "-", "changed" if r.changes_semantics else "preserved")
            for r in pass_report
        ],
    )  # fmt: skip
    rows = []
    for batch, per_candidate in timings.items():
        base = per_candidate[BASELINE].median_s
        for name, timing in per_candidate.items():
            rows.append((batch, name, timing.median_s * 1e3, timing.min_s * 1e3, base / timing.median_s))
    print_table("ResNet-50 latency (CPU, median of interleaved rounds)", ["batch", "candidate", "median ms", "min ms", "speed-up"], rows)
    print_table(
        "Accuracy against the original model",
        ["candidate", "top-1 agreement", "max |logit diff|", "top-1 accuracy"],
        [(name, a["top1_agreement"], a["max_logit_deviation"], a["top1_accuracy"] if a["top1_accuracy"] is not None else "-")
         for name, a in accuracy.items()],
    )  # fmt: skip
    return _targets(timings, accuracy)


def _targets(timings, accuracy) -> list[str]:
    lines = []
    if TARGET_BATCH in timings:
        batch = timings[TARGET_BATCH]
        speedup = batch[BASELINE].median_s / batch[PIPELINE].median_s
        ofi = batch[BASELINE].median_s / batch["optimize_for_inference"].median_s
        lines.append(f"speed-up at batch {TARGET_BATCH}: {speedup:.3f}x (target >= {TARGET_SPEEDUP}x): {'met' if speedup >= TARGET_SPEEDUP else 'NOT met'}")
        lines.append(f"vs optimize_for_inference ({ofi:.3f}x): {'at least as fast' if speedup >= ofi else 'slower'}")
    agreement = accuracy[PIPELINE]["top1_agreement"]
    lines.append(f"top-1 agreement: {agreement:.2%} (target >= {TARGET_AGREEMENT:.1%}): {'met' if agreement >= TARGET_AGREEMENT else 'NOT met'}")
    for line in lines:
        print(line)
    return lines


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = benchmark_parser(__doc__.split("\n\n")[0], "results/lab01")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8], help="latency batch sizes")
    parser.add_argument("--images", type=int, default=None, help="images in the accuracy set (default 1000; 64 with --quick)")
    parser.add_argument("--accuracy-batch", type=int, default=16, help="batch size of the accuracy pass")
    parser.add_argument("--warmup", type=int, default=None, help="untimed rounds before timing (default 3; 1 with --quick)")
    parser.add_argument("--data", type=Path, default=None, help="ImageNet validation folder (ImageFolder layout)")
    parser.add_argument("--weights", type=Path, default=None, help="ResNet-50 state_dict file")
    parser.add_argument("--quick", action="store_true", help="smoke run: 64 images, 1 warm-up and 3 timed rounds")
    parser.set_defaults(repeats=None)
    args = parser.parse_args(argv)
    if (args.data is None) != (args.weights is None):
        parser.error("--data and --weights go together (a real validation set needs trained weights)")
    # Explicit options win over --quick's smaller defaults.
    quick = {"images": 64, "warmup": 1, "repeats": 3} if args.quick else {"images": 1000, "warmup": 3, "repeats": 20}
    for option, value in quick.items():
        if getattr(args, option) is None:
            setattr(args, option, value)
    apply_threads(args.threads)
    print(f"ResNet-50, {'ImageNet ' + str(args.data) if args.data else 'synthetic images, seeded random weights'}; "
          f"{torch.get_num_threads()} threads")  # fmt: skip

    model = build_resnet50(args.weights)
    candidates, pass_report = build_candidates(model, synthetic_images(2, CALIBRATION_SEED + 1))
    timings = measure_latency(candidates, args.batch_sizes, args.warmup, args.repeats)
    accuracy, evaluation_set = measure_accuracy(candidates, args.images, args.accuracy_batch, args.data)
    print(
        f"evaluation set: {evaluation_set['images']} images, the original predicts "
        f"{evaluation_set['distinct_top1_classes']} distinct classes, median top-1 margin "
        f"{evaluation_set['median_top1_margin']:.3g}"
    )
    targets = _report_tables(timings, accuracy, pass_report)

    payload = {
        "implementation": selected_impl(),
        "data": str(args.data) if args.data else "synthetic",
        "images": args.images,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "latency": {str(batch): timing for batch, timing in timings.items()},
        "speedup": {
            str(batch): {name: t[BASELINE].median_s / timing.median_s for name, timing in t.items()}
            for batch, t in timings.items()
        },
        "accuracy": accuracy,
        "evaluation_set": evaluation_set,
        "passes": pass_report,
        "targets": targets,
    }
    json_path = write_json(args.out / "lab01_benchmark.json", payload)
    labels = [f"{name}\nb={batch}" for batch in timings for name in timings[batch]]
    speedups = [payload["speedup"][str(batch)][name] for batch in timings for name in timings[batch]]
    png_path = bar_chart(args.out / "lab01_speedup.png", labels, speedups, ylabel="speed-up vs original", title="ResNet-50 on CPU")
    print(f"wrote {json_path} and {png_path}")
    return payload


if __name__ == "__main__":
    main()
