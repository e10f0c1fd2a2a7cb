"""Reading the files a dump names without ever leaving the dump.

A dump is untrusted: its manifest names its own files (``graph.file``, ``inputs_file``), a
minifier script names its storages, and any of those names, or the files themselves, may
point elsewhere. Every reader goes through here, so that:

- a name is a plain relative path: not absolute, no ``..``, no NUL, no empty part;
- no part of it is a symbolic link (checked with ``lstat`` part by part, and the file is
  opened with ``O_NOFOLLOW``), so nothing leads out of the folder;
- only regular files are opened: a FIFO or a device is refused before ``open`` (a FIFO would
  block ``open`` itself), and ``fstat`` checks the file that was really opened;
- a size limit is enforced on what is read.

Errors are ``DumpError`` (exit code 2) naming the path, never quoting the file.

    >>> inside(Path("dumps/rank0/g0"), "inputs.safetensors")       # a checked path
    PosixPath('dumps/rank0/g0/inputs.safetensors')
    >>> read_inside(Path("dumps/rank0/g0"), "../../etc/passwd")
    Traceback (most recent call last):
    graphdbg.errors.DumpError: dumps/rank0/g0: refusing '../../etc/passwd': not a file inside the dump
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath, PureWindowsPath

from graphdbg.errors import DumpError

__all__ = ["inside", "read_inside", "read_regular", "regular_file", "check_name"]

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) \
    | getattr(os, "O_BINARY", 0)


def check_name(root: Path, name: object) -> tuple[str, ...]:
    """The parts of ``name`` if it is a plain relative path, else DumpError."""
    if not isinstance(name, str) or not name or "\x00" in name or len(name) > 4096:
        raise DumpError(f"{root}: refusing file name {str(name)[:80]!r}: not a file inside the dump")
    posix, windows = PurePosixPath(name), PureWindowsPath(name)
    parts = tuple(p for p in name.replace("\\", "/").split("/"))
    if posix.is_absolute() or windows.is_absolute() or windows.drive or any(p in ("", "..") for p in parts):
        raise DumpError(f"{root}: refusing {name[:200]!r}: not a file inside the dump")
    return tuple(p for p in parts if p != ".") or (name,)


def inside(root: Path, name: object) -> Path:
    """``root / name`` after checking that it is a regular file inside ``root`` reached through no
    symbolic link; DumpError otherwise (including when it is missing)."""
    root = Path(root)
    parts = check_name(root, name)
    path = root
    for i, part in enumerate(parts):
        path = path / part
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise DumpError(f"{path}: missing") from None
        except OSError as e:
            raise DumpError(f"{path}: cannot read ({e.strerror})") from None
        if stat.S_ISLNK(st.st_mode):
            raise DumpError(f"{path}: refusing a symbolic link inside a dump (it could lead anywhere)")
        last = i == len(parts) - 1
        if not last and not stat.S_ISDIR(st.st_mode):
            raise DumpError(f"{path}: not a folder")
        if last and not stat.S_ISREG(st.st_mode):
            raise DumpError(f"{path}: not a regular file ({_kind(st.st_mode)})")
    return path


def read_inside(root: Path, name: object, *, max_bytes: int, text: bool = False) -> bytes | str:
    """The contents of the regular file ``name`` inside ``root`` (see ``inside``)."""
    return _read(inside(root, name), max_bytes, text)


def regular_file(path: Path) -> Path:
    """``path`` if it is a regular file (a symbolic link to one is followed: the user named it),
    else DumpError: a FIFO or device would block or never end."""
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise DumpError(f"{path}: missing") from None
    except OSError as e:
        raise DumpError(f"{path}: cannot read ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise DumpError(f"{path}: not a regular file ({_kind(st.st_mode)})")
    return path


def read_regular(path: Path, *, max_bytes: int, text: bool = False) -> bytes | str:
    """The contents of a file the user named on the command line, if it is a regular file."""
    path = regular_file(path)
    return _read(path, max_bytes, text, follow=True)


def _read(path: Path, max_bytes: int, text: bool, follow: bool = False) -> bytes | str:
    flags = _OPEN_FLAGS & ~(getattr(os, "O_NOFOLLOW", 0) if follow else 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise DumpError(f"{path}: cannot read ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped between the check and the open
            raise DumpError(f"{path}: not a regular file ({_kind(st.st_mode)})")
        if st.st_size > max_bytes:
            raise DumpError(f"{path}: too large ({st.st_size} bytes, at most {max_bytes} expected)")
        chunks, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    except OSError as e:
        raise DumpError(f"{path}: cannot read ({e.strerror})") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise DumpError(f"{path}: too large (more than {max_bytes} bytes)")
    if not text:
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise DumpError(f"{path}: not UTF-8 text") from None


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return what
    return "not a plain file"
