"""ResNet-50 on CPU: the lab's pass pipeline against PyTorch's own FX optimisers.

    python -m lab01_fx_passes.given.benchmark             # default: about 3 min on 2 cores (256 images)
    python -m lab01_fx_passes.given.benchmark --full      # the spec's 1,000 images, 20 rounds: ~6 min
    python -m lab01_fx_passes.given.benchmark --quick     # smoke run: 32 images, 5 rounds, ~1 min (--no-inductor: less)
    python -m lab01_fx_passes.given.benchmark --data DIR --weights FILE   # real ImageNet val + weights
    LABKIT_IMPL=student python -m lab01_fx_passes.given.benchmark        # your pipeline (nox: the reference)

Candidates (all in eval mode, under ``torch.no_grad``, the same thread count):

- ``original``: the eager ``nn.Module``;
- ``lab pipeline``: ``symbolic_trace`` + the lab's ``default_pipeline`` (student's or reference,
  chosen by ``LABKIT_IMPL``), validated on two images while it runs;
- ``fx.fuse``: ``torch.fx.experimental.optimization.fuse`` (Conv+BN folding only);
- ``optimize_for_inference``: the same module's TorchScript + oneDNN optimiser;
- ``pipeline + oneDNN``: the optional extension (step 10), ``onednn_pipeline``: the lab pipeline,
  then Conv(+ReLU, +add) lowered to oneDNN's fused, pre-packed convolution. Left out, with a line
  saying so, while step 10 is not done. Lowered once per timed batch size, on that many images:
  oneDNN picks a packed weight's layout for the input size it is shown, and at another size it may
  reorder the weight again on every call (the handout measures it), so a server packs per shape it
  serves (:class:`PackedPerBatchSize`), as Inductor below compiles per shape.
- ``inductor (freezing)`` (``--no-inductor`` leaves it out: it compiles once per batch size, ~15 s
  each on 2 cores): ``torch.compile`` with ``torch._inductor.config.freezing`` set while it traces
  (:class:`FrozenInductor` says why the ``options`` dict is not enough), the strongest CPU anchor PyTorch ships:
  parameters become constants, Inductor's own passes fold BN and pre-pack the convolutions
  (``torch/_inductor/fx_passes/mkldnn_fusion.py``), then it generates C++ for everything between
  them. Compiled for every timed batch size before timing starts, so no compile is timed.

Latency: per batch size, the candidates run interleaved (A, B, C, D, A, B, ...) after warm-up
rounds (:func:`labkit.bench.time_interleaved`). Each time is the median with its interquartile range;
each speed-up is computed round by round against the original, with its interquartile range; a
target is ``met`` or ``missed`` only when that whole range is on one side of it, else
``inconclusive (noise)``.

Accuracy: every candidate's logits on the first ``--images`` images of the evaluation set against
the original's: top-1 agreement and the largest absolute logit difference (plus top-1 accuracy
with real labels). The agreement target is set on the spec's 1,000 images; a shorter run decides it
only when it already has too many disagreements for the full set to meet it.

Writes ``<out>/lab01_benchmark.json`` and ``<out>/lab01_speedup.png``; prints four tables. The targets
table also holds the extension's own: ``pipeline + oneDNN`` at least as fast as ``optimize_for_inference``,
and at least as fast as ``inductor (freezing)`` at every timed batch size.
"""

from __future__ import annotations

import argparse
import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import fx, nn
from torch.fx.experimental import optimization

from lab01_fx_passes.given.resnet_eval import CALIBRATION_SEED, build_resnet50, evaluation_batches, synthetic_images
from labkit.bench import (
    MET,
    MISSED,
    Ratio,
    Timing,
    apply_threads,
    bar_chart,
    benchmark_parser,
    finish_steps_first,
    paired_ratio,
    print_table,
    progress,
    time_interleaved,
    verdict,
    write_json,
)
from labkit.impl import load_lab, selected_impl

PACKAGE = "lab01_fx_passes"
BASELINE = "original"
PIPELINE = "lab pipeline"
OPTIMIZE_FOR_INFERENCE = "optimize_for_inference"
ONEDNN = "pipeline + oneDNN"
INDUCTOR = "inductor (freezing)"
#: The targets: speed-up of the lab pipeline at batch 8, and agreement with the original on the spec's set.
TARGET_SPEEDUP, TARGET_BATCH, TARGET_AGREEMENT, FULL_SET_IMAGES = 1.12, 8, 0.999, 1000
#: Run lengths: (images, warm-up rounds, timed rounds). Explicit options override them.
RUN_LENGTHS = {"quick": (32, 1, 5), "default": (256, 2, 12), "full": (FULL_SET_IMAGES, 3, 20)}


class PackedPerBatchSize:
    """One lowered graph per served batch size, each with its weights packed for that size.

    oneDNN packs a convolution's weight for the input size it is shown (see the handout), so a
    server lowers once per shape it serves, as ``torch.compile`` keeps one graph per shape. A batch
    size nobody packed for runs the first graph: correct, only slower.
    """

    def __init__(self, graphs: dict[int, Callable[[torch.Tensor], torch.Tensor]]) -> None:
        self.graphs = dict(graphs)
        self.fallback = self.graphs[min(self.graphs)]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.graphs.get(x.shape[0], self.fallback)(x)


def build_onednn_candidate(lab: Any, model: nn.Module, batch_sizes: Sequence[int]) -> PackedPerBatchSize | None:
    """The optional extension's candidate (``onednn_pipeline``, lowered once per batch size in
    ``batch_sizes`` on that many images), or None, said in a line, while step 10 is not done."""
    if not hasattr(lab, "onednn_pipeline"):
        print(f"  {ONEDNN}: left out (this copy of the lab has no onednn_pipeline, the optional step 10)", flush=True)
        return None
    start = time.perf_counter()
    graphs = {}
    try:
        for batch in batch_sizes:
            manager = lab.onednn_pipeline([synthetic_images(batch, CALIBRATION_SEED + 1)])
            with torch.no_grad():  # the lowering packs weights for inference only
                graphs[batch] = manager(fx.symbolic_trace(copy.deepcopy(model))).graph_module
    except NotImplementedError as error:
        print(f"  {ONEDNN}: left out (the optional step 10 is not done: {error})", flush=True)
        return None
    print(f"  {ONEDNN}: {len(manager.report)} passes, weights packed for batch sizes {list(graphs)}, "
          f"in {time.perf_counter() - start:.1f} s (with validation)", flush=True)  # fmt: skip
    return PackedPerBatchSize(graphs)


class FrozenInductor:
    """``torch.compile(model, dynamic=False)`` called with Inductor's ``freezing`` switched on.

    Freezing is decided while Dynamo traces: it turns parameters into graph constants only when
    ``torch._inductor.config.freezing`` is set and grad mode is off at that moment
    (``torch._dynamo.utils.is_parameter_freezing``). ``torch.compile(..., options={"freezing": True})``
    reaches Inductor only after the trace, with the parameters already graph inputs: nothing is
    frozen, no weight is pre-packed, and no error says so (this candidate was built that way once,
    and ran as a plain Inductor compile). A new batch size traces again, so the switch is on at every
    call, not only the first.
    """

    def __init__(self, model: nn.Module) -> None:
        self.compiled = torch.compile(model, dynamic=False)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        with torch._inductor.config.patch(freezing=True), torch.no_grad():  # freezing: inference graphs only
            return self.compiled(x)


def build_inductor_candidate(
    model: nn.Module, batch_sizes: Sequence[int], image_shape: Sequence[int] = (3, 224, 224)
) -> FrozenInductor:
    """Inductor with freezing, compiled for each of ``batch_sizes`` (one graph per size, as a server
    compiles the sizes it serves) so that no compile is timed."""
    compiled = FrozenInductor(copy.deepcopy(model))
    start = time.perf_counter()
    for batch in batch_sizes:
        compiled(torch.randn(batch, *image_shape))
    print(f"  {INDUCTOR}: compiled for batch sizes {list(batch_sizes)} in {time.perf_counter() - start:.1f} s")
    return compiled


def build_candidates(
    model: nn.Module, example: torch.Tensor, batch_sizes: Sequence[int], inductor: bool = False
) -> tuple[dict[str, Callable[[torch.Tensor], torch.Tensor]], list[Any]]:
    """The models to compare (four, five with the extension, one more with ``inductor``), and the lab
    pipeline's per-pass report. The extension's lowering and Inductor are specialised to each of
    ``batch_sizes``, the sizes the benchmark times."""
    lab = load_lab(PACKAGE)
    print(f"building candidates (lab implementation: {selected_impl()})", flush=True)
    manager = lab.default_pipeline([example])
    start = time.perf_counter()
    result = manager(fx.symbolic_trace(copy.deepcopy(model)))
    print(f"  lab pipeline: {len(manager.report)} passes in {time.perf_counter() - start:.1f} s (with validation)")
    start = time.perf_counter()
    with torch.no_grad():
        fused = optimization.fuse(model)
        optimized = optimization.optimize_for_inference(model)
    print(f"  fx.fuse and optimize_for_inference: {time.perf_counter() - start:.1f} s", flush=True)
    candidates = {BASELINE: model, PIPELINE: result.graph_module, "fx.fuse": fused, OPTIMIZE_FOR_INFERENCE: optimized}
    lowered = build_onednn_candidate(lab, model, batch_sizes)
    if lowered is not None:
        candidates[ONEDNN] = lowered
    if inductor:
        candidates[INDUCTOR] = build_inductor_candidate(model, batch_sizes)
    return candidates, manager.report


def _runner(module: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> Callable[[], torch.Tensor]:
    def run() -> torch.Tensor:
        with torch.no_grad():
            return module(x)

    return run


def measure_latency(
    candidates: dict[str, Any], batch_sizes: Sequence[int], warmup: int, repeats: int
) -> dict[int, dict[str, Timing]]:
    """Every candidate's timings at every batch size (interleaved rounds)."""
    timings = {}
    for batch in batch_sizes:
        x = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(batch))
        runs = {name: _runner(module, x) for name, module in candidates.items()}
        timings[batch] = time_interleaved(runs, warmup=warmup, repeats=repeats, description=f"timing batch {batch}")
    return timings


def speedups(timings: dict[int, dict[str, Timing]]) -> dict[int, dict[str, Ratio]]:
    """Each candidate's speed-up over the original, round by round, per batch size."""
    return {
        batch: {name: paired_ratio(per[BASELINE], timing) for name, timing in per.items()}
        for batch, per in timings.items()
    }


def measure_accuracy(
    candidates: dict[str, Any], images: int, batch_size: int, data: Path | None
) -> tuple[dict[str, dict], dict[str, Any]]:
    """Per candidate: top-1 agreement with the original, max |logit difference|, top-1 accuracy (with labels).

    Also describes the evaluation set as the original model sees it (how many distinct classes it
    predicts, its median top-1 margin): agreement means little when every image gets one class.
    """
    stats = {name: {"disagree": 0, "max_logit_deviation": 0.0, "correct": 0} for name in candidates}
    classes: set[int] = set()
    margins: list[torch.Tensor] = []
    seen, labelled = 0, False
    with progress(f"accuracy ({len(candidates)} candidates)", images, unit="images") as advance:
        for x, labels in evaluation_batches(images, batch_size, data):
            with torch.no_grad():
                reference = candidates[BASELINE](x)
                top2 = reference.topk(2, dim=1).values
                margins.append(top2[:, 0] - top2[:, 1])
                classes.update(reference.argmax(1).tolist())
                for name, module in candidates.items():
                    logits = reference if name == BASELINE else module(x)
                    entry = stats[name]
                    entry["disagree"] += int((logits.argmax(1) != reference.argmax(1)).sum())
                    deviation = (logits - reference).abs().max().item()
                    entry["max_logit_deviation"] = max(entry["max_logit_deviation"], deviation)
                    if labels is not None:
                        labelled = True
                        entry["correct"] += int((logits.argmax(1) == labels).sum())
            seen += len(x)
            advance(len(x))
    per_candidate = {
        name: {
            "images": seen,
            "disagreements": entry["disagree"],
            "top1_agreement": 1 - entry["disagree"] / seen,
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


def agreement_verdict(disagreements: int, images: int) -> str:
    """The agreement target (>= 99.9% on the spec's 1,000 images), decided only when it can be.

    The evaluation set's first ``images`` images are part of the full set, so the full set has at
    least ``disagreements`` of them: more than it allows means ``missed`` whatever the rest holds.
    Otherwise a shorter run cannot decide.
    """
    allowed = math.floor((1 - TARGET_AGREEMENT) * FULL_SET_IMAGES + 1e-9)
    if disagreements > allowed:
        return MISSED
    if images >= FULL_SET_IMAGES:
        return MET if disagreements <= math.floor((1 - TARGET_AGREEMENT) * images + 1e-9) else MISSED
    return f"inconclusive ({images} of the {FULL_SET_IMAGES} images: --full decides)"


@dataclass(frozen=True)
class Target:
    """One target and what this run says about it."""

    name: str
    measured: str
    verdict: str


def check_targets(timings: dict[int, dict[str, Timing]], accuracy: dict[str, dict]) -> list[Target]:
    """The lab's targets, each with its measured value and a verdict the noise cannot flip."""
    targets = []
    if TARGET_BATCH in timings:
        batch = timings[TARGET_BATCH]
        speedup = paired_ratio(batch[BASELINE], batch[PIPELINE])
        targets.append(Target(f"pipeline speed-up at batch {TARGET_BATCH} >= {TARGET_SPEEDUP}x",
                              speedup.describe(), verdict(speedup, TARGET_SPEEDUP, at_least=True)))  # fmt: skip
        for name in (PIPELINE, ONEDNN):
            if OPTIMIZE_FOR_INFERENCE in batch and name in batch:
                versus = paired_ratio(batch[OPTIMIZE_FOR_INFERENCE], batch[name])  # > 1: the candidate is faster
                targets.append(Target(f"{name} at least as fast as {OPTIMIZE_FOR_INFERENCE} (batch {TARGET_BATCH})",
                                      versus.describe(), verdict(versus, 1.0, at_least=True)))  # fmt: skip
    for batch_size, batch in sorted(timings.items()):
        if INDUCTOR in batch and ONEDNN in batch:
            versus = paired_ratio(batch[INDUCTOR], batch[ONEDNN])  # > 1: the lowering is faster
            targets.append(Target(f"{ONEDNN} at least as fast as {INDUCTOR} (batch {batch_size})",
                                  versus.describe(), verdict(versus, 1.0, at_least=True)))  # fmt: skip
    if PIPELINE in accuracy:
        pipeline = accuracy[PIPELINE]
        targets.append(Target(
            f"top-1 agreement >= {TARGET_AGREEMENT:.1%} ({FULL_SET_IMAGES} images)",
            f"{pipeline['top1_agreement']:.2%} ({pipeline['disagreements']} of {pipeline['images']} differ)",
            agreement_verdict(pipeline["disagreements"], pipeline["images"]),
        ))  # fmt: skip
    return targets


def print_pass_table(pass_report: Sequence[Any], logit_scale: float) -> None:
    """What each pass did, and how far it moved the logits on the validation images.

    The change is shown absolute and relative to the largest logit: a relative error taken element
    by element means nothing next to logits that are almost zero. Every semantics-preserving pass
    of a pipeline that ran to the end stayed within the pass manager's float32 budget (it raises
    otherwise).
    """

    def check(report: Any) -> str:
        if not report.modified:
            reason = getattr(report, "reason", None)
            return f"unchanged: {reason}" if reason else "unchanged (no reason given)"
        if report.max_abs_error is None:
            return "not validated (no example inputs)"
        return "declared change" if report.changes_semantics else "within float32 budget"

    rows = [
        (r.name, f"{r.nodes_before} -> {r.nodes_after}", r.seconds * 1e3,
         "-" if r.max_abs_error is None else f"{r.max_abs_error:.2e}",
         "-" if r.max_abs_error is None else f"{r.max_abs_error / logit_scale:.1e}", check(r))
        for r in pass_report
    ]  # fmt: skip
    print_table(
        f"Lab pipeline, pass by pass (validated on 2 images; largest |logit| {logit_scale:.3g})",
        ["pass", "nodes", "time (ms)", "max |change|", "/ max |logit|", "check"],
        rows,
    )


def print_latency_table(timings: dict[int, dict[str, Timing]]) -> None:
    rows = []
    for batch, per in timings.items():
        for name, timing in per.items():
            speedup = "(baseline)" if name == BASELINE else paired_ratio(per[BASELINE], timing).describe()
            rows.append((batch, name, timing.describe("ms"), timing.min_s * 1e3, speedup))
    rounds = next(iter(next(iter(timings.values())).values())).repeats
    print_table(
        f"ResNet-50 latency, CPU ({rounds} interleaved rounds: median [interquartile range])",
        ["batch", "candidate", "ms", "min ms", "speed-up vs original"],
        rows,
    )


def print_accuracy_table(accuracy: dict[str, dict], evaluation_set: dict[str, Any]) -> None:
    print_table(
        f"Accuracy against the original model ({evaluation_set['images']} images; the original predicts "
        f"{evaluation_set['distinct_top1_classes']} distinct classes, median top-1 margin "
        f"{evaluation_set['median_top1_margin']:.3g})",
        ["candidate", "top-1 agreement", "images that differ", "max |logit diff|", "top-1 accuracy"],
        [(name, f"{a['top1_agreement']:.2%}", a["disagreements"], a["max_logit_deviation"],
          "-" if a["top1_accuracy"] is None else f"{a['top1_accuracy']:.2%}") for name, a in accuracy.items()],
    )  # fmt: skip


def print_targets(targets: Sequence[Target]) -> None:
    print_table("Targets (met / missed only when the noise cannot flip the answer)", ["target", "measured", "verdict"],
                [(t.name, t.measured, t.verdict) for t in targets])  # fmt: skip


def speedup_chart(path: Path, timings: dict[int, dict[str, Timing]]) -> Path:
    """Speed-ups over the original with their interquartile ranges, and the target line."""
    labels, values, spread = [], [], []
    for batch, per in timings.items():
        for name, timing in per.items():
            if name == BASELINE:
                continue
            ratio = paired_ratio(per[BASELINE], timing)
            labels.append(f"{name}\nb={batch}")
            values.append(ratio.median)
            spread.append((ratio.q1, ratio.q3))
    return bar_chart(path, labels, values, spread=spread, target=TARGET_SPEEDUP,
                     target_label=f"target at batch {TARGET_BATCH}", ylabel="speed-up vs original",
                     title="ResNet-50 on CPU")  # fmt: skip


def parse_arguments(argv: Sequence[str] | None):
    parser = benchmark_parser(__doc__.split("\n\n")[0], "results/lab01", __spec__.name)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8], help="latency batch sizes")
    length = parser.add_mutually_exclusive_group()
    length.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: %d images, %d warm-up and %d timed rounds" % RUN_LENGTHS["quick"],
    )
    length.add_argument(
        "--full",
        action="store_true",
        help="the spec's run: %d images, %d warm-up and %d timed rounds (~5 min on 2 cores)" % RUN_LENGTHS["full"],
    )
    parser.add_argument(
        "--images", type=int, default=None, help="images in the accuracy set (default %d)" % RUN_LENGTHS["default"][0]
    )
    parser.add_argument(
        "--warmup", type=int, default=None, help="untimed rounds before timing (default %d)" % RUN_LENGTHS["default"][1]
    )
    parser.add_argument("--accuracy-batch", type=int, default=16, help="batch size of the accuracy pass")
    parser.add_argument("--data", type=Path, default=None, help="ImageNet validation folder (ImageFolder layout)")
    parser.add_argument("--weights", type=Path, default=None, help="ResNet-50 state_dict file")
    parser.add_argument(
        "--inductor",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time torch.compile with Inductor's freezing too, the strongest anchor (compiles once per batch size, "
        "~15 s each on 2 cores; --no-inductor leaves it out)",
    )
    parser.set_defaults(repeats=None)
    args = parser.parse_args(argv)
    if (args.data is None) != (args.weights is None):
        parser.error("--data and --weights go together (a real validation set needs trained weights)")
    # Explicit options win over the run length's defaults.
    images, warmup, repeats = RUN_LENGTHS["quick" if args.quick else "full" if args.full else "default"]
    for option, value in {"images": images, "warmup": warmup, "repeats": repeats}.items():
        if getattr(args, option) is None:
            setattr(args, option, value)
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_arguments(argv)
    apply_threads(args.threads)
    started = time.perf_counter()
    print(f"ResNet-50, {'ImageNet ' + str(args.data) if args.data else 'synthetic images, seeded random weights'}; "
          f"{torch.get_num_threads()} threads; {args.images} images, "
          f"{args.warmup} warm-up + {args.repeats} timed rounds",
          flush=True)  # fmt: skip

    with finish_steps_first(PACKAGE, "the benchmark's default_pipeline"):
        load_lab(PACKAGE).default_pipeline(None)  # fails fast on an unfinished lab, before building ResNet-50
    model = build_resnet50(args.weights)
    example = synthetic_images(2, CALIBRATION_SEED + 1)
    with torch.no_grad():
        logit_scale = model(example).abs().max().item()
    with finish_steps_first(PACKAGE, "the benchmark's default_pipeline"):
        candidates, pass_report = build_candidates(model, example, args.batch_sizes, args.inductor)
    print_pass_table(pass_report, logit_scale)
    timings = measure_latency(candidates, args.batch_sizes, args.warmup, args.repeats)
    print_latency_table(timings)
    accuracy, evaluation_set = measure_accuracy(candidates, args.images, args.accuracy_batch, args.data)
    print_accuracy_table(accuracy, evaluation_set)
    targets = check_targets(timings, accuracy)
    print_targets(targets)

    payload = {
        "implementation": selected_impl(),
        "data": str(args.data) if args.data else "synthetic",
        "images": args.images,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "latency": {str(batch): per for batch, per in timings.items()},
        "speedup": {str(batch): ratios for batch, ratios in speedups(timings).items()},
        "accuracy": accuracy,
        "evaluation_set": evaluation_set,
        "passes": pass_report,
        "logit_scale": logit_scale,
        "targets": targets,
        "wall_s": time.perf_counter() - started,
    }
    json_path = write_json(args.out / "lab01_benchmark.json", payload)
    png_path = speedup_chart(args.out / "lab01_speedup.png", timings)
    print(f"wrote {json_path} and {png_path} ({payload['wall_s']:.0f} s in all)")
    return payload


if __name__ == "__main__":
    main()
