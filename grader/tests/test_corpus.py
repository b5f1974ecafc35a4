"""Golden submissions: each fixture under ``fixtures/submissions`` graded as its ``expected.json`` says."""

from __future__ import annotations

import json

import pytest

from grader.evidence.layout import GRADESCOPE_FILE, RAW_DIR, SUMMARY_FILE
from grader.scoring.results import PASSED, SubmissionResult
from grader.tests.corpus import corpus_names, expected

DEMO_MAX = {"labA": 16, "labB": 10}  # visible + held-out: labA 10 + 6, labB 7 + 3


def _summary(graded, name) -> SubmissionResult:
    return SubmissionResult.from_dict(json.loads((graded / name / SUMMARY_FILE).read_text()))


@pytest.mark.parametrize("name", corpus_names())
def test_fixture_is_graded_as_expected(graded_corpus, name):
    want = expected(name)
    result = _summary(graded_corpus, name)
    for lab_id, lab_want in want["labs"].items():
        lab = result.lab(lab_id)
        where = f"{name}/{lab_id}"
        assert lab.max_score == DEMO_MAX[lab_id], f"{where}: the maximum comes from the pristine rubric"
        assert lab.visible.score == lab_want["score"], f"{where}: {lab}"
        assert lab.heldout.score == lab_want.get("heldout", 0), f"{where}: {lab}"
        main = [test for test in lab.tests if not test.extension]
        assert lab.score == sum(test.points for test in main) == lab.visible.score + lab.heldout.score
        if "status" in lab_want:
            assert lab.status == lab_want["status"], f"{where}: {lab.reason}"
        if "pending" in lab_want:
            assert lab.pending == lab_want["pending"], where
        if "reason" in lab_want:
            assert lab_want["reason"] in lab.reason, where
        for test_name, outcome in lab_want.get("outcomes", {}).items():
            cases = [test for test in lab.tests if test.name == test_name]
            assert cases and all(test.outcome == outcome for test in cases), f"{where}: {test_name}: {cases}"
        if "message" in lab_want:
            assert any(lab_want["message"] in test.message for test in lab.tests), where
        for point_id, status in want.get("talking_points", {}).get(lab_id, {}).items():
            (point,) = [p for p in lab.talking_points if p.id == point_id]
            assert point.status == status, f"{where}: talking point {point_id}"
    if want["flags"]:
        for fragment in want["flags"]:
            assert any(fragment in flag for flag in result.flags), f"{name}: no flag with {fragment!r}: {result.flags}"
    else:
        assert result.flags == (), f"{name}: unexpected flags {result.flags}"
    for fragment in want.get("notes", []):
        assert any(fragment in note for note in result.notes), f"{name}: {result.notes}"


@pytest.mark.parametrize("name", corpus_names())
def test_no_test_after_a_crash_is_ever_passed(graded_corpus, name):
    for lab in _summary(graded_corpus, name).labs:
        for part in ([t for t in lab.tests if not t.heldout], [t for t in lab.tests if t.heldout]):  # two processes
            seen_crash = False
            for test in part:
                seen_crash = seen_crash or test.outcome in ("crashed", "timeout") and lab.status != "graded"
                if seen_crash:
                    assert test.outcome != PASSED, f"{name}: {test.nodeid} passed after the process died"


@pytest.mark.parametrize("name", corpus_names())
def test_every_submission_writes_a_gradescope_file(graded_corpus, name):
    result = _summary(graded_corpus, name)
    gradescope = json.loads((graded_corpus / name / GRADESCOPE_FILE).read_text())
    assert gradescope["score"] == result.total["score"]
    main = [test for test in gradescope["tests"] if "extension (optional)" not in test["name"]]
    assert sum(test["max_score"] for test in main) == sum(DEMO_MAX.values()), "the extension's points apart"
    for test in gradescope["tests"]:
        assert set(test) == {"name", "score", "max_score", "status", "output", "visibility"}
        assert test["status"] in ("passed", "failed")


def test_huge_output_is_stored_truncated(graded_corpus):
    limit = expected("big_output")["max_raw_bytes"]
    raw = graded_corpus / "big_output" / RAW_DIR
    sizes = {path.name: path.stat().st_size for path in raw.rglob("*") if path.is_file()}
    assert sizes and max(sizes.values()) < limit, sizes
    message = next(t.message for t in _summary(graded_corpus, "big_output").lab("labA").tests if t.name == "test_mean")
    assert "truncated by the grader" in message and len(message) < 2000


def test_rescoring_the_saved_artifacts_gives_the_same_result(graded_corpus):
    from grader.scoring.score import rescore

    for name in corpus_names():
        assert rescore(graded_corpus / name) == _summary(graded_corpus, name), name


def test_batch_index_has_one_row_per_submission(graded_corpus):
    rows = json.loads((graded_corpus / "batch.json").read_text())["rows"]
    assert [row["student"] for row in rows] == corpus_names()
