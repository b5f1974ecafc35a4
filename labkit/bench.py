"""Shared machinery for the labs' benchmark scripts.

A benchmark is honest when its candidates run under the same conditions: the same thread count,
warmed up, *interleaved* (A, B, C, A, B, C, ...) so that a slow moment of the machine hits every
candidate alike, and summarised by the median. Every benchmark prints a table a person can read,
writes the same numbers as JSON, and may save a bar chart.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True)
class Timing:
    """Wall-clock statistics of one candidate, in seconds."""

    median_s: float
    min_s: float
    repeats: int


def time_interleaved(
    candidates: dict[str, Callable[[], Any]], *, warmup: int = 3, repeats: int = 20
) -> dict[str, Timing]:
    """Time several callables in round-robin order and return each one's median and minimum.

    Args:
        candidates: name -> zero-argument callable (synchronise inside it if it launches GPU work).
        warmup: untimed rounds first (caches, lazy initialisation, autotuning).
        repeats: timed rounds; each round runs every candidate once.
    """
    if not candidates:
        raise ValueError("time_interleaved needs at least one candidate")
    for _ in range(warmup):
        for run in candidates.values():
            run()
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, run in candidates.items():
            start = time.perf_counter()
            run()
            samples[name].append(time.perf_counter() - start)
    return {name: Timing(statistics.median(s), min(s), len(s)) for name, s in samples.items()}


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
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="right" if column != columns[0] else "left")
    for row in rows:
        table.add_row(*(f"{cell:.4g}" if isinstance(cell, float) else str(cell) for cell in row))
    # Rich wraps to 80 columns when output is not a terminal (CI logs, `| tee`): use a wider page there.
    Console(width=None if sys.stdout.isatty() else 160).print(table)


def write_json(path: Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` (plus ``machine_info()``) as indented JSON; dataclasses are converted."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"machine": machine_info(), **payload}
    path.write_text(json.dumps(document, indent=2, default=_jsonable) + "\n", encoding="utf-8")
    return path


def _jsonable(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def bar_chart(path: Path, labels: Sequence[str], values: Sequence[float], *, ylabel: str, title: str) -> Path:
    """Save a labelled bar chart as PNG (matplotlib, no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(max(4.0, 1.2 * len(labels)), 3.5))
    bars = axes.bar(labels, values, color="#4C72B0")
    axes.bar_label(bars, fmt="%.3g")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.tick_params(axis="x", rotation=20)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def benchmark_parser(description: str, default_out: str) -> argparse.ArgumentParser:
    """An argument parser with the options every benchmark shares: ``--out``, ``--threads``, ``--repeats``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, default=Path(default_out), help="folder for JSON and PNG results")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    parser.add_argument("--repeats", type=int, default=20, help="timed rounds per candidate")
    return parser


def apply_threads(threads: int | None) -> None:
    """Fix the intra-op thread count so runs are comparable."""
    if threads is not None:
        torch.set_num_threads(threads)
