"""Every entry of a submissions folder gets a row: one the grader cannot read is a ``bad-submission``
saying why (never ``grader-error``, never a missing row)."""

from __future__ import annotations

import json
import zipfile

from grader.evidence.layout import FEEDBACK_FILE
from grader.runners.batch import BATCH_FILE, discover_submissions, grade_all
from grader.scoring.results import BAD_SUBMISSION


def test_every_entry_gets_a_row_and_unreadable_ones_say_why(demo_setup, tmp_path):
    folder = tmp_path / "submissions"
    folder.mkdir()
    (folder / "alice.tar.gz").write_bytes(b"\x1f\x8b\x08 not read")
    (folder / "bob.zip").write_text("a text file named .zip")
    zipfile.ZipFile(folder / "carol.zip", "w").close()
    (folder / "dave.zip").write_bytes((folder / "carol.zip").read_bytes())
    (folder / "dave.tgz").write_bytes(b"\x1f\x8b")  # two entries with one id keep their full names
    (folder / ".DS_Store").write_text("")
    submissions = discover_submissions(folder)
    assert [student for student, _ in submissions] == ["alice", "bob", "carol", "dave.tgz", "dave.zip"]
    rows = grade_all(submissions, tmp_path / "graded", demo_setup, show_progress=False)
    assert {row.student: set(row.statuses.values()) for row in rows} == {
        name: {BAD_SUBMISSION} for name in ("alice", "bob", "carol", "dave.tgz", "dave.zip")
    }
    feedback = (tmp_path / "graded" / "alice" / FEEDBACK_FILE).read_text()
    assert "cannot read .tar.gz archives; submit a folder or a .zip" in feedback
    assert "the zip is empty" in (tmp_path / "graded" / "carol" / FEEDBACK_FILE).read_text()
    assert "not a readable zip" in (tmp_path / "graded" / "bob" / FEEDBACK_FILE).read_text()
    assert len(json.loads((tmp_path / "graded" / BATCH_FILE).read_text())["rows"]) == 5
