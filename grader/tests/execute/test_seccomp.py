"""The seccomp filter (:mod:`grader.execute.seccomp`): under the grader's isolation the kernel keyring is
closed (``add_key`` fails with ENOSYS), while the same call outside the sandbox works (the control); and
the program's verdict for every ABI it knows or refuses, on an interpreter (no aarch64 machine needed)."""

from __future__ import annotations

import errno
import json
import subprocess
import sys

import pytest

from grader.execute.seccomp import (
    ARCH_OFFSET,
    AUDIT_ARCH_AARCH64,
    AUDIT_ARCH_X86_64,
    INSTRUCTION,
    JUMP_AT_LEAST,
    JUMP_EQUAL,
    LOAD_WORD,
    NR_OFFSET,
    REFUSAL_ERRNO,
    RET_ALLOW,
    RET_ERRNO,
    RETURN,
    X32_SYSCALL_BIT,
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


def verdict(program: bytes, arch: int, nr: int) -> int:
    """What the kernel would answer a call ``nr`` through ``arch``: the program run on a tiny interpreter
    of the four instructions it uses."""
    instructions, pc, loaded = list(INSTRUCTION.iter_unpack(program)), 0, 0
    while True:
        code, if_true, if_false, value = instructions[pc]
        if code == RETURN:
            return value
        if code == LOAD_WORD:
            loaded, pc = {ARCH_OFFSET: arch, NR_OFFSET: nr}[value], pc + 1
            continue
        taken = loaded == value if code == JUMP_EQUAL else loaded >= value
        assert code in (JUMP_EQUAL, JUMP_AT_LEAST), f"instruction {pc}: unknown code {code:#x}"
        pc += 1 + (if_true if taken else if_false)


REFUSED = RET_ERRNO | REFUSAL_ERRNO
AUDIT_ARCH_I386 = 0x40000003


@pytest.mark.parametrize(
    "arch, nr, want",
    [
        *[(AUDIT_ARCH_X86_64, nr, REFUSED) for nr in (248, 249, 250)],
        *[(AUDIT_ARCH_X86_64, nr, RET_ALLOW) for nr in (0, 39, 247, 251)],  # read, getpid, the neighbours
        *[(AUDIT_ARCH_X86_64, X32_SYSCALL_BIT | nr, REFUSED) for nr in (39, 248)],  # x32: a bypass otherwise
        *[(AUDIT_ARCH_AARCH64, nr, REFUSED) for nr in (217, 218, 219)],
        *[(AUDIT_ARCH_AARCH64, nr, RET_ALLOW) for nr in (63, 172, 248)],  # read, getpid, x86_64's add_key
        *[(AUDIT_ARCH_I386, nr, REFUSED) for nr in (20, 286)],  # int 0x80: any other ABI, every call
    ],
)
def test_the_filter_refuses_the_key_calls_of_each_abi_and_every_call_of_others(arch, nr, want):
    assert verdict(key_filter(), arch, nr) == want


def test_the_filter_is_whole_instructions_and_only_known_machines_get_it():
    program = key_filter()
    assert len(program) % INSTRUCTION.size == 0 and len(program) // INSTRUCTION.size <= 4096  # BPF_MAXINSNS
    assert filter_problem("ppc64le") is not None and filter_problem("x86_64") is None
