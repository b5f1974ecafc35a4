"""A stand-in container engine for the container runner's tests (``docker``'s command line, no isolation).

    python fake_engine.py info | run ... IMAGE ARGS... | kill NAME | inspect --format F NAME | rm --force NAME

``run`` reads its bind mounts and, depending on the file ``FAKE_MODE`` in the submission (default
``grade``), grades it with the host's grader (the image's entry point, with the demo course), hangs
until killed, dies as an out-of-memory kill would (before grading, or after the first lab), or exits
with an error; an unknown image fails as docker's would.
Every call is logged to ``$FAKE_ENGINE_STATE/calls.jsonl`` so the tests can check what was asked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

STATE = Path(os.environ["FAKE_ENGINE_STATE"])
COURSE = os.environ["FAKE_ENGINE_COURSE"]
IMAGE = "course:test"


def mounts(argv: list[str]) -> dict[str, str]:
    """target -> source of every ``--mount type=bind,source=...,target=...``."""
    found = {}
    for flag, value in zip(argv, argv[1:]):
        if flag == "--mount":
            fields = dict(part.partition("=")[::2] for part in value.split(","))
            found[fields["target"]] = fields["source"]
    return found


def run(argv: list[str]) -> int:
    name = argv[argv.index("--name") + 1]
    paths = mounts(argv)
    grader_args = argv[argv.index(IMAGE) + 1 :] if IMAGE in argv else None
    if grader_args is None:
        print(f"Error: {argv[-1]}: image not known", file=sys.stderr)
        return 125
    inside = [paths.get(arg, arg) for arg in grader_args]
    submission = Path(inside[1])
    mode_file = submission / "FAKE_MODE"
    mode = mode_file.read_text().strip() if mode_file.is_file() else "grade"
    (STATE / f"{name}.pid").write_text(str(os.getpid()))
    if mode == "hang":
        time.sleep(600)
    if mode == "oom":
        (STATE / f"{name}.oom").touch()
        return 137
    if mode == "broken":
        print("the entry point crashed before grading")
        return 1
    command = [sys.executable, "-m", "grader", *inside, "--course", COURSE, "--cache-dir", str(STATE / "cache")]
    if mode == "oom-after-labA":  # the first lab is graded, then the memory limit is hit
        subprocess.run([*command, "--labs", "labA"], check=False)
        (Path(inside[3]) / "summary.json").unlink()
        (STATE / f"{name}.oom").touch()
        return 137
    return subprocess.run(command, check=False).returncode


def main(argv: list[str]) -> int:
    with open(STATE / "calls.jsonl", "a") as log:
        log.write(json.dumps(argv) + "\n")
    verb = argv[0]
    if verb == "info":
        return int(os.environ.get("FAKE_ENGINE_INFO_EXIT", "0"))
    if verb == "run":
        return run(argv)
    if verb == "kill":
        pid_file = STATE / f"{argv[1]}.pid"
        for _ in range(100):  # a slow machine may not have started the "container" yet
            if pid_file.is_file() and pid_file.read_text():
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
                break
            time.sleep(0.1)
        return 0
    if verb == "inspect":
        print("true" if (STATE / f"{argv[-1]}.oom").exists() else "false")
        return 0
    if verb == "rm":
        return 0
    print(f"fake engine: unknown verb {verb}", file=sys.stderr)
    return 125


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
