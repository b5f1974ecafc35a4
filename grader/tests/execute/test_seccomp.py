"""The seccomp filter (:mod:`grader.execute.seccomp`): under the grader's isolation the kernel keyring is
closed (``add_key`` fails with ENOSYS), while the same call outside the sandbox works (the control)."""

from __future__ import annotations

import errno
import json
import subprocess
import sys

import pytest

from grader.execute.seccomp import (
    INSTRUCTION,
    JUMP_AT_LEAST,
    JUMP_EQUAL,
    REFUSAL_ERRNO,
    RET_ERRNO,
    RETURN,
    filter_problem,
    key_filter,
)
from grader.tests.conftest import needs_bubblewrap
from grader.tests.execute.sandboxed import run_isolated

#: ``add_key("user", DESCRIPTION, "text", KEY_SPEC_USER_KEYRING)``, then the key revoked again (a key
#: left in a uid's user keyring outlives the process), printed as ``[uid, key or -1, errno]``.
ADD_KEY = """
import ctypes, json, os, platform
ADD_KEY, KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
KEY_SPEC_USER_KEYRING, KEYCTL_INVALIDATE = -4, 21
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
key = libc.syscall(ctypes.c_long(ADD_KEY), b"user", b"grader-seccomp-test", b"text", ctypes.c_size_t(4),
                   ctypes.c_int(KEY_SPEC_USER_KEYRING))
failure = ctypes.get_errno() if key < 0 else 0
if key > 0:
    libc.syscall(ctypes.c_long(KEYCTL), ctypes.c_int(KEYCTL_INVALIDATE), ctypes.c_int(key))
print(json.dumps([os.getuid(), key, failure]))
"""
needs_known_syscalls = pytest.mark.skipif(filter_problem() is not None, reason=str(filter_problem()))


@needs_bubblewrap
@needs_known_syscalls
def test_graded_code_cannot_add_a_key_to_its_users_keyring():
    uid, key, failure = json.loads(run_isolated(ADD_KEY).stdout)
    assert (key, failure) == (-1, errno.ENOSYS), f"uid {uid}: key {key}, errno {failure}"


@needs_known_syscalls
def test_outside_the_sandbox_the_same_call_adds_a_key():
    done = subprocess.run([sys.executable, "-c", ADD_KEY], capture_output=True, text=True, timeout=60, check=True)
    uid, key, failure = json.loads(done.stdout)
    assert key > 0 and failure == 0, "the control: the kernel has keyrings and the call is right"


def test_the_filter_is_whole_instructions_ending_in_a_verdict_with_jumps_inside_it():
    program = key_filter()
    instructions = list(INSTRUCTION.iter_unpack(program))
    assert len(program) == len(instructions) * INSTRUCTION.size and len(instructions) <= 4096  # BPF_MAXINSNS
    for index, (code, if_true, if_false, _value) in enumerate(instructions):
        if code == JUMP_EQUAL or code == JUMP_AT_LEAST:
            assert index + 1 + max(if_true, if_false) < len(instructions), f"instruction {index} jumps past the end"
    assert instructions[-1] == (RETURN, 0, 0, RET_ERRNO | REFUSAL_ERRNO)
    assert filter_problem("ppc64le") is not None and filter_problem("x86_64") is None
