"""The introspection guard refuses a student file's reach for frames, never what correct code does.

Audit hooks cannot be removed, so each case runs in a fresh interpreter.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

STUDENT = """
import inspect, sys, traceback

def uses_signature(fn):
    return "inplace" in inspect.signature(fn).parameters

def prints_its_own_traceback():
    try:
        raise ValueError("boom")
    except ValueError:
        return "ValueError: boom" in traceback.format_exc()

def reads_callers_frame():
    return sys._getframe(1).f_locals

def reads_frame_from_traceback():
    try:
        raise ValueError
    except ValueError as error:
        return error.__traceback__.tb_frame.f_back.f_locals
"""

DRIVER = """
import importlib.util, sys
from grader.execute.introspection_guard import IntrospectionRefused, install
refusals = []
install([sys.argv[1]], lambda what, file, line: refusals.append(what))
spec = importlib.util.spec_from_file_location("student", sys.argv[1])
student = importlib.util.module_from_spec(spec); spec.loader.exec_module(student)
import torch
secret = 42
for name in ("uses_signature", "prints_its_own_traceback", "reads_callers_frame", "reads_frame_from_traceback"):
    try:
        value = getattr(student, name)(*([torch.nn.ReLU] if name == "uses_signature" else []))
        print(name, "ok", value if not isinstance(value, dict) else "secret" in value)
    except IntrospectionRefused:
        print(name, "refused")
print("refusals", len(refusals))
"""


def test_correct_code_passes_the_guard_and_frame_reads_are_refused(tmp_path):
    student = tmp_path / "student.py"
    student.write_text(textwrap.dedent(STUDENT), encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", DRIVER, str(student)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines["uses_signature"] == "ok True", "inspect.signature reads __code__: a correct student's call"
    assert lines["prints_its_own_traceback"] == "ok True", "traceback.format_exc() reads tb_frame for formatting"
    assert lines["reads_callers_frame"] == "refused"
    assert lines["reads_frame_from_traceback"] == "refused"
    assert lines["refusals"] == "2"
