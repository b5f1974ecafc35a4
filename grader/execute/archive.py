"""Unpack a submitted ``.zip`` safely: every limit is checked on the archive's directory before anything
is extracted, and again on the bytes actually written (a header may lie).

A zip is the student's input like any other, so it may be a decompression bomb (a few megabytes that
expand to gigabytes), hold thousands of entries, names that escape the folder (``../``, absolute paths),
symbolic links, names longer than the filesystem allows, or be empty, encrypted, corrupt, or compressed
with a method Python cannot read (Deflate64, which Windows' Explorer uses for large files). Each of these
is a :class:`ArchiveError` naming what was wrong and what to do, which the grader reports as the
submission's problem (status ``bad-submission``), never its own.

Limits (:class:`ArchiveLimits`): the size of the archive's directory and its entry count, read from the
zip's last record before Python parses the directory (each parsed entry costs memory: a small zip of
400,000 empty entries took the grader to 273 MB); then the sum of the entries' declared sizes, their
number, and each large entry's compression ratio, checked (as Python's ``zipfile`` documentation advises against
decompression bombs); then each entry is copied in chunks, and extraction stops as soon as an entry
writes more than it declared or the total passes the limit. Caches and environments (``.nox``,
``__pycache__``, ``.git``...: :func:`grader.course.labs.is_cache`) are never extracted nor counted, so a
student who zipped their virtual environment along with the course is still graded.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import struct
import zipfile
import zlib
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from grader.course.labs import is_cache, is_noise
from grader.execute.course_root import TOP, choose_course_root, holders_in_zip

#: Compression methods Python's ``zipfile`` reads.
READABLE_METHODS = {
    zipfile.ZIP_STORED: "stored",
    zipfile.ZIP_DEFLATED: "Deflate",
    zipfile.ZIP_BZIP2: "bzip2",
    zipfile.ZIP_LZMA: "LZMA",
}
#: Names of methods it does not, for the message (APPNOTE.TXT section 4.4.5).
METHOD_NAMES = {9: "Deflate64", 12: "bzip2", 93: "Zstandard", 95: "xz", 98: "PPMd", 99: "AES encryption"}
#: Archive formats students send instead of a zip, named in the message that refuses them.
OTHER_ARCHIVES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar", ".rar", ".7z", ".gz", ".bz2", ".xz")
#: Longest file name (one path component) most filesystems accept, in bytes.
NAME_MAX_BYTES = 255
#: Deepest folder nesting read in a submission (a course is a few levels deep; thousands of levels
#: exhaust the stack of Python's recursive folder functions).
MAX_DEPTH = 32
_CHUNK = 1 << 20


class ArchiveError(ValueError):
    """The archive cannot be graded: empty, encrypted, unreadable, unsafe or over a limit (the message says which)."""


@dataclass(frozen=True)
class ArchiveLimits:
    """What an archive may expand to. A copy of the course with its lab files is a few megabytes.

    Attributes:
        max_total_bytes: the sum of the extracted entries' sizes.
        max_entries: how many entries are extracted.
        max_directory_entries: how many entries the zip's directory may list, caches and environments
            included (they are skipped, not extracted, but Python parses them; a course zipped with its
            PyTorch virtual environment lists about 30,000).
        max_directory_bytes: the size of that directory (``zipfile`` reads it whole; an entry takes 46
            bytes plus its name).
        max_ratio: uncompressed / compressed size of one entry larger than ``ratio_floor_bytes``
            (text compresses about 5x; a bomb a thousandfold).
        ratio_floor_bytes: entries smaller than this are never refused for their ratio.
    """

    max_total_bytes: int = 256 * 1024 * 1024
    max_entries: int = 20_000
    max_directory_entries: int = 100_000
    max_directory_bytes: int = 32 * 1024 * 1024
    max_ratio: float = 200.0
    ratio_floor_bytes: int = 1024 * 1024


def archive_format_problem(path: Path) -> str:
    """Why ``path`` (a file) is not a submission the grader reads ("" for a ``.zip``)."""
    name = path.name.lower()
    if name.endswith(".zip"):
        return ""
    for suffix in OTHER_ARCHIVES:
        if name.endswith(suffix):
            return f"cannot read {suffix} archives; submit a folder or a .zip"
    return "a submission is a folder or a .zip file"


#: The zip's records read before ``zipfile`` parses anything (APPNOTE.TXT 4.3.12-4.3.16).
_END_RECORD = struct.Struct("<4s4xHHLLH")  # signature, entries here, entries in all, directory size, offset, comment
_ZIP64_LOCATOR = struct.Struct("<4sLQL")  # signature, disk, offset of the zip64 record, disks (not read)
_ZIP64_RECORD = struct.Struct("<4sQ2H2L2Q2Q")  # signature, size, versions, disks, entries here/in all, size, offset
_DIRECTORY_ENTRY = struct.Struct("<4s24xHHH12x")  # signature, then the lengths of name, extra field, comment
#: The end record sits before a comment of at most 64 KiB, and a zip64 end record and locator before it.
_END_SEARCH = _ZIP64_RECORD.size + _ZIP64_LOCATOR.size + _END_RECORD.size + 0xFFFF


def directory_size(submission: Path, limit: int = 2**63) -> tuple[int, int] | None:
    """(entries, bytes) of the zip's central directory, or ``None`` when there is no end record (``zipfile``
    then says the file is not a zip).

    The byte size comes from the end record. The entries are *counted* by stepping over their fixed
    headers, as ``zipfile`` finds them (it reads the directory by its size and ignores the declared
    count, which may lie), without building anything per entry, and no further than ``limit + 1``.
    """
    with open(submission, "rb") as file:
        length = file.seek(0, os.SEEK_END)
        file.seek(max(0, length - _END_SEARCH))
        tail = file.read()
        at = _end_record_at(tail)
        if at is None:
            return None
        _, _, _, size, _, _ = _END_RECORD.unpack_from(tail, at)
        end_position = length - len(tail) + at
        locator_at = at - _ZIP64_LOCATOR.size
        record_at = locator_at - _ZIP64_RECORD.size  # just before its locator, where zipfile reads it
        if record_at >= 0 and tail[locator_at : locator_at + 4] == b"PK\x06\x07":
            if tail[record_at : record_at + 4] == b"PK\x06\x06":
                size = _ZIP64_RECORD.unpack_from(tail, record_at)[8]
                end_position -= _ZIP64_RECORD.size + _ZIP64_LOCATOR.size
        return _count_entries(file, max(0, end_position - size), size, limit), size


def _end_record_at(tail: bytes) -> int | None:
    """Where in ``tail`` (the file's end) ``zipfile`` reads the end record, found as it finds it: the last
    22 bytes when they are one without a comment (then the record's own fields may hold the signature's
    bytes), otherwise the last signature, which must leave a whole record."""
    last = len(tail) - _END_RECORD.size
    if last >= 0 and tail[last : last + 4] == b"PK\x05\x06" and tail[-2:] == b"\0\0":
        return last
    at = tail.rfind(b"PK\x05\x06")
    return at if 0 <= at <= last else None


def _count_entries(file, start: int, size: int, limit: int) -> int:
    """How many entry headers the directory of ``size`` bytes at ``start`` holds: stops at a bad one, or
    once past ``limit`` (the count is then only known to be over it)."""
    count, offset = 0, 0
    while offset + _DIRECTORY_ENTRY.size <= size and count <= limit:
        file.seek(start + offset)
        header = file.read(_DIRECTORY_ENTRY.size)
        if len(header) < _DIRECTORY_ENTRY.size or header[:4] != b"PK\x01\x02":
            break
        _, name, extra, comment = _DIRECTORY_ENTRY.unpack(header)
        count += 1
        offset += _DIRECTORY_ENTRY.size + name + extra + comment
    return count


def check_directory(submission: Path, limits: ArchiveLimits) -> None:
    """Refuse a zip whose directory is too large to parse, before ``zipfile`` parses it.

    Raises:
        ArchiveError: naming the count or size and the limit.
    """
    found = directory_size(submission, limits.max_directory_entries)
    if found is None:
        return
    entries, size = found
    if size > limits.max_directory_bytes:
        raise ArchiveError(
            f"the zip's directory takes {size:,} bytes, more than the limit of {limits.max_directory_bytes:,}"
        )
    if entries > limits.max_directory_entries:
        raise ArchiveError(
            f"the zip lists more than {limits.max_directory_entries:,} entries, the limit "
            "(zip the course folder alone, without caches or environments)"
        )


def _is_link(info: zipfile.ZipInfo) -> bool:
    return stat.S_ISLNK(info.external_attr >> 16)


def _kept(info: zipfile.ZipInfo, root: PurePosixPath = TOP) -> bool:
    """Entries that are extracted: files inside the course ``root`` (found from the names,
    :mod:`grader.execute.course_root`), with no cache or environment anywhere on their path and no build
    or grading output inside the course (``root/results/...``), which is neither extracted nor counted."""
    path = PurePosixPath(info.filename)
    if info.is_dir() or any(is_cache(Path(part)) for part in path.parts):
        return False
    if root != TOP:
        if path.parts[: len(root.parts)] != root.parts:
            return False  # beside the course: a README, an old copy
        path = PurePosixPath(*path.parts[len(root.parts) :])
    return not any(is_noise(Path(part)) for part in path.parts)


def entry_problem(info: zipfile.ZipInfo, limits: ArchiveLimits) -> str:
    """Why one entry refuses the whole archive ("" when it does not): read from its header alone."""
    name = info.filename
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        return f"unsafe path {name!r} in the zip"
    if "\0" in name:
        return f"a file name with a NUL character ({name!r})"
    if any(len(part.encode("utf-8", "surrogateescape")) > NAME_MAX_BYTES for part in path.parts):
        return f"a file name longer than {NAME_MAX_BYTES} bytes ({name[:80]!r}...)"
    if len(path.parts) > MAX_DEPTH:
        return f"{name[:80]!r}... is nested deeper than {MAX_DEPTH} folders"
    if _is_link(info):
        return f"{name!r} is a symbolic link: zip the files themselves"
    if info.flag_bits & 0x1:
        return f"{name!r} is encrypted: zip it again without a password"
    if info.compress_type not in READABLE_METHODS:
        method = METHOD_NAMES.get(info.compress_type, f"method {info.compress_type}")
        return (
            f"{name!r} is compressed with {method}, which cannot be read: zip it again with ordinary "
            "(Deflate) compression"
        )
    if info.file_size > limits.ratio_floor_bytes and info.file_size > limits.max_ratio * max(info.compress_size, 1):
        return (
            f"{name!r} expands {info.file_size / max(info.compress_size, 1):,.0f} times "
            f"(more than {limits.max_ratio:g}: a decompression bomb?)"
        )
    return ""


def check_archive(entries: list[zipfile.ZipInfo], limits: ArchiveLimits, root: PurePosixPath = TOP) -> None:
    """Refuse the archive from its directory alone, before anything is extracted.

    Raises:
        ArchiveError: see :func:`entry_problem`, and for an empty archive or one over the limits.
    """
    for info in entries:  # before anything splits names into parts: 65 KiB names of 32,000 folders each
        if info.filename.count("/") > MAX_DEPTH:
            raise ArchiveError(f"{info.filename[:80]!r}... is nested deeper than {MAX_DEPTH} folders")
    kept = [info for info in entries if _kept(info, root)]
    if not kept:
        raise ArchiveError(_nothing_kept(entries))
    for info in entries:
        problem = entry_problem(info, limits) if _kept(info, root) or _escapes(info) else ""
        if problem:
            raise ArchiveError(problem)
    if len(kept) > limits.max_entries:
        raise ArchiveError(f"the zip holds {len(kept):,} files, more than the limit of {limits.max_entries:,}")
    total = sum(info.file_size for info in kept)
    if total > limits.max_total_bytes:
        raise ArchiveError(f"the zip expands to {total:,} bytes, more than the limit of {limits.max_total_bytes:,}")


def _nothing_kept(entries: list[zipfile.ZipInfo]) -> str:
    """Why a zip with nothing to extract is refused, in the student's terms: it is empty, holds only
    folders, or holds only what is never graded (caches, environments, build or grading output)."""
    files = [info.filename for info in entries if not info.is_dir()]
    if not entries:
        return "the zip is empty: it holds no file at all"
    if not files:
        return f"the zip holds {_count(len(entries), 'empty folder')} and no file"
    return (
        f"the zip holds {_count(len(files), 'file')}, none of them gradable: all lie in caches, environments or "
        f"build and grading output (such as {files[0][:120]!r}); zip the course folder itself"
    )


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def posix_name(name: str) -> str:
    """An entry's name with ``/`` between its parts. The zip format requires ``/``, but some Windows tools
    (PowerShell's ``Compress-Archive`` before .NET 4.6.1) write ``lab01\\conv_bn.py``, which would otherwise
    extract as one file of that odd name, leaving the lab's file missing. The safety checks see the result,
    so ``..\\..\\x`` is refused like ``../../x``."""
    return name.replace("\\", "/")


def _inside(filename: object, target: Path) -> str:
    """``filename`` relative to the extraction folder: a message names the zip's entry, never the grader's
    scratch folder."""
    text = str(filename or "")
    prefix = str(target) + os.sep
    return text[len(prefix) :] if text.startswith(prefix) else Path(text).name


def _escapes(info: zipfile.ZipInfo) -> bool:
    path = PurePosixPath(info.filename)
    return path.is_absolute() or ".." in path.parts


def _extract_one(archive: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, budget: list[int]) -> None:
    """Write one entry under ``target``, never past its declared size nor the archive's remaining ``budget``."""
    dest = target.joinpath(*PurePosixPath(info.filename).parts)
    dest.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    written = 0
    with archive.open(info) as source, os.fdopen(os.open(dest, flags, 0o644), "wb") as sink:
        while chunk := source.read(_CHUNK):
            written += len(chunk)
            budget[0] -= len(chunk)
            if written > info.file_size or budget[0] < 0:
                raise ArchiveError(f"{info.filename!r} expands past the size its header declares or the zip's limit")
            sink.write(chunk)


#: Errors of extraction that are the archive's (its names, its data), not the grader's machine's.
_ARCHIVE_ERRNOS = {
    errno.ENAMETOOLONG,
    errno.EILSEQ,
    errno.EINVAL,
    errno.ELOOP,
    errno.EISDIR,
    errno.ENOTDIR,
    errno.EEXIST,
}


def extract_zip(
    submission: Path, target: Path, limits: ArchiveLimits = ArchiveLimits(), lab_packages: Collection[str] = ()
) -> None:
    """Extract ``submission`` into ``target`` (see the module docstring); a refused archive leaves nothing.

    With ``lab_packages``, the course root is found from the entries' names first
    (:mod:`grader.execute.course_root`), and only the course is extracted and counted: not what lies
    beside it, nor build or grading output inside it. Duplicate names are allowed (the last one wins, as
    with ``unzip``).

    Raises:
        ArchiveError: for any problem of the archive's making, with what to do.
        OSError: for the grader's own (a full disk).
    """
    try:
        _extract(submission, target, limits, lab_packages)
    except ArchiveError:
        shutil.rmtree(target, ignore_errors=True)
        raise


def _extract(submission: Path, target: Path, limits: ArchiveLimits, lab_packages: Collection[str]) -> None:
    check_directory(submission, limits)
    try:
        with zipfile.ZipFile(submission) as archive:
            entries = archive.infolist()
            for info in entries:
                info.filename = posix_name(info.filename)
            root = choose_course_root(holders_in_zip((info.filename for info in entries), lab_packages))
            check_archive(entries, limits, root)
            target.mkdir(parents=True, exist_ok=True)
            budget = [limits.max_total_bytes]
            for info in entries:
                if _kept(info, root):
                    _extract_one(archive, info, target, budget)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as error:
        raise ArchiveError(f"not a readable zip ({error})") from None
    except ArchiveError:
        raise
    except OSError as error:
        if error.errno in _ARCHIVE_ERRNOS:
            where = f"{_inside(error.filename, target)!s:.120}"
            raise ArchiveError(f"a file of the zip cannot be written ({error.strerror}: {where})") from None
        raise
