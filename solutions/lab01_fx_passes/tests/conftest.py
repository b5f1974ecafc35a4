"""The zoo's options (``--zoo-shard``, ``--zoo-results``) and the table it prints at the end of a run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lab01-zoo", "lab 1's torchvision zoo")
    group.addoption("--zoo-shard", default=None, metavar="I/N",
                    help="run shard I of N of the zoo (models dealt round-robin; "
                         "other tests run in shard 0)")  # fmt: skip
    group.addoption("--zoo-results", default=None, metavar="PATH", help="write the zoo's rows as JSON to PATH")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shard = config.getoption("--zoo-shard")
    if not shard:
        return
    from . import zoo

    index, count = (int(part) for part in shard.split("/"))
    keep, drop = [], []
    for item in items:
        model = getattr(item, "callspec", None) and item.callspec.params.get("model_name")
        mine = zoo.MODELS.index(model) % count == index if model else index == 0
        (keep if mine else drop).append(item)
    if drop:
        items[:] = keep
        config.hook.pytest_deselected(items=drop)


def table_lines(rows: list[dict]) -> list[str]:
    """One line per cell: BatchNorms folded, convolutions channels-last, the last pass's error, seconds."""
    lines = [
        f"{'model':22s} {'dialect':17s} {'BN folded':>10s} {'conv NHWC':>10s} {'max |err|':>10s} {'s':>6s}  result"
    ]
    for row in rows:
        if "excluded" in row or "left" not in row:
            what = f"excluded: {row['excluded']}" if "excluded" in row else f"FAILED: {row.get('failure')}"
            lines.append(f"{row['model']:22s} {row['dialect']:17s} {what}")
            continue
        folded = f"{row['batch_norms'] - row['left']}/{row['batch_norms']}"
        convs = f"{row['channels_last']}/{row['convs']}"
        error = "-" if row["max_abs_error"] is None else f"{row['max_abs_error']:.2e}"
        lines.append(f"{row['model']:22s} {row['dialect']:17s} {folded:>10s} {convs:>10s} {error:>10s} "
                     f"{row['seconds']:>6.1f}  {'ok' if row['ok'] else 'FAILED'}")  # fmt: skip
    return lines


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    from .test_zoo import RESULTS

    if config.getoption("--zoo-results"):
        Path(config.getoption("--zoo-results")).write_text(json.dumps(RESULTS, indent=1), encoding="utf-8")
    if not RESULTS:
        return
    seconds = sum(row.get("seconds", 0) for row in RESULTS)
    terminalreporter.write_sep("=", f"lab01 zoo: {len(RESULTS)} cells, {seconds:.0f} s")
    for line in table_lines(RESULTS):
        terminalreporter.write_line(line)
