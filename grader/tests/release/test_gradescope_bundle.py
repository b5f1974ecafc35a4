"""The Gradescope bundle: its contents, and its ``run_autograder`` run against a fake ``/autograder`` tree.

The fake tree is laid out as Gradescope lays out the real one: the bundle unpacked into
``source/``, the student's files in ``submission/``, results expected in ``results/results.json``.
Only the interpreter differs (``AUTOGRADER_PYTHON``: this environment instead of ``/autograder/venv``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.__main__ import main as grader_main
from grader.release.gradescope_bundle import build_bundle
from grader.tests.corpus import DEMO_COURSE, materialize
from grader.warm import warm_rubric

DEMO_CPU_POINTS, DEMO_GPU_POINTS, DEMO_MAX = 23, 3, 26  # held-out tests included: 6 + 3 points


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    build_bundle(out, DEMO_COURSE, lab_timeout=60)
    return out


def unpack(bundle: Path, root: Path) -> Path:
    """Unpack like Gradescope does into ``root/source``, keeping the executable bits."""
    source = root / "source"
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(source)
        for info in archive.infolist():
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                (source / info.filename).chmod(mode)
    return root


def run_autograder(root: Path, python: str = sys.executable) -> dict:
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": python}
    done = subprocess.run(
        [str(root / "source" / "run_autograder")], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((root / "results" / "results.json").read_text())


def test_bundle_holds_gradescopes_entry_points_and_the_course_without_solutions(bundle):
    with zipfile.ZipFile(bundle) as archive:
        infos = {info.filename: info for info in archive.infolist()}
        config = json.loads(archive.read("bundle.json"))
        setup = archive.read("setup.sh").decode()
    for script in ("setup.sh", "run_autograder", "install-system-packages.sh"):
        assert (infos[script].external_attr >> 16) & 0o111, f"{script} must be executable"
    assert "course/labA_arith/test_lab.py" in infos and "course/labA_arith/lab.toml" in infos
    assert "course/labA_arith/heldout/test_heldout.py" in infos, "Gradescope grades the held-out tests too"
    assert not [name for name in infos if "solutions" in name.split("/")], "the reference solutions never ship"
    assert config == {"gpu": "off", "labs": [], "test_timeout": None, "lab_timeout": 60, "unsafe_no_sandbox": False}
    assert "pip install" in setup and "--editable ./course" in setup and "grader.warm" in setup


def test_run_autograder_grades_a_submission_into_results_json(bundle, tmp_path):
    root = unpack(bundle, tmp_path / "autograder")
    # A zip of the course folder, unpacked by Gradescope one level down.
    materialize("solution", root / "submission" / "my-course")
    results = run_autograder(root)
    assert results["score"] == DEMO_CPU_POINTS
    main = [test for test in results["tests"] if "extension (optional)" not in test["name"]]
    assert sum(test["max_score"] for test in main) == DEMO_MAX, "the optional extension's points are apart"
    assert results["extra_data"]["extension"] == {"score": 2, "max_score": 2, "pending": 0}
    pending = [test for test in results["tests"] if test["output"].startswith("pending")]
    assert sum(test["max_score"] for test in pending) == DEMO_GPU_POINTS and all(t["score"] == 0 for t in pending)
    assert {"name", "score", "max_score", "status", "output", "visibility"} <= set(results["tests"][0])
    assert (root / "results" / "grader" / "summary.json").is_file(), "the full graded folder is kept"
    by_visibility = {}
    for test in results["tests"]:
        by_visibility[test["visibility"]] = by_visibility.get(test["visibility"], 0) + test["max_score"]
    # visible: 17 main points and the optional extension test's 2 (named so; the top-level score leaves it out)
    assert by_visibility == {"visible": 19, "hidden": 7, "after_due_date": 2}
    assert results["extra_data"]["heldout"] == {"score": 9, "max_score": 9, "pending": 0}


def test_run_autograder_tells_an_overfitting_submission_which_heldout_areas_failed(bundle, tmp_path):
    root = unpack(bundle, tmp_path / "autograder")
    materialize("overfit", root / "submission")
    results = run_autograder(root)
    hidden = [test for test in results["tests"] if test["visibility"] != "visible"]
    assert results["extra_data"]["visible"]["score"] == 9 and results["extra_data"]["heldout"]["score"] == 1
    assert hidden and all("held-out" in test["name"] for test in hidden)
    assert "labA: held-out areas that lost points: addition of other numbers" in results["output"]
    assert "test_add_other_numbers" not in results["output"], "the top-level output names areas, not cases"


def test_run_autograder_scores_an_untouched_starter_zero(bundle, tmp_path):
    root = unpack(bundle, tmp_path / "autograder")
    materialize("starter", root / "submission")
    results = run_autograder(root)
    assert results["score"] == 0
    assert len(results["tests"]) > 0 and all(test["score"] == 0 for test in results["tests"])


def test_run_autograder_always_writes_results_json(bundle, tmp_path):
    root = unpack(bundle, tmp_path / "autograder")
    (root / "submission").mkdir()
    results = run_autograder(root, python=str(tmp_path / "no-python-here"))
    assert results["score"] == 0 and "failed to start" in results["output"]


def test_gradescope_bundle_command(tmp_path, capsys):
    out = tmp_path / "autograder.zip"
    assert grader_main(["gradescope-bundle", "--out", str(out), "--course", str(DEMO_COURSE), "--labs", "labA"]) == 0
    assert "wrote" in capsys.readouterr().out and zipfile.is_zipfile(out)
    assert grader_main(["gradescope-bundle", "--out", str(out), "--course", str(DEMO_COURSE), "--labs", "nope"]) == 2
    assert "unknown or unready lab 'nope'" in capsys.readouterr().err


def test_warm_collects_the_rubric_once_for_later_runs(tmp_path, capsys):
    assert warm_rubric(DEMO_COURSE, tmp_path) == 2
    assert len(list(tmp_path.glob("*.json"))) == 2
    assert "labA: 11 tests, 16 points" in capsys.readouterr().out
