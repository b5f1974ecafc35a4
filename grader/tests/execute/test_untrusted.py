"""Reading what graded code wrote (:mod:`grader.evidence.untrusted`): each kind of file a process can leave
where its report should be is refused, without blocking and without reading past the cap; each control
shows what an ordinary read does with the same file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

from grader.evidence.layout import read_json
from grader.evidence.untrusted import clear_path, fresh_folder, parse_untrusted_json, read_untrusted
from grader.execute.supervisor import keep_report

CAP = 4 * 1024 * 1024


def test_a_regular_file_is_read_and_a_missing_one_is_no_problem(tmp_path):
    (tmp_path / "report.json").write_text('{"tests": []}')
    assert read_untrusted(tmp_path / "report.json", CAP).data == b'{"tests": []}'
    missing = read_untrusted(tmp_path / "absent.json", CAP)
    assert missing.data is None and missing.missing and not missing.problem


def test_a_link_is_never_followed_where_an_ordinary_read_follows_it(tmp_path):
    secret = tmp_path / "reference.py"
    secret.write_text("the reference solution")
    drop = fresh_folder(tmp_path / "drop")
    (drop / "report.json").symlink_to(secret)
    assert (drop / "report.json").read_text() == "the reference solution", "the control: read_bytes follows it"
    taken = read_untrusted(drop / "report.json", CAP)
    assert taken.data is None and taken.problem == "it is a symbolic link"
    (tmp_path / "linked").symlink_to(drop, target_is_directory=True)  # the folder itself replaced by a link
    assert read_untrusted(tmp_path / "linked" / "report.json", CAP).problem.startswith("its folder could not be opened")


def test_a_fifo_is_refused_without_blocking_where_an_ordinary_read_blocks(tmp_path):
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    blocked = threading.Thread(target=lambda: open(fifo, "rb").read(), daemon=True)
    blocked.start()
    blocked.join(timeout=0.5)
    assert blocked.is_alive(), "the control: an ordinary open waits for a writer forever"
    assert read_untrusted(fifo, CAP).problem == "it is a FIFO"
    with open(fifo, "wb"):
        pass  # release the control's reader
    blocked.join(timeout=5)


def test_folders_devices_hard_links_and_files_over_the_cap_are_refused(tmp_path):
    (tmp_path / "folder").mkdir()
    assert read_untrusted(tmp_path / "folder", CAP).problem == "it is a folder"
    (tmp_path / "null").symlink_to("/dev/null")
    assert read_untrusted(tmp_path / "null", CAP).problem == "it is a symbolic link"
    (tmp_path / "original").write_text("{}")
    os.link(tmp_path / "original", tmp_path / "hard.json")
    assert read_untrusted(tmp_path / "hard.json", CAP).problem == "it is a hard link to another file"
    with open(tmp_path / "huge.json", "wb") as handle:  # sparse: nothing is read to refuse it
        handle.truncate(40 * 1024 * 1024)
    assert "over the limit of 4,194,304" in read_untrusted(tmp_path / "huge.json", CAP).problem


def test_json_nested_past_the_bound_is_refused_and_read_json_never_raises(tmp_path):
    deep = b"[" * 100_000 + b"]" * 100_000
    try:
        json.loads(deep)
        raise AssertionError("the control: Python's parser cannot take it")
    except RecursionError:
        pass
    assert parse_untrusted_json(deep)[1].startswith("it is nested more than")
    assert parse_untrusted_json(b"[" * 70 + b"]" * 70)[1].startswith("it is nested more than")
    assert parse_untrusted_json(b'{"a": [1, {"b": 2}]}') == ({"a": [1, {"b": 2}]}, "")
    (tmp_path / "report.json").write_bytes(b'{"x": ' + deep + b"}")
    assert read_json(tmp_path / "report.json") is None


def test_keep_report_refuses_a_report_the_scorer_cannot_read(tmp_path):
    drop = fresh_folder(tmp_path / "drop")
    (drop / "report.json").write_text('{"tests": 5}')
    assert keep_report(drop / "report.json", tmp_path / "kept.json", CAP).endswith("its tests are not a list")
    assert not (tmp_path / "kept.json").exists()
    (drop / "report.json").write_text('{"tests": [{"nodeid": "t.py::a", "outcome": "passed"}]}')
    assert keep_report(drop / "report.json", tmp_path / "kept.json", CAP) == ""
    assert read_json(tmp_path / "kept.json") == {"tests": [{"nodeid": "t.py::a", "outcome": "passed"}]}


def test_clearing_a_folder_removes_links_and_never_what_they_name(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("the grader's")
    home = tmp_path / "state" / "home"
    home.mkdir(parents=True)
    (home / "link").symlink_to(outside, target_is_directory=True)
    (home / "locked").mkdir()
    (home / "locked" / "f").write_text("x")
    os.chmod(home / "locked", 0)
    clear_path(tmp_path / "state")
    assert not (tmp_path / "state").exists() and (outside / "keep.txt").read_text() == "the grader's"
    (tmp_path / "state").symlink_to(outside, target_is_directory=True)
    fresh_folder(tmp_path / "state")
    assert (tmp_path / "state").is_dir() and not (tmp_path / "state").is_symlink() and (outside / "keep.txt").exists()
    (tmp_path / "file").write_text("a file where a folder belongs")
    assert fresh_folder(tmp_path / "file").is_dir()


def test_a_tree_deeper_than_python_can_recurse_is_cleared(tmp_path):
    # Made as graded code makes it: each folder opened relative to its parent, so no path is ever long.
    state = tmp_path / "state"
    state.mkdir()
    parent = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(1500):  # shutil.rmtree recurses once per level: RecursionError at about 1,000
        os.mkdir("d" * 200, dir_fd=parent)
        child = os.open("d" * 200, os.O_RDONLY | os.O_DIRECTORY, dir_fd=parent)
        os.close(parent)
        parent = child
    os.close(os.open("bottom", os.O_CREAT | os.O_WRONLY, dir_fd=parent))
    os.close(parent)
    clear_path(state)
    assert not state.exists()


PEAK_SCRIPT = """
import resource, sys
from pathlib import Path
from grader.execute.supervisor import keep_report
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
problem = keep_report(Path(sys.argv[1]), Path(sys.argv[2]), 4 * 1024 * 1024)
print(before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, problem)
"""


def test_a_40_mb_report_costs_the_grader_no_memory(tmp_path):
    report = tmp_path / "report.json"
    with open(report, "wb") as handle:  # 40 MB of small nested lists: a parse costs about 50x its size
        handle.write(b"[" + b",".join([b"[[1],[2]]"] * (40 * 1024 * 1024 // 10)) + b"]")
    done = subprocess.run(
        [sys.executable, "-c", PEAK_SCRIPT, str(report), str(tmp_path / "kept.json")],
        capture_output=True,
        text=True,
        check=True,
    )
    before_kib, peak_kib, problem = done.stdout.split(maxsplit=2)
    assert "over the limit" in problem and not (tmp_path / "kept.json").exists()
    assert int(peak_kib) - int(before_kib) < 8 * 1024, f"{before_kib} KiB before, {peak_kib} KiB at the peak"
