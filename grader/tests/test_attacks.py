"""Malicious submissions (``fixtures/submissions/attack_*``): each earns what its honest code earns (0: they
are the starter plus an attack), nothing of the instructor's reaches what the student reads, and nothing
persists into later gradings.

Each defence is shown twice where it can be: the attack fails under the grader's isolation, and the same
attack *works* when the grading is run with ``--unsafe-no-sandbox`` (so the fixture is a real attack and
the defence is the isolation, not luck).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from grader.course.labs import load_course
from grader.evidence.layout import FEEDBACK_FILE, GRADESCOPE_FILE, SUMMARY_FILE
from grader.execute import supervisor
from grader.execute.cgroup import cgroup_support
from grader.execute.collect import build_rubric, cache_problem, rubric_key
from grader.execute.isolation import GRADED_UIDS, NOBODY, SETPRIV, Bubblewrap, Isolation, Unisolated, View
from grader.runners.local import GradingSetup, grade_submission, own_grader_problem
from grader.scoring.results import SubmissionResult
from grader.scoring.score import HELDOUT_REPORT_NOTE, rescore
from grader.tests.conftest import NO_BUBBLEWRAP, needs_bubblewrap
from grader.tests.corpus import DEMO_COURSE, corpus_names, expected, materialize, starter_copy

ATTACKS = [name for name in corpus_names() if expected(name).get("attack")]
#: Text that exists only in what students must never read: held-out tests and reference solutions
#: (from their sources), and what the attacks print when they got something.
SECRET_MARKERS = (
    "recognises the visible cases",
    "832040",
    "other texts than the visible tests use",
    "reference solution",
    "LEAKED:",
    "DAEMON-FORGED",
    "FAKE GRADER",
    "GRADER-TEST-SECRET",
)
ATTACK_PORT = 47613  # the port attack_reads_env phones


def student_facing(folder: Path) -> str:
    return (folder / FEEDBACK_FILE).read_text() + (folder / GRADESCOPE_FILE).read_text()


def summary(folder: Path) -> SubmissionResult:
    return SubmissionResult.from_dict(json.loads((folder / SUMMARY_FILE).read_text()))


def unisolated(setup: GradingSetup) -> GradingSetup:
    return replace(setup, options=replace(setup.options, isolation=Unisolated()))


def test_every_attack_class_of_the_corpus_is_there():
    assert {
        "attack_reads_reference",
        "attack_leaks_heldout",
        "attack_forges_events",
        "attack_daemon",
        "attack_poisons_cache",
        "attack_spares_canary",
        "attack_ships_grader",
        "attack_reads_env",
        "attack_hostile_leftovers",
        "attack_carries_heldout",
        "attack_reads_test_frames",
        "attack_escalates_as_root",
        "attack_keeps_keyring",
    } <= set(ATTACKS)


@needs_bubblewrap
@pytest.mark.parametrize("name", ATTACKS)
def test_an_attack_earns_only_its_honest_part_and_leaks_nothing(graded_corpus, name):
    """An attack earns what its ``expected.json`` says its honest part earns: 0 for all but a correct
    solution that also attacks."""
    result = summary(graded_corpus / name)
    honest = sum(lab.get("score", 0) + lab.get("heldout", 0) for lab in expected(name)["labs"].values())
    assert result.total["score"] == honest, f"{name}: the honest part of this submission earns {honest}: {result.total}"
    text = student_facing(graded_corpus / name)
    leaked = [marker for marker in SECRET_MARKERS if marker in text]
    assert not leaked, f"{name}: the student's feedback or results.json shows {leaked}"


@needs_bubblewrap
def test_without_isolation_the_same_attacks_do_get_the_reference_and_the_heldout_tests(demo_setup, tmp_path):
    setup = unisolated(demo_setup)
    stolen = grade_submission(materialize("attack_reads_reference", tmp_path / "a"), tmp_path / "ga", setup)
    assert stolen.lab("labA").score == stolen.lab("labA").max_score, "unisolated, the reference is readable"
    grade_submission(materialize("attack_leaks_heldout", tmp_path / "b"), tmp_path / "gb", setup)
    assert "recognises the visible cases" in student_facing(tmp_path / "gb"), "unisolated, held-out tests leak"


@needs_bubblewrap
def test_later_gradings_are_unchanged_by_the_attacks(graded_corpus, demo_setup, rubric_cache, tmp_path):
    course = load_course(DEMO_COURSE)
    for spec in course.labs:
        (entry,) = rubric_cache.glob(f"{spec.package}-{rubric_key(course, spec)}.json")
        assert cache_problem(json.loads(entry.read_text()), rubric_key(course, spec), spec) is None, entry
    again = build_rubric(course, list(course.labs), rubric_cache)
    assert again == demo_setup.rubric, "the rubric cache is as the pristine course collected it"
    reference = grade_submission(materialize("solution", tmp_path / "solution"), tmp_path / "graded", demo_setup)
    assert [(lab.score, lab.max_score) for lab in reference.labs] == [(16, 16), (7, 10)], "(labB: 3 GPU points pending)"


def test_a_poisoned_cache_entry_is_collected_again(demo_setup, rubric_cache, tmp_path, capsys):
    course = load_course(DEMO_COURSE)
    cache = tmp_path / "cache"
    build_rubric(course, list(course.labs), cache)
    (entry,) = cache.glob("labA_arith-*.json")
    data = json.loads(entry.read_text())
    for test in data["lab"]["tests"]:
        test["points"] = 1169
    entry.write_text(json.dumps(data))
    rubric = build_rubric(course, list(course.labs), cache)
    assert rubric.labs[0].max_score == 16 and "was not used" in capsys.readouterr().err
    data["digest"] = __import__("hashlib").sha256(json.dumps(data["lab"], sort_keys=True).encode()).hexdigest()
    entry.write_text(json.dumps(data))  # a consistent digest: the pristine files' points still disagree
    assert build_rubric(course, list(course.labs), cache).labs[0].max_score == 16
    assert "worth 1 points in the pristine files, not 1169" in capsys.readouterr().err


def _grade_cli(submission: Path, out: Path, rubric_cache: Path, *extra: str, cwd: Path | None = None):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "grader",
            "run",
            str(submission),
            "--out",
            str(out),
            "--course",
            str(DEMO_COURSE),
            "--cache-dir",
            str(rubric_cache),
            "--labs",
            "labA",
            "--min-test-timeout",
            "3",
            "--time-factor",
            "2",
            *extra,
        ],
        cwd=cwd or out.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _forged(out: Path) -> bool:
    return "DAEMON-FORGED" in (out / SUMMARY_FILE).read_text()


@needs_bubblewrap
def test_a_daemon_left_behind_dies_with_the_run(rubric_cache, tmp_path):
    submission = materialize("attack_daemon", tmp_path / "daemon")
    isolated, unsafe = tmp_path / "isolated", tmp_path / "unsafe"
    _grade_cli(submission, isolated, rubric_cache)
    _grade_cli(submission, unsafe, rubric_cache, "--unsafe-no-sandbox")
    deadline = time.monotonic() + 25  # the daemon rewrites what it finds for 20 s after it started
    while not _forged(unsafe) and time.monotonic() < deadline:
        time.sleep(0.5)
    if cgroup_support()[1]:  # no cgroup per run here: unisolated, nothing ends the daemon
        assert _forged(unsafe), "unisolated, the daemon outlives pytest and rewrites the results"
    else:
        assert not _forged(unsafe), "every member of the run's cgroup is killed when it ends, even unisolated"
    assert not _forged(isolated), "the isolated run's outputs are as the grader wrote them"
    assert rescore(isolated).to_dict() == summary(isolated).to_dict()


@needs_bubblewrap
def test_secrets_in_the_graders_environment_and_the_network_are_out_of_reach(demo_setup, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_API_TOKEN", "GRADER-TEST-SECRET")
    connections = []
    listener = socket.socket()
    try:
        listener.bind(("127.0.0.1", ATTACK_PORT))
    except OSError:
        pytest.skip(f"port {ATTACK_PORT} is in use")
    listener.listen()
    listener.settimeout(0.5)

    def accept():
        while not stop.is_set():
            try:
                connections.append(listener.accept()[0].recv(4096))
            except OSError:
                continue

    stop = threading.Event()
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        submission = materialize("attack_reads_env", tmp_path / "env")
        result = grade_submission(submission, tmp_path / "isolated", demo_setup, only_labs=["labA"])
        isolated_connections = list(connections)
        grade_submission(submission, tmp_path / "unsafe", unisolated(demo_setup), only_labs=["labA"])
    finally:
        stop.set()
        thread.join()
        listener.close()
    assert result.lab("labA").score == 0
    assert "GRADER-TEST-SECRET" not in (tmp_path / "isolated" / SUMMARY_FILE).read_text(), "no secret reaches it"
    assert "NETWORK-REACHED []" in (tmp_path / "isolated" / SUMMARY_FILE).read_text()
    assert isolated_connections == [], "the isolated process has no network"
    assert connections, "unisolated, the same code reaches the listener (the attack is real)"
    assert "GRADER-TEST-SECRET" not in (tmp_path / "unsafe" / SUMMARY_FILE).read_text(), (
        "the environment is an allowlist even without isolation"
    )


def test_python_m_grader_from_inside_a_submission_runs_the_course_grader(rubric_cache, tmp_path):
    submission = materialize("attack_ships_grader", tmp_path / "sub")
    out = tmp_path / "out"
    done = _grade_cli(Path("."), out, rubric_cache, *(["--unsafe-no-sandbox"] if NO_BUBBLEWRAP else []), cwd=submission)
    assert "FAKE GRADER" not in done.stdout + done.stderr, "the submission's own grader never runs"
    result = summary(out)
    assert result.total["score"] == 0 and any("grader/__main__.py" in flag for flag in result.flags), done.stderr


def test_a_grader_or_harness_imported_from_the_submission_is_refused(tmp_path, monkeypatch):
    import grader
    import labkit

    student = starter_copy(tmp_path / "student")
    assert own_grader_problem(student) is None, "the course's grader grading a student's copy"
    home = Path(grader.__file__).resolve().parents[1]
    assert own_grader_problem(home) is None, "a copy grading itself with its own grader and harness (grade-me)"
    (student / "labkit").mkdir(exist_ok=True)
    monkeypatch.setattr(labkit, "__file__", str(student / "labkit" / "__init__.py"))
    assert "`labkit` was imported from inside the submission" in own_grader_problem(student)


@needs_bubblewrap
def test_a_lab_folder_linked_to_the_reference_earns_nothing(demo_setup, tmp_path):
    submission = starter_copy(tmp_path / "student")
    for package in ("labA_arith", "labB_text"):
        (submission / package / ("arith.py" if package == "labA_arith" else "text.py")).unlink()
    shutil.rmtree(submission / "labA_arith")
    (submission / "labA_arith").symlink_to(DEMO_COURSE / "solutions" / "labA_arith", target_is_directory=True)
    result = grade_submission(submission, tmp_path / "graded", demo_setup)
    assert result.total["score"] == 0 and any("symbolic link" in flag for flag in result.flags)


# ---------------------------------------------------------------- what graded code leaves behind


def _heldout_lines(package: str = "labA_arith") -> set[str]:
    """Every line of a lab's held-out tests long enough to be recognised in a message."""
    return {
        line.strip()
        for path in (DEMO_COURSE / package / "heldout").glob("test_*.py")
        for line in path.read_text().splitlines()
        if len(line.strip()) >= 25
    }


@contextmanager
def one_state_for_every_process(root: Path, name: str):
    """The grader before per-process folders: one home and cache for every lab and part (the control)."""
    state, drop, private = root / "shared", root / name / "report", root / name / "private"
    for folder in (state / "home", state / "cache", drop, private):
        folder.mkdir(parents=True, exist_ok=True)
    yield state, drop, private


def test_a_heldout_process_leaves_nothing_a_later_process_prints(demo_setup, tmp_path):
    out = tmp_path / "graded"
    result = grade_submission(materialize("attack_carries_heldout", tmp_path / "sub"), out, demo_setup)
    text = student_facing(out)
    assert "CARRIED: nothing" in text, "lab B's visible tests ran and found no folder of an earlier process"
    assert not [line for line in _heldout_lines() if line in text]
    assert result.lab("labA").status == result.lab("labB").status == "graded"


def test_with_one_writable_state_for_every_process_the_heldout_tests_leak(demo_setup, tmp_path, monkeypatch):
    monkeypatch.setattr(supervisor, "process_folders", one_state_for_every_process)
    out = tmp_path / "graded"
    grade_submission(materialize("attack_carries_heldout", tmp_path / "sub"), out, demo_setup)
    assert [line for line in _heldout_lines() if line in student_facing(out)], "the attack is real"


def test_a_heldout_process_cannot_spell_its_tests_in_the_report_problem_a_student_reads(graded_corpus):
    """attack_leaks_by_report_error writes, in its held-out process, a malformed report whose parse error's
    line and column are bytes of the held-out tests: the student reads a fixed note; the position stays in
    the instructor's raw record (which shows the attack is real)."""
    folder = graded_corpus / "attack_leaks_by_report_error"
    text = student_facing(folder)
    assert "held-out tests: pytest's JSON report was not used (the submission's code left one" in text
    assert not re.search(r"line \d+ column \d+", text), "no number the held-out process chose"
    raw = (folder / "raw" / "labA" / "heldout" / "run.json").read_text()
    assert re.search(r"line \d+ column \d+", raw), "the instructor's record keeps what was wrong"


#: Removes attack_keeps_keyring's key from the running user's keyring (a key outlives every process) and
#: prints whether there was one (x86_64's ``keyctl`` number: search, then invalidate).
REMOVE_KEPT_KEY = """
import ctypes
KEYCTL, KEYCTL_SEARCH, KEYCTL_INVALIDATE, KEY_SPEC_USER_KEYRING = 250, 10, 21, -4
libc = ctypes.CDLL(None)
libc.syscall.restype = ctypes.c_long
key = libc.syscall(ctypes.c_long(KEYCTL), ctypes.c_long(KEYCTL_SEARCH), ctypes.c_long(KEY_SPEC_USER_KEYRING),
                   b"user", b"course-notes", ctypes.c_long(0))
if key > 0:
    libc.syscall(ctypes.c_long(KEYCTL), ctypes.c_long(KEYCTL_INVALIDATE), ctypes.c_long(key))
print(key > 0)
"""
needs_x86_64 = pytest.mark.skipif(os.uname().machine != "x86_64", reason="the key's cleanup uses x86_64's numbers")


def _remove_kept_key(graded_user: bool) -> bool:
    """Remove the key from the grader's user's keyring, or (``graded_user``) from :data:`NOBODY`'s (the
    one uid the controls below give every graded process)."""
    drop = [SETPRIV, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] if graded_user else []
    done = subprocess.run([*drop, sys.executable, "-c", REMOVE_KEPT_KEY], capture_output=True, text=True, check=True)
    return done.stdout.strip() == "True"


def _keyring_attack(setup: GradingSetup, out: Path, graded_user: bool) -> tuple[str, bool]:
    """Grade attack_keeps_keyring under ``setup``: what its student reads, and whether it left its key."""
    _remove_kept_key(graded_user)
    try:
        grade_submission(materialize("attack_keeps_keyring", out / "sub"), out / "graded", setup)
    finally:
        left = _remove_kept_key(graded_user)
    return student_facing(out / "graded"), left


@needs_bubblewrap
def test_a_heldout_process_leaves_nothing_in_the_kernel_keyring(graded_corpus):
    text = student_facing(graded_corpus / "attack_keeps_keyring")
    assert "KEY-CARRIED: nothing (errno 38)" in text, "lab B's visible tests found no key (ENOSYS: refused)"
    assert not [line for line in _heldout_lines() if line in text]


@needs_x86_64
def test_unisolated_the_keyring_carries_the_heldout_tests_to_a_later_process(demo_setup, tmp_path):
    text, left = _keyring_attack(unisolated(demo_setup), tmp_path, graded_user=False)
    assert left, "the unisolated held-out process left its key in this user's keyring"
    assert [line for line in _heldout_lines() if line in text], "the attack is real: lab B prints the key"


@needs_x86_64
@needs_bubblewrap
@pytest.mark.skipif(os.geteuid() != 0, reason="graded by root, each graded process is a host uid of its own")
def test_without_the_seccomp_filter_a_uid_per_process_still_carries_nothing(demo_setup, tmp_path, monkeypatch):
    """The second wall alone: the filter off, the held-out process's keyring is its own uid's, which no
    later process has."""
    monkeypatch.setattr("grader.execute.isolation.filter_problem", lambda: "the control: no filter")
    text, _left = _keyring_attack(demo_setup, tmp_path, graded_user=True)
    assert "KEY-CARRIED: nothing (errno 126)" in text, "lab B's visible tests found no key (ENOKEY: not theirs)"
    assert not [line for line in _heldout_lines() if line in text]


@needs_x86_64
@needs_bubblewrap
@pytest.mark.skipif(os.geteuid() != 0, reason="graded by root, each graded process is a host uid of its own")
def test_with_one_shared_uid_and_no_filter_the_keyring_carries_them(demo_setup, tmp_path, monkeypatch):
    """The control of both walls: no filter, and every graded process the same host uid (nobody, as the
    grader once did), every other guarantee kept."""
    monkeypatch.setattr("grader.execute.isolation.filter_problem", lambda: "the control: no filter")
    monkeypatch.setattr("grader.execute.isolation.fresh_graded_uid", lambda: NOBODY)
    text, left = _keyring_attack(demo_setup, tmp_path, graded_user=True)
    assert left, f"uid {NOBODY}'s keyring kept the held-out process's key"
    assert [line for line in _heldout_lines() if line in text], "and a later process of that uid read it"


def _grader_environ() -> bytes:
    return Path("/proc/self/environ").read_bytes()[:200]


def _raw_files(out: Path) -> dict[str, bytes]:
    return {str(path.relative_to(out)): path.read_bytes() for path in (out / "raw").rglob("*") if path.is_file()}


def test_a_report_replaced_by_a_link_a_deep_nest_and_a_broken_home_are_the_submissions(demo_setup, tmp_path):
    out = tmp_path / "graded"
    result = grade_submission(
        materialize("attack_hostile_leftovers", tmp_path / "sub"), out, demo_setup, only_labs=["labA"]
    )
    lab = result.lab("labA")
    assert lab.status == "graded", lab.reason
    assert "report.json: pytest's JSON report was not used: it is a symbolic link" in lab.reason
    assert HELDOUT_REPORT_NOTE in lab.reason, "the held-out part's problem in fixed words (its own could spell them)"
    assert "it is nested more than" in (out / "raw" / "labA" / "heldout" / "run.json").read_text()
    raw = _raw_files(out)
    assert not [name for name, data in raw.items() if _grader_environ() in data], "the grader's environment"
    assert {"raw/labA/events.jsonl", "raw/labA/heldout/events.jsonl", "raw/labA/heldout/run.json"} <= set(raw)
    assert not (out / "raw" / "labA" / "report.json").exists(), "a refused report is not kept"
    assert [test.outcome for test in lab.tests if test.heldout] and rescore(out).to_dict() == summary(out).to_dict()


def _keep_report_following_links(report: Path, kept: Path, cap: int) -> str:
    """The grader's report copy before untrusted reads: ``is_file`` and ``read_bytes`` follow links."""
    if report.is_file() and report.stat().st_size <= cap:
        kept.write_bytes(report.read_bytes())
    return ""


def test_a_supervisor_that_follows_links_copies_its_own_environment(demo_setup, tmp_path, monkeypatch):
    monkeypatch.setattr(supervisor, "keep_report", _keep_report_following_links)
    out = tmp_path / "graded"
    grade_submission(materialize("attack_hostile_leftovers", tmp_path / "sub"), out, demo_setup, only_labs=["labA"])
    assert _grader_environ() in (out / "raw" / "labA" / "report.json").read_bytes(), "the attack is real"


FRAME_ATTACK = (
    Path(__file__).parent / "fixtures" / "submissions" / "attack_reads_test_frames" / "labA_arith" / "arith.py"
)
#: A test calling the frame-reading submission, run in a fresh interpreter with or without the guard.
_FRAME_PROBE = """
import importlib.util, sys
from grader.execute.introspection_guard import install
refused = []
if sys.argv[2] == "guarded":
    install([sys.argv[1]], lambda what, file, line: refused.append(what))
spec = importlib.util.spec_from_file_location("arith", sys.argv[1])
arith = importlib.util.module_from_spec(spec)
spec.loader.exec_module(arith)

def test_add():
    a, b = 2, 40
    return arith.add(a, b)

def test_fib():
    return [arith.fib(n) for n in range(8)] == [0, 1, 1, 2, 3, 5, 8, 13]

def test_torch_like_library_call():
    return sys._getframe(0).f_code.co_name  # not a student file: never refused

for test in (test_add, test_fib, test_torch_like_library_call):
    try:
        print(test.__name__, test())
    except RuntimeError as error:
        print(test.__name__, "refused", type(error).__name__)
print("refusals", sorted(set(refused)))
"""


@pytest.mark.parametrize("mode", ["unguarded", "guarded"])
def test_a_student_file_reading_the_tests_frames_is_refused(mode, tmp_path):
    script = tmp_path / "test_frames.py"  # a file: inspect.stack() reads the tests' source lines from it
    script.write_text(_FRAME_PROBE)
    done = subprocess.run(
        [sys.executable, str(script), str(FRAME_ATTACK), mode],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines["test_torch_like_library_call"] == "test_torch_like_library_call", "other code's calls pass"
    if mode == "unguarded":  # the control: the attack is real
        assert (lines["test_add"], lines["test_fib"]) == ("42", "True"), done.stdout
        assert lines["refusals"] == "[]"
    else:
        assert lines["test_add"].startswith("refused") and lines["test_fib"].startswith("refused"), done.stdout
        assert "sys._getframe" in lines["refusals"], done.stdout


class RootOnlySecret(Bubblewrap):
    """The grader's isolation, which also leaves a root-only file (mode 0600) in the sandbox's working
    folder before each process starts, and records who owns what the process left in the folders it
    could write, on the host, before the grader cleans them up."""

    SECRET = "ROOT-ONLY-SECRET"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.left: dict[Path, os.stat_result] = {}
        self._view: View | None = None

    def command(self, argv, env, view):
        secret = view.cwd / self.SECRET
        secret.write_text("GRADER-TEST-SECRET only root may read this\n")
        secret.chmod(0o600)
        self._view = view
        return super().command(argv, env, view)

    def exit_status(self, code):
        for folder in [*self._view.writable, self._view.private]:
            for path in [folder, *folder.rglob("*")]:
                self.left[path] = path.lstat()
        return super().exit_status(code)


def _grade_as_root_attack(demo_setup, tmp_path, isolation) -> tuple[str, RootOnlySecret | Isolation]:
    setup = replace(demo_setup, options=replace(demo_setup.options, isolation=isolation))
    grade_submission(
        materialize("attack_escalates_as_root", tmp_path / "sub"), tmp_path / "graded", setup, only_labs=["labA"]
    )
    return student_facing(tmp_path / "graded"), isolation


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="what a grader started by root lets graded code do")


@needs_root
@needs_bubblewrap
def test_graded_by_root_the_code_is_an_unprivileged_host_user(demo_setup, tmp_path):
    text, isolation = _grade_as_root_attack(demo_setup, tmp_path, RootOnlySecret(sys.executable, DEMO_COURSE))
    assert "LEAKED:" not in text and "GRADER-TEST-SECRET" not in text, "root-only files stay unreadable"
    # student-facing text names no path of the grader's machine: /etc/shadow is shown as .../shadow
    assert re.search(r"DENIED (/etc|\.\.\.)/shadow: Permission denied", text), text[:2000]
    assert "DENIED ROOT-ONLY-SECRET: Permission denied" in text
    uid, euid = map(int, re.search(r"UID (\d+) EUID (\d+) GROUPS \[\]", text).groups())
    assert uid == euid and uid in GRADED_UIDS, f"a host uid of its own, no groups: {uid}, {euid}"
    assert "CHOWNED-TO-ROOT" not in text
    mount = text.split("HOME-MOUNT ", 1)[1].split(" ", 1)[0]
    assert "nosuid" in mount.split(","), f"its writable folders are mounted nosuid: {mount}"
    made = {path: info for path, info in isolation.left.items() if path.name in ("setuid-python", "left-in-tmp")}
    assert {path.name for path in made} == {"setuid-python", "left-in-tmp"}, (
        f"the attack left: {sorted(isolation.left)}"
    )
    # each process's own uid (the lab's visible and held-out processes have two): never root, never an account's
    assert all(info.st_uid in GRADED_UIDS and info.st_gid == info.st_uid for info in made.values()), made
    setuid = next(info for path, info in made.items() if path.name == "setuid-python")
    assert setuid.st_mode & stat.S_ISUID, "the setuid bit is set, and harmless: nobody's, on a nosuid mount"
    root_owned = [path for path, info in isolation.left.items() if info.st_uid == 0 and not stat.S_ISDIR(info.st_mode)]
    assert root_owned == [], f"nothing it wrote is root's: {root_owned}"


@needs_root
@needs_bubblewrap
def test_without_dropping_root_the_same_attack_reads_root_only_files(demo_setup, tmp_path):
    """The controls: unisolated, and under a user namespace whose nobody is mapped onto root."""
    unisolated_text, _ = _grade_as_root_attack(demo_setup, tmp_path / "none", Unisolated())
    assert "LEAKED: 'root:" in unisolated_text and "CHOWNED-TO-ROOT" in unisolated_text
    namespaced = RootOnlySecret(sys.executable, DEMO_COURSE, as_root=False)
    text, _ = _grade_as_root_attack(demo_setup, tmp_path / "userns", namespaced)
    assert "LEAKED: 'root:" in text and "LEAKED: 'GRADER-TEST-SECRET" in text, (
        "nobody in a user namespace is root outside"
    )
    made = [info for path, info in namespaced.left.items() if path.name == "setuid-python"]
    assert made and made[0].st_uid == 0, "and what it leaves is root's"
