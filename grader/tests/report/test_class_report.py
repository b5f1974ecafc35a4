"""The class report's page: summary first, the student table next, full test names; and in a real browser."""

from __future__ import annotations

import html
import re

import pytest

from grader.course.rubric import LabRubric, Rubric, RubricTest
from grader.evidence.runs import LabRun
from grader.report.html import render_page
from grader.report.summary import class_summary, write_report
from grader.scoring.score import score_submission

LONG = "test_conv_bn_skips_conv_output_with_another_user"
CASES = ("symbolic_trace", "make_fx", "export_core_aten")
RUBRIC = Rubric(
    (
        LabRubric(
            "lab01",
            "lab01_fx_passes",
            "FX graph transformation passes, a title long enough to be cut in a chart",
            tests=(
                *(RubricTest(f"lab01_fx_passes/test_lab.py::{LONG}[{case}]", LONG, 2, False) for case in CASES),
                RubricTest("lab01_fx_passes/test_lab.py::test_on_gpu", "test_on_gpu", 3, True),
            ),
        ),
    )
)


def run_passing(nodeids: list[str], rubric: Rubric = RUBRIC) -> LabRun:
    """A finished run in which ``nodeids`` passed and every other rubric test failed (GPU ones skipped)."""
    events = [{"event": "configure"}, {"event": "collected", "nodeids": []}]
    for test in rubric.labs[0].tests:
        outcome = "skipped" if test.gpu else "passed" if test.nodeid in nodeids else "failed"
        events += [
            {"event": "start", "nodeid": test.nodeid},
            *(
                {
                    "event": "report",
                    "nodeid": test.nodeid,
                    "when": when,
                    "outcome": outcome if when == "call" else "skipped" if (test.gpu and when == "setup") else "passed",
                }
                for when in ("setup", "call", "teardown")
                if not (test.gpu and when == "call")
            ),
            {"event": "finish", "nodeid": test.nodeid},
        ]
    events.append({"event": "session_finish", "exitstatus": 1})
    report = {"tests": [{"nodeid": nodeid, "outcome": "passed"} for nodeid in nodeids]}
    return LabRun("lab01", 1, False, False, 1.0, tuple(events), report)


@pytest.fixture
def summary() -> dict:
    tests = [test.nodeid for test in RUBRIC.labs[0].tests]
    results = [score_submission(RUBRIC, {"lab01": run_passing(tests[:k])}, submission=f"s{k}") for k in range(4)]
    results.append(
        score_submission(
            RUBRIC,
            {},
            submission="broken",
            not_run_status="grader-error",
            not_run_reason="grader error",
            flags=("grader error",),
        )
    )
    return class_summary(results)


def page_text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_the_summary_comes_first_then_the_students_then_the_labs(summary):
    page = render_page(summary, {"lab01": ""})
    positions = [page.index(f"id='{anchor}'") for anchor in ("summary", "students", "lab01", "flagged")]
    assert positions == sorted(positions)
    assert all(f"href='#{anchor}'" in page for anchor in ("summary", "students", "lab01", "flagged"))
    summary_table = page_text(page[positions[0] : positions[1]])
    for column in ("mean", "median", "full marks", "pending GPU"):
        assert column in summary_table
    assert "3 points for 4 students" in summary_table and "1 / 5" in summary_table  # s3 has every CPU point


def test_every_parametrised_case_keeps_its_full_name(summary):
    text = page_text(render_page(summary, {"lab01": ""}))
    for case in CASES:
        assert f"{LONG}[{case}]" in text
    assert summary["labs"]["lab01"]["title"] in text


def test_the_student_table_shows_each_lab_and_the_status_of_a_lab_not_graded_normally(summary):
    page = render_page(summary, {"lab01": ""})
    students = page_text(page[page.index("id='students'") : page.index("id='lab01'")])
    assert "s3" in students and "6/9" in students and "0/9 grader-error" in students


def test_the_optional_extension_has_its_own_column_and_its_tests_are_tagged():
    """As in class.csv and results.json: the extension's points apart, its tests tagged like held-out ones."""
    extension = RubricTest(
        "lab01_fx_passes/test_lab.py::test_onednn_pipeline", "test_onednn_pipeline", 4, False, extension=True
    )
    rubric = Rubric((LabRubric("lab01", "lab01_fx_passes", "FX", tests=(*RUBRIC.labs[0].tests, extension)),))
    main = [test.nodeid for test in RUBRIC.labs[0].tests]
    results = [
        score_submission(rubric, {"lab01": run_passing(main, rubric)}, submission="skipped_it"),
        score_submission(rubric, {"lab01": run_passing([*main, extension.nodeid], rubric)}, submission="did_it"),
    ]
    page = render_page(class_summary(results), {"lab01": ""})
    summary_table = page_text(page[page.index("id='summary'") : page.index("id='students'")])
    assert "optional extension" in summary_table and "mean 2.0 of 4 · 1 with points" in summary_table
    assert "2 / 2" in summary_table, "both have full marks: the extension is apart"
    students = page[page.index("id='students'") : page.index("id='lab01'")]
    header = page_text(students.split("</tr>")[0])
    assert "optional extension" in header
    (did_it,) = [page_text(row) for row in students.split("<tr") if ">did_it<" in row]
    assert did_it.startswith(">did_it6/9") and did_it.endswith("4/4"), did_it
    rows = [row for row in page[page.index("id='lab01'") :].split("<tr")]
    (row,) = [row for row in rows if "test_onednn_pipeline" in page_text(row)]
    assert "<span class='tag'>extension (optional)</span>" in row
    assert "extension" not in "".join(row for row in rows if LONG in page_text(row))
    lab_text = page_text(page[page.index("id='lab01'") :])
    assert "optional extension (apart from the score): mean 2.0 of 4" in lab_text


# ---------------------------------------------------------------- in a real browser (skipped without Chromium)


def chromium_or_skip() -> str:
    from grader.report.browser_check import BrowserError, find_chromium

    try:
        return find_chromium()
    except BrowserError as error:
        pytest.skip(str(error))


def test_the_class_report_reads_well_in_headless_chromium(graded_corpus, tmp_path):
    from grader.report.browser_check import check_report

    browser = chromium_or_skip()
    write_report(graded_corpus, tmp_path / "report")
    problems = check_report(tmp_path / "report" / "class.html", tmp_path / "shots", browser, log=lambda _: None)
    assert problems == []
    assert (tmp_path / "shots" / "class-desktop.png").stat().st_size > 10_000


def test_the_browser_check_catches_words_broken_letter_by_letter(graded_corpus, tmp_path):
    from grader.report.browser_check import check_report

    browser = chromium_or_skip()
    write_report(graded_corpus, tmp_path / "report")
    page = tmp_path / "report" / "class.html"
    page.write_text(page.read_text().replace("</style>", "td,th{overflow-wrap:anywhere}table{width:300px}</style>"))
    problems = check_report(page, tmp_path / "shots", browser, log=lambda _: None)
    assert any("a word is broken across lines" in problem for problem in problems)


def test_a_student_without_a_summary_first_in_the_class_gets_a_row_with_every_column(tmp_path):
    """A folder without a readable summary.json sorting first used to set the CSV's columns and crash the report."""
    import csv

    from grader.tests.report.graded_folders import lab, write_graded

    graded = tmp_path / "graded"
    (graded / "aaron").mkdir(parents=True)
    (graded / "aaron" / "summary.json").write_text("{", encoding="utf-8")  # torn: unreadable
    write_graded(graded, "zoe", [lab("labA", 7)])
    write_report(graded, tmp_path / "out")
    with open(tmp_path / "out" / "class.csv", newline="", encoding="utf-8") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert rows["aaron"]["labA_status"] == "missing" and rows["aaron"]["heldout_score"] == "0"
    assert "grade this submission again" in rows["aaron"]["flags"]
    assert rows["zoe"]["labA_score"] == "7"
