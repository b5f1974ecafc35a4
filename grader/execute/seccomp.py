"""A seccomp filter that closes the kernel keyring to graded code: ``add_key``, ``request_key`` and
``keyctl`` fail with ``ENOSYS``.

**Why.** The kernel keeps one *user keyring* per uid, outside every namespace bubblewrap makes, and it
outlives the processes that fill it. Graded by a normal user, every graded process is that user on the
host; a held-out process could leave the held-out tests' text there (``add_key("user", "notes", text,
KEY_SPEC_USER_KEYRING)``) for a later grading's visible tests to read and print. (Graded by root, each
process has a host uid of its own, :mod:`grader.execute.isolation`, whose keyring no later process
shares: the filter is then a second wall.) No graded code needs a keyring, so the three system calls
that reach one are refused.

**How.** seccomp (``man 2 seccomp``) runs a small classic-BPF program at every system call a process
makes. The program reads a ``struct seccomp_data``, whose first two fields are the call's number
(``nr``, offset 0) and the ABI it came through (``arch``, offset 4, an ``AUDIT_ARCH_*`` value), and
returns a verdict: ``SECCOMP_RET_ALLOW``, or ``SECCOMP_RET_ERRNO | e`` (the call fails with errno ``e``
without running). The filter is inherited by every child and cannot be removed. bubblewrap installs it
for us (``bwrap --seccomp FD`` reads the compiled program from a descriptor, just before it starts the
graded command), so no C library (libseccomp) is needed: :func:`key_filter` assembles the program here,
one 8-byte ``struct sock_filter {u16 code; u8 jt; u8 jf; u32 k}`` per instruction.

**Which numbers.** A call's number depends on the ABI. The program knows two:

- ``x86_64`` (``AUDIT_ARCH_X86_64``): ``add_key`` 248, ``request_key`` 249, ``keyctl`` 250. The *x32*
  ABI enters through the same ``arch`` with bit 30 set in ``nr`` (``__X32_SYSCALL_BIT``); a filter that
  only compared 248-250 would let ``0x40000000 + 248`` through, so every x32 call is refused (no graded
  program is built for x32);
- ``aarch64`` (``AUDIT_ARCH_AARCH64``): 217, 218, 219 (the generic table).

Any other ``arch`` (a 32-bit call on the same machine: ``int 0x80`` on x86_64, an arm32 program on
aarch64) has numbers of its own the program does not list, so *every* call through it is refused. On a
machine of another architecture (:func:`filter_problem`), no filter is installed, and the grader says so.

**Why ENOSYS, not EPERM.** ``ENOSYS`` is what a kernel built without keyrings (``CONFIG_KEYS=n``)
answers, a case every library that uses keyrings already handles by doing without; ``EPERM`` reads as
"this key exists but is not yours", an error to report, not a feature to skip.
"""

from __future__ import annotations

import errno
import os
import platform
import struct

#: ``seccomp_data`` field offsets (``include/uapi/linux/seccomp.h``).
NR_OFFSET, ARCH_OFFSET = 0, 4
#: ``AUDIT_ARCH_*`` values (``include/uapi/linux/audit.h``): the machine type, 64-bit and little-endian flags.
AUDIT_ARCH_X86_64, AUDIT_ARCH_AARCH64 = 0xC000003E, 0xC00000B7
#: x32 system calls are x86_64's with this bit set in ``nr``.
X32_SYSCALL_BIT = 0x40000000
#: ``add_key``, ``request_key`` and ``keyctl`` per ABI (``arch/x86/entry/syscalls/syscall_64.tbl``,
#: ``include/uapi/asm-generic/unistd.h``).
KEY_SYSCALLS = {AUDIT_ARCH_X86_64: (248, 249, 250), AUDIT_ARCH_AARCH64: (217, 218, 219)}
#: ``platform.machine()`` of the machines whose native ABI :data:`KEY_SYSCALLS` lists.
MACHINES = {
    "x86_64": AUDIT_ARCH_X86_64,
    "amd64": AUDIT_ARCH_X86_64,
    "aarch64": AUDIT_ARCH_AARCH64,
    "arm64": AUDIT_ARCH_AARCH64,
}
#: The errno a refused call fails with (see the module docstring).
REFUSAL_ERRNO = errno.ENOSYS

#: Classic-BPF opcodes (``include/uapi/linux/bpf_common.h``): load a 32-bit word of ``seccomp_data``,
#: jump if equal / greater or equal to a constant, return a constant.
LOAD_WORD = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
JUMP_EQUAL = 0x05 | 0x10 | 0x00  # BPF_JMP | BPF_JEQ | BPF_K
JUMP_AT_LEAST = 0x05 | 0x30 | 0x00  # BPF_JMP | BPF_JGE | BPF_K
RETURN = 0x06 | 0x00  # BPF_RET | BPF_K
#: Verdicts (``include/uapi/linux/seccomp.h``).
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
#: One instruction: ``struct sock_filter`` in the machine's byte order.
INSTRUCTION = struct.Struct("=HBBI")


class Program:
    """A classic-BPF program under construction, with named jump targets.

    A conditional jump skips ``jt`` instructions when true and ``jf`` when false (0: the next one);
    :meth:`jump` takes labels instead and :meth:`assemble` turns them into those counts.
    """

    def __init__(self) -> None:
        self.instructions: list[tuple[int, str | int, str | int, int]] = []
        self.labels: dict[str, int] = {}

    def load(self, offset: int) -> None:
        self.instructions.append((LOAD_WORD, 0, 0, offset))

    def jump(self, code: int, value: int, if_true: str | None = None, if_false: str | None = None) -> None:
        """Compare the loaded word with ``value``; go to the label ``if_true``/``if_false`` (None: on)."""
        self.instructions.append((code, if_true or 0, if_false or 0, value))

    def ret(self, verdict: int) -> None:
        self.instructions.append((RETURN, 0, 0, verdict))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.instructions)

    def assemble(self) -> bytes:
        """The program as bwrap reads it: every label resolved to a forward skip (BPF only jumps forward)."""
        out = bytearray()
        for index, (code, if_true, if_false, value) in enumerate(self.instructions):
            skips = [
                target if isinstance(target, int) else self.labels[target] - index - 1 for target in (if_true, if_false)
            ]
            if not all(0 <= skip <= 255 for skip in skips):
                raise ValueError(f"instruction {index}: a jump out of range ({skips})")
            out += INSTRUCTION.pack(code, *skips, value)
        return bytes(out)


def key_filter() -> bytes:
    """The compiled filter: for each ABI of :data:`KEY_SYSCALLS`, refuse its three key calls (and x32),
    allow the rest; refuse every call of any other ABI."""
    program = Program()
    program.load(ARCH_OFFSET)
    arches = list(KEY_SYSCALLS.items())
    for position, (arch, numbers) in enumerate(arches):
        program.label(f"arch{position}")
        not_this = f"arch{position + 1}" if position + 1 < len(arches) else "refuse"
        program.jump(JUMP_EQUAL, arch, if_false=not_this)
        program.load(NR_OFFSET)
        if arch == AUDIT_ARCH_X86_64:
            program.jump(JUMP_AT_LEAST, X32_SYSCALL_BIT, if_true="refuse")
        for number in numbers:
            program.jump(JUMP_EQUAL, number, if_true="refuse")
        program.ret(RET_ALLOW)
    program.label("refuse")
    program.ret(RET_ERRNO | REFUSAL_ERRNO)
    return program.assemble()


def filter_problem(machine: str | None = None) -> str | None:
    """Why no filter is installed on ``machine`` (default: this one), None when it is."""
    machine = machine or platform.machine()
    if machine.lower() in MACHINES:
        return None
    return f"no seccomp filter for {machine} (only x86_64 and aarch64 system call numbers are known)"


def filter_descriptor() -> int:
    """A fresh descriptor holding :func:`key_filter`, read from its start (bwrap reads it to its end, so
    every process needs its own); the caller passes it to the child and closes it."""
    fd = os.memfd_create("grader-seccomp", os.MFD_CLOEXEC)
    os.write(fd, key_filter())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
