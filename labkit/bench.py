"""Shared machinery for the labs' benchmark scripts: timings with their spread, honest verdicts.

A number without its spread is not a result. Every benchmark here follows the same rules (the model
is ``torch.utils.benchmark``: ``Timer`` / ``Measurement`` / ``Compare``):

1. **Same conditions.** Candidates run with the same thread count, after warm-up rounds, and
   *interleaved* (A, B, C, A, B, C, ...): a slow moment of the machine hits every candidate alike.
2. **Every figure with its spread.** A :class:`Timing` keeps every sample; tables show the median
   and the interquartile range (the middle half of the samples), ``12.3 ms [11.9-13.0]``.
3. **Ratios from paired rounds.** A speed-up is computed round by round (A's time in round *i*
   over B's time in the same round), so a slow moment cancels out; its spread is the IQR of those
   per-round ratios (:func:`paired_ratio`). Candidates timed separately (``triton.testing.do_bench``
   on a GPU) get the conservative :func:`unpaired_ratio` instead.
4. **A verdict only when the noise cannot flip it.** :func:`verdict` says ``met`` only when the
   whole interquartile range of the ratio clears the target, ``missed`` only when it misses it
   entirely, and ``inconclusive (noise)`` otherwise: run again on a quieter machine, or with more
   rounds.
5. **Progress on long work.** :func:`progress` shows a bar on a terminal and a plain line every few
   seconds in a log, with the time left.
6. **One line for an unfinished lab.** Run on a starter, a benchmark stops at the first TODO;
   :func:`finish_steps_first` (:mod:`labkit.unfinished`, shared with the reports and checks) turns
   that ``NotImplementedError`` into one line naming the handout step to finish (as ``nox -s labNN``
   does) and exit status 3, not a traceback.

Every benchmark prints tables a person can read (:func:`print_table`), writes the same numbers as
JSON (:func:`write_json`) and saves charts with error bars and the target line (:func:`bar_chart`).

Why not ``torch.utils.benchmark`` itself: its ``Timer`` times one statement at a time (no
interleaving of candidates) and its ``Compare`` prints no verdict against a target; lab 3 times with
``triton.testing.do_bench`` on a GPU. The summaries here (:class:`Timing`) take samples from any
of them.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from labkit.unfinished import finish_steps_first  # noqa: F401 - the benchmarks' one line (rule 6)

MET, MISSED, INCONCLUSIVE = "met", "missed", "inconclusive (noise)"
#: Fewer samples than this give no verdict: four quartiles need a few points to mean anything.
MIN_SAMPLES_FOR_VERDICT = 5
#: A plain progress line (no terminal) at most this often, in seconds.
PROGRESS_LINE_EVERY_S = 10.0


def quartiles(samples: Sequence[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile) of ``samples`` (inclusive method; one sample: itself)."""
    if not samples:
        raise ValueError("quartiles of no samples")
    if len(samples) == 1:
        return samples[0], samples[0], samples[0]
    q1, median, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return q1, median, q3


@dataclass(frozen=True)
class Timing:
    """Wall-clock samples of one candidate, in seconds, and their summary.

    Attributes:
        samples_s: every timed run, in the order they ran.
    """

    samples_s: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.samples_s:
            raise ValueError("a Timing needs at least one sample")

    @classmethod
    def from_ms(cls, samples_ms: Sequence[float]) -> "Timing":
        """A Timing from samples in milliseconds (what ``triton.testing.do_bench`` returns)."""
        return cls(tuple(float(value) / 1e3 for value in samples_ms))

    @property
    def median_s(self) -> float:
        return quartiles(self.samples_s)[1]

    @property
    def q1_s(self) -> float:
        return quartiles(self.samples_s)[0]

    @property
    def q3_s(self) -> float:
        return quartiles(self.samples_s)[2]

    @property
    def iqr_s(self) -> float:
        """Interquartile range: the width of the middle half of the samples."""
        return self.q3_s - self.q1_s

    @property
    def min_s(self) -> float:
        return min(self.samples_s)

    @property
    def repeats(self) -> int:
        return len(self.samples_s)

    def describe(self, unit: str = "ms") -> str:
        """``12.3 ms [11.9-13.0]``: the median and the interquartile range."""
        scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
        q1, median, q3 = (value * scale for value in quartiles(self.samples_s))
        return f"{median:.4g} {unit} [{q1:.4g}-{q3:.4g}]"

    def to_dict(self) -> dict[str, Any]:
        """The summary and the samples, for JSON."""
        q1, median, q3 = quartiles(self.samples_s)
        return {"median_s": median, "q1_s": q1, "q3_s": q3, "min_s": self.min_s, "repeats": self.repeats,
                "samples_s": list(self.samples_s)}  # fmt: skip


@dataclass(frozen=True)
class Ratio:
    """A ratio (a speed-up, a slow-down) with its spread.

    Attributes:
        median, q1, q3: the median and the interquartile range of the ratio.
        samples: how many (paired) samples it comes from.
    """

    median: float
    q1: float
    q3: float
    samples: int

    def describe(self) -> str:
        """``1.310x [1.200-1.450]`` (three decimals, so a range that ends just short of 1 reads 0.999)."""
        return f"{_ratio_text(self.median)}x [{_ratio_text(self.q1)}-{_ratio_text(self.q3)}]"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ratio_text(value: float) -> str:
    return f"{value:.3f}" if abs(value) < 100 else f"{value:.4g}"


def paired_ratio(numerator: Timing, denominator: Timing) -> Ratio:
    """``numerator / denominator`` round by round, for timings from the same interleaved rounds.

    ``paired_ratio(original, optimized)`` is the speed-up of ``optimized``. Pairing by round cancels
    what the two share (a slow moment of the machine hits both runs of a round).

    Raises:
        ValueError: if the two timings have different numbers of samples (not from the same rounds).
    """
    if numerator.repeats != denominator.repeats:
        raise ValueError(
            f"paired_ratio needs timings from the same rounds ({numerator.repeats} vs {denominator.repeats} samples)"
        )
    q1, median, q3 = quartiles([a / b for a, b in zip(numerator.samples_s, denominator.samples_s)])
    return Ratio(median, q1, q3, numerator.repeats)


def unpaired_ratio(numerator: Timing, denominator: Timing) -> Ratio:
    """``numerator / denominator`` for candidates timed separately (no common rounds).

    The median is the ratio of the medians; the range is the widest the two interquartile ranges
    allow (``q1 / q3`` to ``q3 / q1``), so it is conservative.
    """
    return Ratio(
        numerator.median_s / denominator.median_s,
        numerator.q1_s / denominator.q3_s,
        numerator.q3_s / denominator.q1_s,
        min(numerator.repeats, denominator.repeats),
    )


def verdict(ratio: Ratio, target: float, *, at_least: bool) -> str:
    """``met`` / ``missed`` when the noise cannot flip the answer, else ``inconclusive (noise)``.

    Args:
        ratio: the measured ratio and its interquartile range.
        target: the bar.
        at_least: True when the ratio must reach the target (a speed-up >= 1.12x), False when it
            must stay under it (a slow-down <= 1.5x).

    The answer is ``met`` only when the whole interquartile range is on the right side of the
    target, ``missed`` only when it is entirely on the wrong side. With fewer than
    :data:`MIN_SAMPLES_FOR_VERDICT` samples the quartiles mean little: inconclusive.
    """
    if ratio.samples < MIN_SAMPLES_FOR_VERDICT:
        return INCONCLUSIVE
    low, high = ratio.q1, ratio.q3
    if at_least:
        return MET if low >= target else MISSED if high < target else INCONCLUSIVE
    return MET if high <= target else MISSED if low > target else INCONCLUSIVE


def time_interleaved(
    candidates: dict[str, Callable[[], Any]],
    *,
    warmup: int = 3,
    repeats: int = 20,
    clock: Callable[[], float] = time.perf_counter,
    description: str = "timing",
) -> dict[str, Timing]:
    """Time several callables in round-robin order; every sample of every candidate is kept.

    Args:
        candidates: name -> zero-argument callable (synchronise inside it if it launches GPU work).
        warmup: untimed rounds first (caches, lazy initialisation, autotuning).
        repeats: timed rounds; each round runs every candidate once, in the same order.
        clock: seconds as a float (tests inject a fake clock to control the noise).
        description: what the progress display calls this work.
    """
    if not candidates:
        raise ValueError("time_interleaved needs at least one candidate")
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    with progress(f"{description} ({len(candidates)} candidates)", warmup + repeats, unit="rounds") as advance:
        for _ in range(warmup):
            for run in candidates.values():
                run()
            advance()
        for _ in range(repeats):
            for name, run in candidates.items():
                start = clock()
                run()
                samples[name].append(clock() - start)
            advance()
    return {name: Timing(tuple(values)) for name, values in samples.items()}


def do_bench_timing(fn: Callable[[], Any], *, warmup_ms: int = 25, rep_ms: int = 100) -> Timing:
    """Time ``fn`` on the GPU with ``triton.testing.do_bench`` and keep every sample (GPU only).

    ``do_bench`` times with CUDA events and flushes the L2 cache between runs; ``return_mode="all"``
    returns each run's time, from which the median and interquartile range follow. Candidates timed
    one after the other this way share no rounds: compare them with :func:`unpaired_ratio`.
    """
    from triton.testing import do_bench

    return Timing.from_ms(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="all"))


@contextmanager
def progress(description: str, total: int, *, unit: str = "steps") -> Iterator[Callable[[int], None]]:
    """Show progress of ``total`` steps; yields ``advance(steps=1)``.

    On a terminal: a rich progress bar with the time elapsed and left. Otherwise (a CI log, ``| tee``,
    a file): a plain line every :data:`PROGRESS_LINE_EVERY_S` seconds and one at the end, so a log
    never sits silent for minutes.
    """
    if sys.stdout.isatty():
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn, TimeRemainingColumn

        columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), "left", TimeRemainingColumn())  # fmt: skip
        with Progress(*columns, transient=False) as bar:
            task = bar.add_task(description, total=total)
            yield lambda steps=1: bar.advance(task, steps)
        return
    start = last = time.perf_counter()
    done = 0

    def advance(steps: int = 1) -> None:
        nonlocal done, last
        done += steps
        now = time.perf_counter()
        if done >= total or now - last >= PROGRESS_LINE_EVERY_S:
            last = now
            elapsed = now - start
            left = f", ~{elapsed / done * (total - done):.0f} s left" if 0 < done < total else ""
            print(f"  {description}: {done}/{total} {unit} ({elapsed:.0f} s{left})", flush=True)

    yield advance


def machine_info() -> dict[str, Any]:
    """What a reader needs to interpret the numbers: versions, threads, device."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print a table with rich (floats shown with 4 significant digits)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    # Escaped: "[1.2-1.4]" and "[interquartile range]" are text here, not rich markup.
    table = Table(title=escape(title))
    for column in columns:
        table.add_column(escape(column), justify="right" if column != columns[0] else "left")
    for row in rows:
        table.add_row(*(escape(f"{cell:.4g}" if isinstance(cell, float) else str(cell)) for cell in row))
    # Rich wraps to 80 columns when output is not a terminal (CI logs, `| tee`): use a wider page there.
    Console(width=None if sys.stdout.isatty() else 160).print(table)


def write_json(path: Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` (plus ``machine_info()``) as indented JSON; timings and dataclasses are converted."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"machine": machine_info(), **payload}
    path.write_text(json.dumps(document, indent=2, default=_jsonable) + "\n", encoding="utf-8")
    return path


def _jsonable(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


#: A whisker may stretch the value axis to at most this many times the tallest bar (or the target
#: line); one that reaches further is clipped at the axis' end and marked with its value, so that a
#: single disturbed round on a busy machine cannot squash every bar into the bottom of the chart.
WHISKER_CLIP_FACTOR = 3.0


def value_axis_limit(
    values: Sequence[float], spread: Sequence[tuple[float, float]] | None = None, target: float | None = None
) -> float:
    """The top of a bar chart's value axis: room for every bar, the target line and every whisker end
    within :data:`WHISKER_CLIP_FACTOR` times the tallest of those, plus 10%."""
    base = max([*values, target or 0.0, 0.0])
    if base <= 0:
        base = max([high for _, high in spread or []] + [1.0])
    reach = [high for _, high in spread or [] if high <= WHISKER_CLIP_FACTOR * base]
    return 1.1 * max([base, *reach])


def bar_chart(
    path: Path,
    labels: Sequence[str],
    values: Sequence[float],
    *,
    ylabel: str,
    title: str,
    spread: Sequence[tuple[float, float]] | None = None,
    target: float | None = None,
    target_label: str = "target",
) -> Path:
    """Save a labelled bar chart as PNG (matplotlib, no display needed).

    Args:
        spread: per bar, the (low, high) ends of its error bar (e.g. the interquartile range). A
            whisker beyond :func:`value_axis_limit` is clipped at the axis' end, marked with a
            triangle and its true end written beside it.
        target: draws a dashed horizontal line at this value, labelled ``target_label``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    longest = max((len(line) for label in labels for line in label.splitlines()), default=0)
    figure, axes = plt.subplots(figsize=(max(4.0, len(labels) * max(1.2, 0.1 * longest)), 3.8))
    errors = None
    top = value_axis_limit(values, spread, target)
    clipped = []
    if spread is not None:
        if len(spread) != len(values):
            raise ValueError(f"{len(spread)} error bars for {len(values)} bars")
        clipped = [(index, high) for index, (_, high) in enumerate(spread) if high > top]
        errors = [[max(0.0, v - low) for v, (low, _) in zip(values, spread)],
                  [max(0.0, min(high, top) - v) for v, (_, high) in zip(values, spread)]]  # fmt: skip
    bars = axes.bar(labels, values, color="#4C72B0", yerr=errors, capsize=4 if errors else 0, ecolor="#222222")
    axes.bar_label(bars, fmt="%.3g", label_type="center", color="white")
    for index, high in clipped:  # the whisker goes on beyond the axis: say where it ends
        axes.plot([index], [top], marker="^", color="#C44E52", markersize=8, clip_on=False)
        axes.annotate(
            f"to {high:.4g}",
            (index, top),
            textcoords="offset points",
            xytext=(6, -12),
            fontsize="small",
            color="#C44E52",
        )
    axes.set_ylim(top=top)
    if target is not None:
        axes.axhline(target, color="#C44E52", linestyle="--", linewidth=1.2, label=f"{target_label}: {target:g}")
        axes.legend(loc="best", fontsize="small")
    axes.set_ylabel(ylabel)
    note = "\n(bars: median; whiskers: interquartile range" + ("; ▲: clipped, with its end)" if clipped else ")")
    axes.set_title(title + (note if errors else ""), fontsize="medium")
    axes.tick_params(axis="x", rotation=20)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def benchmark_parser(description: str, default_out: str, module: str) -> argparse.ArgumentParser:
    """An argument parser with the options every benchmark shares: ``--out``, ``--threads``, ``--repeats``.

    ``module`` is the benchmark's module name (its ``__spec__.name``): the usage line then shows the
    command a student types, ``python -m <module>``, rather than the file's name."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument("--out", type=Path, default=Path(default_out), help="folder for JSON and PNG results")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    parser.add_argument("--repeats", type=int, default=20, help="timed rounds per candidate")
    return parser


def apply_threads(threads: int | None) -> None:
    """Fix the intra-op thread count so runs are comparable."""
    if threads is not None:
        torch.set_num_threads(threads)
