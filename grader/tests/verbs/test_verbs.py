"""The command line: each verb on the demo course and the graded corpus."""

from __future__ import annotations

import csv
import dataclasses
import json
import shutil
import zipfile

import pytest

from grader.__main__ import VERBS, build_parser, main
from grader.report.summary import CSV_FILE, HTML_FILE, JSON_FILE
from grader.runners.batch import grade_all
from grader.tests.corpus import DEMO_COURSE, corpus_names, expected, materialize


def test_every_verb_is_registered_from_the_table():
    help_text = build_parser().format_help()
    assert all(verb in help_text for verb in VERBS)


def test_run_grades_a_zip_and_exits_zero(tmp_path, capsys, demo_args):
    folder = materialize("solution", tmp_path / "alice")
    archive = tmp_path / "alice.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        for path in folder.rglob("*"):
            handle.write(path, path.relative_to(tmp_path))
    out = tmp_path / "out"
    assert main(["run", str(archive), "--out", str(out), "--labs", "labA", *demo_args]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["submission"] == "alice" and list(summary["labs"]) == ["labA"]
    assert summary["labs"]["labA"]["score"] == 16 and summary["total"] == {
        "score": 16,
        "max_score": 16,
        "pending": 0,
        "visible": {"score": 10, "max_score": 10, "pending": 0},
        "heldout": {"score": 6, "max_score": 6, "pending": 0},
        "extension": {"score": 2, "max_score": 2, "pending": 0},
    }  # the optional step's points, apart from score
    assert "alice: 16/16 [visible 10/10 · held-out 6/6]" in capsys.readouterr().out
    assert (out / "feedback.md").read_text().startswith("# Grade report: alice")


def test_run_refuses_an_unknown_lab(tmp_path, capsys, demo_args):
    assert main(["run", str(DEMO_COURSE), "--out", str(tmp_path), "--labs", "lab99", *demo_args]) == 2
    assert "unknown or unready lab 'lab99'" in capsys.readouterr().err


def test_run_on_an_unreadable_submission_still_writes_a_result(tmp_path, demo_args):
    (tmp_path / "broken.zip").write_bytes(b"not a zip")
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "broken.zip"), "--out", str(out), *demo_args]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert {lab["status"] for lab in summary["labs"].values()} == {"bad-submission"}, (
        "an unreadable archive is the submission's problem, said as such"
    )
    assert summary["total"]["max_score"] == 26 and "not a readable zip" in summary["flags"][0]


@pytest.mark.parametrize("fmt", ["md", "json", "gradescope"])
def test_score_rescores_a_graded_folder_in_every_format(graded_corpus, capsys, fmt):
    assert main(["score", str(graded_corpus / "partial"), "--format", fmt]) == 0
    printed = capsys.readouterr().out
    if fmt == "md":
        assert "**7/16** (visible 4/10 · held-out 3/6)" in printed and "- [x] *talking point*" in printed
        assert "| ❌ | clamping to other bounds | 0/1 | lost points |" in printed
        assert "test_clamp_to_other_bounds" not in printed, "feedback names held-out areas, never the cases"
    else:
        data = json.loads(printed)
        assert (data["total"]["score"] if fmt == "json" else data["score"]) == 7


def test_score_refuses_a_folder_that_was_not_graded(tmp_path, capsys):
    assert main(["score", str(tmp_path)]) == 2
    assert "not a folder written by `grader run`" in capsys.readouterr().err


def test_a_runner_that_crashes_still_leaves_a_row(demo_setup, tmp_path):
    def broken_runner(submission, out, setup, name):
        raise RuntimeError("container would not start")

    rows = grade_all([("bob", DEMO_COURSE)], tmp_path, demo_setup, runner=broken_runner, show_progress=False)
    assert rows[0].student == "bob" and rows[0].max_score == 26 and set(rows[0].statuses.values()) == {"grader-error"}
    summary = json.loads((tmp_path / "bob" / "summary.json").read_text())
    assert "RuntimeError" in summary["flags"][0] and "container would not start" not in summary["flags"][0]
    assert "container would not start" in (tmp_path / "bob" / "grader-error.txt").read_text(), "the instructor's"


def test_report_covers_every_student_of_the_corpus(graded_corpus, tmp_path):
    assert main(["report", str(graded_corpus), "--out", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / CSV_FILE).open()))
    assert [row["student"] for row in rows] == corpus_names()
    assert {
        "labA_score",
        "labA_max",
        "labA_pending",
        "labA_status",
        "labB_status",
        "labA_heldout_score",
        "labA_heldout_max",
        "heldout_score",
        "visible_score",
    } <= set(rows[0])
    overfit = next(row for row in rows if row["student"] == "overfit")
    assert (overfit["labA_score"], overfit["labA_heldout_score"], overfit["labA_heldout_max"]) == ("10", "1", "6")
    data = json.loads((tmp_path / JSON_FILE).read_text())
    # solution, big_output, segfault, import_error, overfit, and after a hang elsewhere:
    # hangs_in_one_function, swallows_timeout (resumed after its killed test), slow_but_correct; and an
    # attack that is also correct: attack_leaks_by_report_error (attack_forges_only_its_callers is void)
    assert data["labs"]["labA"]["tests"]["test_fib"]["passed"] == 9
    sums = data["labs"]["labA"]["talking_points"]["sums"]
    assert sums["students"] == len(corpus_names()) and 0 < sums["ready_rate"] < 1
    page = (tmp_path / HTML_FILE).read_text()
    assert page.count("data:image/png;base64,") == 2 and "Talking-point readiness" in page  # a histogram per lab
    assert "held-out tests: mean" in page and data["labs"]["labA"]["heldout_max_score"] == 6
    assert {f["student"] for f in data["flagged"]} == {name for name in corpus_names() if expected(name)["flags"]}


def test_release_ships_no_solutions_and_verifies(tmp_path, capsys, demo_args):
    out = tmp_path / "release"
    assert main(["release", "--out", str(out), *demo_args]) == 0
    assert not (out / "solutions").exists() and (out / "labA_arith" / "lab.toml").is_file()
    assert not list(out.rglob("heldout")) and not list(out.rglob("test_heldout.py")), "held-out tests never ship"
    printed = capsys.readouterr().out
    assert "untouched starters score 0" in printed
    assert "none of the course's 7 held-out tests (9 points) is in the release" in printed


def test_a_minimal_release_drops_the_guidance_blocks_and_verifies(tmp_path, capsys, demo_args):
    full, minimal = tmp_path / "full", tmp_path / "minimal"
    assert main(["release", "--out", str(minimal), "--scaffold", "minimal", *demo_args]) == 0
    assert main(["release", "--out", str(full), "--no-verify", *demo_args]) == 0
    assert "(a, b) becomes (b, a + b)" in (full / "labA_arith" / "arith.py").read_text(), "full: as written"
    starter = (minimal / "labA_arith" / "arith.py").read_text()
    assert "guidance" not in starter and "(a, b) becomes" not in starter, "minimal: the steps are gone"
    assert '"""Return the n-th Fibonacci number' in starter and 'raise NotImplementedError("TODO: fib")' in starter
    assert "the release is verified" in capsys.readouterr().out


def test_release_refuses_a_starter_that_already_passes(tmp_path, capsys):
    course = tmp_path / "course"
    shutil.copytree(DEMO_COURSE, course)
    shutil.copy2(course / "solutions" / "labA_arith" / "arith.py", course / "labA_arith" / "arith.py")
    assert (
        main(
            [
                "release",
                "--out",
                str(tmp_path / "release"),
                "--course",
                str(course),
                "--test-timeout",
                "4",
                "--lab-timeout",
                "15",
                "--no-cache",
            ]
        )
        == 1
    )
    assert "the untouched starters must score 0" in capsys.readouterr().err


def test_selfcheck_grades_reference_and_starter(capsys, demo_args):
    assert main(["selfcheck", *demo_args]) == 0
    printed = capsys.readouterr().out
    assert "reference: 23/26 (+3 pending GPU) [visible 14/17 (+3 pending GPU) · held-out 9/9]" in printed
    assert "starter: 0/26" in printed


def test_selfcheck_repeat_grades_the_reference_again_and_names_a_round_that_lost_a_point(
    capsys, demo_args, monkeypatch
):
    from grader.verbs import selfcheck

    assert main(["selfcheck", "--repeat", "2", *demo_args]) == 0
    printed = capsys.readouterr().out
    assert (
        "the reference graded 2 times:" in printed and "reference-02: labA 16/16, labB 7/10 (+3 pending GPU)" in printed
    ), printed
    assert "every CPU point in each of 2 gradings" in printed
    real_rescore = selfcheck.rescore

    def second_round_loses_a_point(folder):
        result = real_rescore(folder)
        if folder.name != "reference-02":
            return result
        first = dataclasses.replace(result.labs[0], score=result.labs[0].score - 1)
        return dataclasses.replace(result, labs=[first, *result.labs[1:]])

    monkeypatch.setattr(selfcheck, "rescore", second_round_loses_a_point)
    assert main(["selfcheck", "--repeat", "2", *demo_args]) == 1
    printed = capsys.readouterr().out
    assert "reference-02: labA: the reference scores 15/16" in printed, printed
    assert "reference-01: labA" not in printed.split("PROBLEMS:", 1)[1]
