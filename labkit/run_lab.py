"""``python -m labkit.run_lab [pytest arguments]``: pytest, resumed after any test that crashes it.

What ``nox -s labNN`` runs. A test that kills the interpreter (``Fatal Python error: Aborted`` from a
kernel storing out of bounds, a segfault, ``os._exit``) would end the whole run with no step table
and no word of which test it was. Here pytest runs as a child process with an event log
(:mod:`labkit.event_log`); when the child dies before the end of its session, this names the test
that was running, and starts pytest again with the same arguments, leaving out every test already
started. The last process prints the step table of the whole run, crashed tests counted as failed,
and this ends with one line per crash. The exit status is pytest's, or 1 when a test crashed.

A crash before any test started (in collection, say) is not resumed: there is nothing to skip.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from labkit import event_log

#: pytest's exit status when every test was left out (a resume after the last test crashed).
NO_TESTS_COLLECTED = 5


def describe_exit(returncode: int) -> str:
    """``killed by SIGABRT`` for a signal, ``exited with status 0`` otherwise."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


def run_pytest(args: Sequence[str], log: Path, resume: bool) -> int:
    """One pytest process; Ctrl-C reaches it (same process group) and this waits for it to finish."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        *args,
        f"--labkit-events={log}",
        *(["--labkit-resume"] if resume else []),
    ]
    child = subprocess.Popen(command)
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt:  # pytest got the same SIGINT: let it print what it has and stop
            continue


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    handle, name = tempfile.mkstemp(prefix="labkit-events-", suffix=".jsonl")
    os.close(handle)
    log = Path(name)
    try:
        returncode = run_pytest(args, log, resume=False)
        while True:
            events = event_log.read_events(log)
            if event_log.finished_session(events):
                break
            crashed = event_log.unfinished(events)
            how = describe_exit(returncode)
            if not crashed:  # --help and --version end without a session too; a signal means a crash
                if returncode < 0:
                    print(f"\nlabkit: pytest {how} before any test ran (see its output above); nothing to resume",
                          flush=True)  # fmt: skip
                    return 1
                return returncode
            writer = event_log.EventLog(log)
            for nodeid in crashed:
                writer.write(
                    event_log.CRASHED,
                    nodeid=nodeid,
                    how=how,
                    message=f"crashed the test process ({how}): its output above shows where",
                )
            writer.close()
            print(
                f"\nlabkit: the test process {how} during {', '.join(crashed)}; "
                "running the rest of the tests in a new process",
                flush=True,
            )
            returncode = run_pytest(args, log, resume=True)
        crashes = event_log.crashes(event_log.read_events(log))
        if crashes:
            print(
                f"labkit: {len(crashes)} test(s) crashed the test process (counted as failed above); the run "
                "resumed after each:",
                flush=True,
            )
            for event in crashes:
                print(f"  {event['nodeid']} ({event['how']})", flush=True)
            return returncode if returncode not in (0, NO_TESTS_COLLECTED) else 1
        return returncode
    finally:
        log.unlink(missing_ok=True)


if __name__ == "__main__":
    raise SystemExit(main())
