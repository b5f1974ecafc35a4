"""The zoo (:mod:`lab02_npu_backend.given.zoo`): every family compiled with the backend in both dialects.

Not graded, and not part of ``nox -s lab02``: it runs with ``-m zoo`` (``nox -s zoo-lab02``; the
course's CI runs it on the reference, about 4 minutes on 2 cores). Each family and dialect must give
eager's answer within what float32 can promise (:class:`labkit.numerics.ReferenceOutputs`; a
mismatch names the first node that differs and the partition it ran in), keep at least
:data:`~lab02_npu_backend.given.zoo.ZOO_BAR` of its nodes that do work on the NPU (or the floor and
reason its ``below_bar`` entry gives), and 95% of its FLOPs. The coverage table is written to
``results/lab02/zoo-coverage.md`` and printed at the end.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from lab02_npu_backend.given import coverage
from lab02_npu_backend.given.coverage import PartitionReport
from lab02_npu_backend.given.divergence import diagnose_model
from lab02_npu_backend.given.report import zoo_row, zoo_table_lines
from lab02_npu_backend.given.zoo import BY_NAME, ZOO_BAR, build_family
from labkit.numerics import ReferenceOutputs

pytestmark = pytest.mark.zoo

DIALECTS = ("torch", "aten")
FLOP_BAR = 0.95
TABLE = Path("results/lab02/zoo-coverage.md")


@pytest.fixture(scope="module")
def zoo_table(request):
    """Rows of the coverage table, written and printed when the module ends."""
    rows: dict[tuple[str, str], str] = {}
    yield rows
    order = [(name, dialect) for name in BY_NAME for dialect in DIALECTS]
    lines = zoo_table_lines([rows[key] for key in order if key in rows])
    TABLE.parent.mkdir(parents=True, exist_ok=True)
    TABLE.write_text("\n".join(lines) + "\n", encoding="utf-8")
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():  # the table is the run's result: show it, uncaptured
        print(f"\n\nzoo coverage ({TABLE}):", *lines, sep="\n")


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("name", list(BY_NAME))
def test_zoo_family_matches_eager_and_runs_on_the_npu(lab, zoo_table, name, dialect):
    family, case = BY_NAME[name], build_family(name)
    reference = ReferenceOutputs.measure(case.model, case.example_inputs)
    backend = lab.npu_backend if dialect == "torch" else lab.npu_aot_backend
    torch._dynamo.reset()
    with warnings.catch_warnings(), torch.no_grad(), coverage.collect() as graphs:
        warnings.simplefilter("ignore", UserWarning)  # transformers' own notices
        output = torch.compile(case.model, backend=backend)(*case.example_inputs)
    verdict = reference.compare(output)
    report = PartitionReport.from_graphs(graphs, model=name)
    zoo_table[(name, dialect)] = zoo_row(report, family, verdict.error.max_abs)
    if not verdict.ok:
        pytest.fail(
            f"{name} ({dialect} graphs) differs from eager: {verdict.describe()}\n"
            f"{diagnose_model(lab, case.model, case.example_inputs, dialect)}"
        )
    floor, reason = family.below_bar.get(dialect, (ZOO_BAR, ""))
    assert report.npu_fraction >= floor, (
        f"{name} ({dialect}): {report.npu_fraction:.1%} of the nodes that do work on the NPU, under "
        f"{floor:.0%}{' (' + reason + ')' if reason else ''}\n{report.to_markdown()}"
    )
    assert report.npu_flop_fraction >= FLOP_BAR, f"{name} ({dialect}): {report.npu_flop_fraction:.1%} of the FLOPs"


def test_every_family_below_the_bar_says_why():
    for family in BY_NAME.values():
        for dialect, (floor, reason) in family.below_bar.items():
            assert dialect in DIALECTS and 0 < floor < ZOO_BAR and len(reason) > 40, family.name
