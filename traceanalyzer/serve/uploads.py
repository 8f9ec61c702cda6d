"""Uploads: received as a stream, checked while they arrive, stored by content.

* Each file goes to `DATA/tmp/` chunk by chunk while its SHA-256 is computed; the request's bytes are
  counted and the upload refused (413) before they pass `--max-upload`, with the partial file removed.
* A gzip stream is inflated on the fly (in bounded pieces) to refuse a decompression bomb before it
  is stored: more than `max_unpacked_bytes` inflated, or a ratio no real trace has.
* A file then goes to its content address in the blob store (`blobs.py`: `DATA/traces/ab/cdef...`, or an
  object store): the same content twice is stored once. It is placed while the upload holds the database
  lock of that hash (`Store.create_run`), so a delete of another run with the same content cannot remove
  it between its check and the commit.
  The uploaded name is shown, never used as a path on the server.
* A zip or tar (optionally gzipped) archive is listed before it is accepted: at most `max_members`
  members, at most `max_unpacked_bytes` in all, only regular files and folders, no absolute path, no
  `..`, no link. `unpack()` (run inside the limited analysis process) checks it all again against the
  bytes really written, never the sizes the archive claims.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import stat
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..units import format_bytes

CHUNK = 1 << 16
PROJECT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_FILES = 64  # files in one upload
BOMB_RATIO = 500  # inflated / compressed; real traces stay far below (JSON compresses 5-50x)
BOMB_MIN_BYTES = 256 * 1024**2  # the ratio is only judged past this many inflated bytes
ZIP_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)


class UploadError(Exception):
    """A refused upload: HTTP status and one line for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def display_name(name: str | None, index: int) -> str:
    """A name to show for an uploaded file: its last path part, only plain characters, bounded."""
    base = (name or "").replace("\\", "/").rsplit("/", 1)[-1]
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "._+-") else "_" for c in base).lstrip("._")[:120]
    return safe or f"upload{index}"


@dataclass
class Received:
    tmp: Path
    sha256: str
    size_bytes: int
    kind: str
    name: str


class Budget:
    """The bytes one request may still send."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, n: int) -> None:
        self.used += n
        if self.used > self.limit:
            raise UploadError(413, f"upload larger than the limit of {format_bytes(self.limit)} (--max-upload)")


class Inflater:
    """Follows a gzip stream (every member) to count its inflated size and keep its first bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.compressed = 0
        self.inflated = 0
        self.head = b""
        self.broken = False
        self.ended = False  # trailing bytes after the last member
        self._between = False
        self._d = zlib.decompressobj(zlib.MAX_WBITS | 16)

    def feed(self, data: bytes) -> None:
        if self.broken or self.ended:
            return
        self.compressed += len(data)
        try:
            while data:
                if self._between:  # after a member: another gzip member, or trailing bytes we leave alone
                    if not data.startswith(b"\x1f\x8b"[: len(data)]):
                        self.ended = True
                        return
                    self._between = False
                out = self._d.decompress(data, CHUNK)
                self._count(out)
                data = self._d.unconsumed_tail
                if self._d.eof:
                    data = self._d.unused_data + data
                    self._d = zlib.decompressobj(zlib.MAX_WBITS | 16)
                    self._between = True
        except zlib.error:
            self.broken = True  # refused once the file is in (Sink.finish)

    def _count(self, out: bytes) -> None:
        if len(self.head) < 1024:
            self.head += out[: 1024 - len(self.head)]
        self.inflated += len(out)
        if self.inflated > self.limit:
            raise UploadError(413, f"the gzip stream inflates to more than {format_bytes(self.limit)}")
        if self.inflated > BOMB_MIN_BYTES and self.inflated > BOMB_RATIO * max(self.compressed, 1):
            raise UploadError(400, f"refused: a decompression bomb ({format_bytes(self.compressed)} inflating "
                                   f"to more than {format_bytes(self.inflated)})")


def _is_tar(head: bytes) -> bool:
    return len(head) >= 262 and head[257:262] == b"ustar"


class Sink:
    """One file being received: written to DATA/tmp while hashed, counted and, when gzip, inflated."""

    def __init__(self, tmp_dir: Path, budget: Budget, name: str, max_unpacked: int) -> None:
        self.path = tmp_dir / f"{secrets.token_hex(12)}.part"
        self._f = open(self.path, "xb")  # noqa: SIM115 (closed in finish / abort)
        self._hash = hashlib.sha256()
        self.size = 0
        self.budget = budget
        self.name = name
        self.head = b""
        self.max_unpacked = max_unpacked
        self.inflater: Inflater | None = None
        self._plain = False

    def write(self, data: bytes) -> None:
        if not data:
            return
        self.budget.take(len(data))  # before writing: never more than the limit on disk
        self._hash.update(data)
        self._f.write(data)
        self.size += len(data)
        if len(self.head) < 1024:
            self.head += data[: 1024 - len(self.head)]
        if self.inflater is not None:
            self.inflater.feed(data)
        elif not self._plain and self.size >= 2:  # decided once the first two bytes are in
            if self.head[:2] == b"\x1f\x8b":
                self.inflater = Inflater(self.max_unpacked)
                self.inflater.feed(self.head[: self.size - len(data)] + data)
            else:
                self._plain = True

    def finish(self) -> Received:
        self._f.close()
        if self.size == 0:
            self.abort()
            raise UploadError(400, f"{self.name}: empty file (0 bytes)")
        kind = "file"
        if self.head.startswith(b"PK\x03\x04") or self.head.startswith(b"PK\x05\x06"):
            kind = "zip"
        elif self.inflater is not None:
            if self.inflater.broken:
                self.abort()
                raise UploadError(400, f"{self.name}: not a readable gzip stream (corrupt data)")
            kind = "tar.gz" if _is_tar(self.inflater.head) else "gzip"
        elif _is_tar(self.head):
            kind = "tar"
        return Received(self.path, self._hash.hexdigest(), self.size, kind, self.name)

    def abort(self) -> None:
        try:
            self._f.close()
        finally:
            self.path.unlink(missing_ok=True)


def member_parts(name: str) -> list[str]:
    """The path parts of an archive member, or UploadError when it could leave the folder it is unpacked into."""
    if not name or len(name) > 1024 or "\x00" in name or "\\" in name or any(ord(c) < 32 for c in name):
        raise UploadError(400, f"archive member with a bad name: {name[:80]!r}")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise UploadError(400, f"archive member with an absolute path: {name[:80]!r}")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UploadError(400, f"archive member with '..' in its path: {name[:80]!r}")
    return parts


def zip_entries(path: Path) -> int | None:
    """The member count a zip's end records declare (None when they cannot be found), read before
    the central directory is, so a zip of millions of members is refused without listing them."""
    import struct

    size = path.stat().st_size
    with open(path, "rb") as f:
        f.seek(max(0, size - (1 << 16) - 22))
        tail = f.read()
        at = tail.rfind(b"PK\x05\x06")
        if at < 0 or at + 22 > len(tail):
            return None
        count = struct.unpack("<H", tail[at + 10:at + 12])[0]
        locator = at - 20
        if count == 0xFFFF and locator >= 0 and tail[locator:locator + 4] == b"PK\x06\x07":  # zip64
            offset = struct.unpack("<Q", tail[locator + 8:locator + 16])[0]
            if offset + 56 > size:
                return None
            f.seek(offset)
            record = f.read(56)
            if record[:4] != b"PK\x06\x06":
                return None
            count = struct.unpack("<Q", record[32:40])[0]
        return int(count)


def _zip_members(path: Path, max_members: int) -> list[tuple[list[str], bool, int]]:
    declared = zip_entries(path)
    if declared is not None and declared > max_members:
        raise UploadError(400, f"archive with more than {max_members} members")
    try:
        with zipfile.ZipFile(path) as z:
            if len(z.infolist()) > max_members:
                raise UploadError(400, f"archive with more than {max_members} members")
            out = []
            for info in z.infolist():
                parts = member_parts(info.filename)
                kind = stat.S_IFMT(info.external_attr >> 16)  # 0 when the archiver wrote no Unix mode
                if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
                    raise UploadError(400, f"archive member is a link or special file: {info.filename[:80]!r}")
                if info.flag_bits & 0x1:
                    raise UploadError(400, f"archive member is encrypted: {info.filename[:80]!r}")
                if info.compress_type not in ZIP_METHODS:
                    raise UploadError(400, f"archive member compressed with an unsupported method "
                                           f"({info.compress_type}): {info.filename[:80]!r}")
                out.append((parts, info.is_dir(), info.file_size))
            return out
    except (zipfile.BadZipFile, NotImplementedError, ValueError, OSError) as exc:
        raise UploadError(400, f"not a readable zip archive: {exc}") from None


def _tar_members(path: Path, max_members: int) -> list[tuple[list[str], bool, int]]:
    out: list[tuple[list[str], bool, int]] = []
    try:
        with tarfile.open(path, "r|*") as t:
            for info in t:
                if len(out) >= max_members:
                    break
                if not (info.isreg() or info.isdir()):
                    raise UploadError(400, f"archive member is a link or special file: {info.name[:80]!r}")
                out.append((member_parts(info.name), info.isdir(), info.size))
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise UploadError(400, f"not a readable tar archive: {exc}") from None
    return out


def check_archive(path: Path, kind: str, max_members: int, max_unpacked: int) -> None:
    """Refuses (UploadError 400/413) an archive that unpacking would not accept."""
    members = _zip_members(path, max_members) if kind == "zip" else _tar_members(path, max_members + 1)
    if len(members) > max_members:
        raise UploadError(400, f"archive with more than {max_members} members")
    if not any(not is_dir for _, is_dir, _ in members):
        raise UploadError(400, "archive without any file")
    files: set[tuple[str, ...]] = set()
    folders: set[tuple[str, ...]] = set()
    for parts, is_dir, _ in members:
        member = tuple(parts)
        folders.update(member[:i] for i in range(1, len(member)))
        if is_dir:
            folders.add(member)
        elif member in files:
            raise UploadError(400, f"archive member named twice: {'/'.join(member)[:80]!r}")
        else:
            files.add(member)
    if files & folders:
        clash = "/".join(sorted(files & folders)[0])
        raise UploadError(400, f"archive member is both a file and a folder: {clash[:80]!r}")
    total = sum(size for _, _, size in members)
    if total > max_unpacked:
        raise UploadError(413, f"archive unpacks to more than {format_bytes(max_unpacked)}")
    _check_ratio(total, path.stat().st_size)


def _check_ratio(unpacked: int, packed: int) -> None:
    if unpacked > BOMB_MIN_BYTES and unpacked > BOMB_RATIO * max(packed, 1):
        raise UploadError(400, f"refused: a decompression bomb ({format_bytes(packed)} unpacking to "
                               f"{format_bytes(unpacked)})")


# -- unpacking, inside the analysis process
def _open_new(root: Path, parts: list[str]) -> int:
    parent = root.joinpath(*parts[:-1])
    parent.mkdir(parents=True, exist_ok=True)
    if not parent.resolve().is_relative_to(root.resolve()):
        raise UploadError(400, "archive member outside the folder it is unpacked into")
    return os.open(parent / parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)


def unpack(path: Path, kind: str, root: Path, max_members: int, max_unpacked: int) -> None:
    """Unpacks an archive into `root` (empty), counting the bytes really written."""
    written = 0
    count = 0
    packed = path.stat().st_size

    def copy(src, parts: list[str]) -> None:  # type: ignore[no-untyped-def]
        nonlocal written, count
        count += 1
        if count > max_members:
            raise UploadError(400, f"archive with more than {max_members} members")
        try:
            fd = _open_new(root, parts)
        except OSError as exc:  # a member named twice, a file where a folder should be, a name too long
            raise UploadError(400, f"archive member {'/'.join(parts)[:80]!r} cannot be unpacked: "
                                   f"{exc.strerror or exc}") from None
        with os.fdopen(fd, "wb") as out:
            while True:
                block = src.read(CHUNK)
                if not block:
                    break
                written += len(block)
                if written > max_unpacked:
                    raise UploadError(413, f"archive unpacks to more than {format_bytes(max_unpacked)}")
                _check_ratio(written, packed)  # the sizes a zip declares may lie: the bytes written do not
                out.write(block)

    root.mkdir(parents=True, exist_ok=True)
    if kind == "zip":
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                parts = member_parts(info.filename)
                if info.is_dir() or not parts:
                    continue
                ftype = stat.S_IFMT(info.external_attr >> 16)
                if ftype and ftype != stat.S_IFREG:
                    raise UploadError(400, f"archive member is a link or special file: {info.filename[:80]!r}")
                with z.open(info) as src:
                    copy(src, parts)
        return
    with tarfile.open(path, "r|*") as t:
        for member in t:
            if member.isdir():
                continue
            if not member.isreg():
                raise UploadError(400, f"archive member is a link or special file: {member.name[:80]!r}")
            parts = member_parts(member.name)
            stream = t.extractfile(member)
            if stream is not None and parts:
                copy(stream, parts)
