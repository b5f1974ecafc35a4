"""Submitted archives (:mod:`grader.execute.archive`): every archive the grader cannot or must not unpack
is refused before anything is written, saying why; what held before still holds."""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path

import pytest

from grader.execute.archive import ArchiveLimits, extract_zip
from grader.execute.sandbox import SubmissionError, find_course_root, unpack_submission
from grader.tests.corpus import DEMO_NAMES

COURSE_FILE = "course/labA_arith/arith.py"


def _zip(path: Path, entries: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", method) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return path


def _refused(path: Path, match: str, scratch: Path) -> None:
    with pytest.raises(SubmissionError, match=match):
        unpack_submission(path, scratch, DEMO_NAMES)
    assert not any((scratch / "unpacked").rglob("*")) if (scratch / "unpacked").exists() else True


def _patch(path: Path, local: int, central: int, value: int, width: int = 2) -> Path:
    """Rewrite one field of every entry in both its headers (local at offset ``local``, central at ``central``)."""
    data = bytearray(path.read_bytes())
    for signature, offset in ((b"PK\x03\x04", local), (b"PK\x01\x02", central)):
        start = 0
        while (start := data.find(signature, start)) != -1:
            data[start + offset : start + offset + width] = value.to_bytes(width, "little")
            start += 4
    path.write_bytes(bytes(data))
    return path


def test_a_decompression_bomb_is_refused_before_it_is_extracted(tmp_path):
    bomb = _zip(tmp_path / "bomb.zip", {COURSE_FILE: b"X = 1\n", "course/padding.bin": b"\0" * (20 * 1024 * 1024)})
    assert bomb.stat().st_size < 100 * 1024
    _refused(bomb, "expands 1,0[0-9][0-9] times", tmp_path / "s1")
    many = _zip(tmp_path / "many.zip", {f"course/f{i}.txt": b"x" for i in range(30)})
    with pytest.raises(ValueError, match="30 files, more than the limit of 20"):
        extract_zip(many, tmp_path / "s2", ArchiveLimits(max_entries=20))
    big = _zip(tmp_path / "big.zip", {"course/a.txt": b"a" * 3000, "course/b.txt": b"b" * 3000})
    with pytest.raises(ValueError, match="expands to 6,000 bytes, more than the limit of 5,000"):
        extract_zip(big, tmp_path / "s3", ArchiveLimits(max_total_bytes=5000))


def test_an_entry_that_writes_more_than_its_header_says_is_stopped(tmp_path):
    archive = _zip(tmp_path / "liar.zip", {COURSE_FILE: b"X = 1\n" * 1000}, zipfile.ZIP_STORED)
    _patch(archive, 22, 24, 10, width=4)  # the uncompressed size its headers declare: 10 bytes
    _refused(archive, "not a readable zip|expands past", tmp_path / "s")


def _set_declared_count(path: Path, count: int) -> Path:
    """Make the end record declare ``count`` entries (zipfile reads the directory by its size regardless)."""
    data = bytearray(path.read_bytes())
    at = data.rfind(b"PK\x05\x06")
    data[at + 8 : at + 12] = count.to_bytes(2, "little") * 2
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("declared", ["honest", "lying"])
def test_a_huge_directory_is_refused_before_zipfile_parses_it(tmp_path, monkeypatch, declared):
    """Skipped caches are not extracted, but Python builds an object for every entry the directory lists:
    400,000 empty ones took the grader to 273 MB. The entries are counted from their headers first (the
    count the end record declares may lie)."""
    entries = {COURSE_FILE: b"X = 1\n", **{f"course/.nox/env/f{i}": b"" for i in range(120)}}
    archive = _zip(tmp_path / "noise.zip", entries)
    if declared == "lying":
        _set_declared_count(archive, 1)
    import grader.execute.archive as archive_module

    def never_parsed(*args, **kwargs):
        raise AssertionError("zipfile parsed a directory over the limit")

    monkeypatch.setattr(archive_module.zipfile, "ZipFile", never_parsed)
    with pytest.raises(ValueError, match="lists more than 100 entries, the limit"):
        extract_zip(archive, tmp_path / "s1", ArchiveLimits(max_directory_entries=100))
    with pytest.raises(ValueError, match="directory takes [0-9,]+ bytes, more than the limit of 1,000"):
        extract_zip(archive, tmp_path / "s2", ArchiveLimits(max_directory_bytes=1000))
    monkeypatch.undo()
    extract_zip(archive, tmp_path / "s3")  # the default limits let a course zipped with its environment in
    assert (tmp_path / "s3" / COURSE_FILE).is_file()


@pytest.mark.parametrize("field", [4, 8, 12])
def test_the_end_record_is_found_where_zipfile_finds_it(tmp_path, field):
    """The end record's own fields may hold its signature's bytes (zipfile reads the last 22 bytes as the
    record without looking at them): searching for the last signature found the copy, gave up, and let
    1,500,000 entries through to zipfile (802 MB)."""
    entries = {COURSE_FILE: b"X = 1\n", **{f"course/.nox/env/f{i}": b"" for i in range(120)}}
    archive = _zip(tmp_path / "signed.zip", entries)
    data = bytearray(archive.read_bytes())
    end = len(data) - 22
    data[end + field : end + field + 4] = b"PK\x05\x06"  # disk numbers, entry counts or directory size
    archive.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="lists more than 100 entries|directory takes"):
        extract_zip(archive, tmp_path / "s", ArchiveLimits(max_directory_entries=100))


def test_names_nested_past_the_limit_are_refused_before_they_are_split(tmp_path, monkeypatch):
    """511 names of 32,000 folders each (within the directory's byte limit) took 44 s of CPU while every
    name was split into parts (to look for caches), before the first was refused for its depth."""
    import grader.execute.archive as archive_module

    deep = _zip(tmp_path / "deep.zip", {COURSE_FILE: b"X = 1\n", **{"a/" * 30_000 + f"{i}": b"" for i in range(60)}})

    def never_split(info):
        raise AssertionError(f"{info.filename[:20]}... was split into parts before its depth was checked")

    monkeypatch.setattr(archive_module, "_kept", never_split)
    with pytest.raises(ValueError, match="nested deeper than 32 folders"):
        extract_zip(deep, tmp_path / "s")


def test_a_zip64_directory_and_a_prefixed_zip_are_counted(tmp_path, monkeypatch):
    """A zip64 end record (more than 65,535 entries, here forced on ten) and data before the zip (a
    self-extracting archive) move the directory; it is still found and counted."""
    from grader.execute.archive import directory_size

    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 5)
    zip64 = _zip(tmp_path / "zip64.zip", {f"course/f{i}.txt": b"x" for i in range(10)})
    monkeypatch.undo()
    assert zip64.read_bytes().find(b"PK\x06\x06") > 0, "the zip64 end record was not written"
    assert directory_size(zip64)[0] == 10
    prefixed = tmp_path / "prefixed.zip"
    prefixed.write_bytes(b"#!/bin/sh\n" * 100 + zip64.read_bytes())
    assert directory_size(prefixed)[0] == 10 == len(zipfile.ZipFile(prefixed).infolist())
    (tmp_path / "text.zip").write_text("not a zip")
    assert directory_size(tmp_path / "text.zip") is None, "no end record: zipfile says why"


@pytest.mark.parametrize("wrapper", ["build", "dist", "results", "graded"])
def test_a_course_inside_a_folder_named_like_build_output_is_found(tmp_path, wrapper):
    """Output folders (``build``, ``results``...) are noise inside a course, not around it: a student who
    zipped ``results/course/`` submitted the course. It read as an empty zip."""
    archive = _zip(tmp_path / "wrapped.zip", {f"{wrapper}/{COURSE_FILE}": b"X = 1\n"})
    folder = unpack_submission(archive, tmp_path / "scratch", DEMO_NAMES)
    assert (folder / "labA_arith" / "arith.py").read_text() == "X = 1\n"


@pytest.mark.parametrize(
    "case, match",
    [
        ("empty", "the zip is empty"),
        ("only_caches", "none of them gradable: all lie in caches"),
        ("encrypted", "is encrypted: zip it again without a password"),
        ("deflate64", "compressed with Deflate64, which cannot be read"),
        ("corrupt", "not a readable zip"),
        ("long_name", "a file name longer than 255 bytes"),
        ("link", "is a symbolic link"),
        ("absolute", "unsafe path"),
        ("text", "not a readable zip"),
    ],
)
def test_unreadable_archives_are_the_submissions_problem_and_say_why(tmp_path, case, match):
    path = tmp_path / f"{case}.zip"
    if case == "empty":
        _zip(path, {})
    elif case == "only_caches":
        _zip(path, {"course/.nox/env/x.py": b"x", "course/__pycache__/a.pyc": b"x"})
    elif case == "encrypted":
        _patch(_zip(path, {COURSE_FILE: b"X = 1\n"}), 6, 8, 0x1)  # general purpose flag: encrypted
    elif case == "deflate64":
        _patch(_zip(path, {COURSE_FILE: b"X = 1\n"}), 8, 10, 9)  # a Deflate64 zip, as Windows writes one
    elif case == "corrupt":
        data = bytearray(_zip(path, {COURSE_FILE: b"X = 1\n" * 500}).read_bytes())
        data[40:120] = b"\xff" * 80
        path.write_bytes(bytes(data))
    elif case == "long_name":
        _zip(path, {"course/" + "n" * 300 + ".py": b"x"})
    elif case == "link":
        with zipfile.ZipFile(path, "w") as archive:
            info = zipfile.ZipInfo("course/labA_arith/arith.py")
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, b"/etc/passwd")
    elif case == "absolute":
        _zip(path, {"/etc/owned": b"x"})
    else:
        path.write_text("not a zip at all")
    _refused(path, match, tmp_path / "scratch")


def test_what_held_before_still_holds(tmp_path):
    with zipfile.ZipFile(tmp_path / "dup.zip", "w") as archive:
        archive.writestr(COURSE_FILE, b"X = 1\n")
        with pytest.warns(UserWarning, match="Duplicate name"):
            archive.writestr(COURSE_FILE, b"X = 2\n")
        archive.writestr("course/labB_text/<b>html</b>\nname.py", b"Y = 1\n")
        archive.writestr("course/.nox/env/huge.bin", b"\0" * (20 * 1024 * 1024))  # a zipped venv is skipped
    folder = unpack_submission(tmp_path / "dup.zip", tmp_path / "scratch", DEMO_NAMES)
    assert (folder / "labA_arith" / "arith.py").read_text() == "X = 2\n", "the last duplicate wins, as with unzip"
    assert (folder / "labB_text" / "<b>html</b>\nname.py").read_text() == "Y = 1\n"
    assert not (folder / ".nox").exists()


@pytest.mark.parametrize(
    "name, match",
    [
        ("alice.tar.gz", "cannot read .tar.gz archives; submit a folder or a .zip"),
        ("bob.rar", "cannot read .rar archives"),
        ("notes.txt", "a submission is a folder or a .zip"),
    ],
)
def test_other_formats_are_named(tmp_path, name, match):
    (tmp_path / name).write_bytes(b"\x1f\x8b whatever")
    _refused(tmp_path / name, match, tmp_path / "scratch")


@pytest.mark.parametrize("old_copy", ["results", "graded", "build"])
def test_an_old_copy_beside_the_course_does_not_hide_it(tmp_path, old_copy):
    """A wrapped course beside an old copy in an output-named folder: both hold a lab package at the same
    depth, and the submission was graded as given, with the starters' files."""
    archive = _zip(
        tmp_path / "beside.zip",
        {"alice/labA_arith/arith.py": b"X = 'alice'\n", f"{old_copy}/labA_arith/arith.py": b"X = 'old'\n"},
    )
    folder = unpack_submission(archive, tmp_path / "zip", DEMO_NAMES)
    assert (folder / "labA_arith" / "arith.py").read_text() == "X = 'alice'\n"
    as_folder = tmp_path / "as-folder"
    for owner in ("alice", old_copy):
        (as_folder / owner / "labA_arith").mkdir(parents=True)
        (as_folder / owner / "labA_arith" / "arith.py").write_text("X = 1\n")
    assert find_course_root(as_folder, DEMO_NAMES) == as_folder / "alice", "folders follow the same rule"


def test_output_inside_the_course_is_neither_extracted_nor_counted(tmp_path):
    """``results/`` and ``build/`` inside the course are the course's own tools' output: 20,001 files
    there made a course over the file limit."""
    entries = {COURSE_FILE: b"X = 1\n", **{f"course/build/lib/f{i}": b"" for i in range(30)}}
    entries["course/results/big.bin"] = b"\0" * 6000
    archive = _zip(tmp_path / "outputs.zip", entries)
    limits = ArchiveLimits(max_entries=20, max_total_bytes=5000)
    extract_zip(archive, tmp_path / "s", limits, lab_packages=DEMO_NAMES)
    assert (tmp_path / "s" / COURSE_FILE).is_file()
    assert not (tmp_path / "s" / "course" / "build").exists() and not (tmp_path / "s" / "course" / "results").exists()


SHADOWS = {
    "an emptied copy": {"old/labA_arith/": b"", "old/README.md": b"notes"},
    "a copy holding only caches": {"stale/labA_arith/__pycache__/arith.cpython-311.pyc": b"\0"},
    "a copy holding only Finder's file": {"old/labA_arith/.DS_Store": b"\0"},
    "an old copy in results/, shallower": {"results/labA_arith/arith.py": b"X = 'old'\n"},
}


@pytest.mark.parametrize("shadow", sorted(SHADOWS))
def test_a_copy_that_holds_nothing_of_the_course_is_not_the_course(tmp_path, shadow):
    """Only a lab folder holding a file that would be graded makes a course root: an emptied copy, or one
    holding only caches, was chosen and the student's real work, elsewhere, was never extracted (0/26
    end to end). Folders follow the same rule."""
    entries = {"alice/course/labA_arith/arith.py": b"X = 'alice'\n", **SHADOWS[shadow]}
    folder = unpack_submission(_zip(tmp_path / "shadow.zip", entries), tmp_path / "zip", DEMO_NAMES)
    assert (folder / "labA_arith" / "arith.py").read_text() == "X = 'alice'\n"
    on_disk = tmp_path / "on-disk"
    for name, data in entries.items():
        path = on_disk / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not name.endswith("/"):
            path.write_bytes(data)
    assert find_course_root(on_disk, DEMO_NAMES) == on_disk / "alice" / "course"
