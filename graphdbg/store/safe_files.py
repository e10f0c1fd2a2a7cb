"""Safe file access (the files side of the gate, docs/security.md): every file a dump or a folder
names is read, and every file graphdbg writes is made, here.

A dump is untrusted: its manifest names its own files (``graph.file``, ``inputs_file``,
``backward_dump``), a minifier script names its storages, a dump folder holds ``fault.txt``, a
minify output holds ``repro.py``, a corpus holds ``bisect-*.json`` and ``log.txt``, and any of
those names, or the files themselves, may point elsewhere. Every reader goes through here, so that:

- a name is a plain relative path: not absolute, no ``..``, no NUL, no empty part;
- no part of it is a symbolic link (checked with ``lstat`` part by part, and the file is
  opened with ``O_NOFOLLOW``), so nothing leads out of the folder;
- only regular files are opened: a FIFO or a device is refused before ``open`` (a FIFO would
  block ``open`` itself), and ``fstat`` checks the file that was really opened;
- a size limit is enforced on what is read, and a file is read once (no second open that a
  swap between check and use could redirect);
- an archive member is inflated only up to its declared size and an absolute cap (zip bombs).

Every write goes through ``Folder``: a folder opened once (``O_DIRECTORY``, no symbolic link
below the one the user named), files created in it by ``openat`` (``dir_fd=``) with
``O_CREAT | O_EXCL | O_NOFOLLOW`` under a fresh hidden name and renamed over the target with
``os.replace`` between the same folder descriptors. A planted link (``.graph.py.redacting ->
../victim``, a symlinked ``graph.py``, a dangling link in an output folder) is replaced, never
written through.

Errors are ``DumpError`` (exit code 2) naming the path, never quoting the file.

    >>> inside(Path("dumps/rank0/g0"), "inputs.safetensors")       # a checked path
    PosixPath('dumps/rank0/g0/inputs.safetensors')
    >>> read_inside(Path("dumps/rank0/g0"), "../../etc/passwd")
    Traceback (most recent call last):
    graphdbg.errors.DumpError: dumps/rank0/g0: refusing '../../etc/passwd': not a file inside the dump
"""

from __future__ import annotations

import fnmatch
import json
import os
import select
import stat
from pathlib import Path, PurePosixPath, PureWindowsPath

from graphdbg.errors import DumpError

__all__ = ["inside", "read_inside", "read_regular", "read_child_file", "regular_file", "check_name", "inside_folder", "read_beside",
           "read_json", "backward_dump_folder", "files_under", "inflate_member", "open_stream", "Folder", "write_file",
           "refuse_link", "MAX_TEXT_BYTES", "MAX_JSON_BYTES"]

MAX_TEXT_BYTES = 16 << 20  # fault.txt, repro.py, log.txt: text a person reads
MAX_JSON_BYTES = 16 << 20  # bisect-*.json, outcome.json
MAX_COPY_BYTES = 8 << 30  # one file of a dump copied elsewhere (export-test)
MAX_INFLATE_BYTES = 8 << 30  # an archive member, whatever it declares

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
    return _walk_inside(root, name, folder=False)


def _walk_inside(root: Path, name: object, *, folder: bool) -> Path:
    """``root / name`` reached part by part through no symbolic link, every part but the last a
    folder and the last a folder (``folder``) or a regular file."""
    root = Path(root)
    parts = check_name(root, name)
    path = root
    for i, part in enumerate(parts):
        path = path / part
        st = _stat(path, follow=False)
        if stat.S_ISLNK(st.st_mode):
            raise DumpError(f"{path}: refusing a symbolic link inside a dump (it could lead anywhere)")
        last = i == len(parts) - 1
        if (not last or folder) and not stat.S_ISDIR(st.st_mode):
            raise DumpError(f"{path}: not a folder")
        if last and not folder and not stat.S_ISREG(st.st_mode):
            raise DumpError(f"{path}: not a regular file ({_kind(st.st_mode)})")
    return path


def read_inside(root: Path, name: object, *, max_bytes: int, text: bool = False) -> bytes | str:
    """The contents of the regular file ``name`` inside ``root`` (see ``inside``)."""
    return _read(inside(root, name), max_bytes, text)


def regular_file(path: Path) -> Path:
    """``path`` if it is a regular file (a symbolic link to one is followed: the user named it),
    else DumpError: a FIFO or device would block or never end."""
    path = Path(path)
    st = _stat(path, follow=True)
    if not stat.S_ISREG(st.st_mode):
        raise DumpError(f"{path}: not a regular file ({_kind(st.st_mode)})")
    return path


def _stat(path: Path, *, follow: bool) -> os.stat_result:
    """``os.stat`` (``os.lstat`` without ``follow``); DumpError in one line when it can't."""
    try:
        return os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        raise DumpError(f"{path}: missing") from None
    except OSError as e:
        raise DumpError(f"{path}: cannot read ({e.strerror})") from None


def read_regular(path: Path, *, max_bytes: int, text: bool = False) -> bytes | str:
    """The contents of a file the user named on the command line, if it is a regular file."""
    path = regular_file(path)
    return _read(path, max_bytes, text, follow=True)


def read_head(path: Path | str, max_bytes: int, *, follow: bool = True) -> bytes:
    """The first ``max_bytes`` of a regular file (a file being sniffed: no FIFO to hang on, no
    device), checked with ``fstat`` on what was really opened; ``follow=False`` also refuses a
    symbolic link as the last part. DumpError where it is not such a file or can't be read."""
    return _read(Path(path), max_bytes, False, follow=follow, head=True)  # type: ignore[return-value]


def read_child_file(path: Path, *, max_bytes: int, tail: bool = False) -> bytes:
    """A file a child process wrote, or could have replaced (its stderr, its sandbox note, a
    pid file): read as a name inside its folder (a regular file, no link, opened without
    blocking, so a FIFO swapped in by a child that then died never hangs this process), at
    most ``max_bytes``; with ``tail``, the last ``max_bytes`` of a longer file instead of an
    error. DumpError when it is missing or not such a file."""
    path = Path(path)
    return _read(inside(path.parent, path.name), max_bytes, False, tail=tail)  # type: ignore[return-value]


def read_pipe(fd: int, *, max_bytes: int, timeout: float) -> bytes | None:
    """What a child wrote on a pipe to this process (a worker's answer line): at most
    ``max_bytes``, waiting at most ``timeout`` seconds (None when nothing came in time; ``b""``
    when the child closed it), never blocking past that whatever the child does."""
    ready, _, _ = select.select([fd], [], [], max(0.0, timeout))
    if not ready:
        return None
    try:
        return os.read(fd, max_bytes)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _read(path: Path, max_bytes: int, text: bool, follow: bool = False, tail: bool = False, head: bool = False) -> bytes | str:
    flags = _OPEN_FLAGS & ~(getattr(os, "O_NOFOLLOW", 0) if follow else 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise DumpError(f"{path}: cannot read ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped between the check and the open
            raise DumpError(f"{path}: not a regular file ({_kind(st.st_mode)})")
        if st.st_size > max_bytes and tail:
            os.lseek(fd, st.st_size - max_bytes, os.SEEK_SET)
        elif st.st_size > max_bytes and not head:
            raise DumpError(f"{path}: too large ({st.st_size} bytes, at most {max_bytes} expected)")
        chunks, left = [], max_bytes + (not head)
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
    if len(data) > max_bytes and tail:
        data = data[-max_bytes:]
    elif len(data) > max_bytes:
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


def inside_folder(root: Path, name: object) -> Path:
    """``root / name`` if it is a folder inside ``root`` reached through no symbolic link (a
    ``backward_dump`` must stay inside the dump that names it); DumpError otherwise."""
    return _walk_inside(root, name, folder=True)


def backward_dump_folder(path: Path, name: object) -> Path:
    """The backward dump a forward dump names in ``backward_dump``: only ``".."``, the dump
    this forward was written inside (``<backward>/forward/``), reached through no link. Any
    other value (``../other``, an absolute path) is refused: it would load a dump the user
    never named."""
    path = Path(os.path.abspath(path))
    if name != "..":
        raise DumpError(f"{path}: refusing backward_dump {str(name)[:80]!r}: a forward dump lies inside its backward dump ('..')")
    if os.path.islink(path):
        raise DumpError(f"{path}: refusing a symbolic link inside a dump (it could lead anywhere)")
    return path.parent


def read_beside(root: Path, path: Path, *, max_bytes: int = MAX_TEXT_BYTES, text: bool = True) -> bytes | str:
    """A file found under ``root`` (``fault.txt``, ``repro.py``, ``log.txt``): ``path`` relative to
    ``root``, checked like a name a manifest gives (see ``inside``)."""
    rel = os.path.relpath(path, root) if os.path.isabs(path) == os.path.isabs(root) else str(path)
    return read_inside(Path(root), Path(rel).as_posix(), max_bytes=max_bytes, text=text)


def read_json(root: Path, name: object, *, max_bytes: int = MAX_JSON_BYTES, what: str = "JSON file") -> object:
    """A JSON file inside ``root``, parsed; garbage (not JSON, too deep, too large) is a DumpError."""

    data = read_inside(root, name, max_bytes=max_bytes, text=True)
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise DumpError(f"{Path(root) / str(name)}: not a valid {what}") from None


def files_under(root: Path, pattern: str, *, limit: int = 10_000) -> list[Path]:
    """Regular files under ``root`` whose name matches ``pattern`` (fnmatch), found without
    following any symbolic link; hidden folders skipped."""

    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and not os.path.islink(os.path.join(dirpath, d)))
        for name in sorted(filenames):
            if fnmatch.fnmatch(name, pattern):
                full = os.path.join(dirpath, name)
                try:
                    if stat.S_ISREG(os.lstat(full).st_mode):
                        found.append(Path(full))
                except OSError:
                    continue
                if len(found) >= limit:
                    return found
    return found


def inflate_member(archive: Path, member: str, *, declared: int | None = None, cap: int = MAX_INFLATE_BYTES) -> bytes:
    """One member of a zip archive (already checked by ``inside`` or ``regular_file``), inflated
    at most to the size its header declares and never past ``cap``: a zip bomb stops early."""

    import zipfile  # lazy: ls reads no archive

    fd = _open_fd(Path(archive), follow=False)
    with os.fdopen(fd, "rb") as f, zipfile.ZipFile(f) as z:
        info = z.getinfo(member)
        size = info.file_size if declared is None else declared
        if size > cap or info.file_size > cap:
            raise DumpError(f"{archive}: {member} declares {info.file_size} bytes, over the {cap} byte limit")
        try:
            with z.open(info) as m:  # zipfile stops at the declared size and checks the CRC there
                data = m.read(size + 1)
        except zipfile.BadZipFile:
            data = None
        if data is None or len(data) != info.file_size or len(data) > size:
            raise DumpError(f"{archive}: {member} is damaged or inflates past the {size} bytes it declares")
        return data


def open_stream(path: Path | str, *, follow: bool = True):
    """A binary file object on a regular file (a log, a file being sniffed), for reading it in
    pieces: opened without blocking (a FIFO can't hang it), checked with ``fstat`` on what was
    really opened; ``follow=False`` also refuses a symbolic link as the last part."""
    return os.fdopen(_open_fd(Path(path), follow=follow), "rb")


def _open_fd(path: Path, follow: bool) -> int:
    flags = _OPEN_FLAGS & ~(getattr(os, "O_NOFOLLOW", 0) if follow else 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise DumpError(f"{path}: cannot read ({e.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise DumpError(f"{path}: not a regular file ({_kind(st.st_mode)})")
    os.set_blocking(fd, True)
    return fd


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) \
    | getattr(os, "O_BINARY", 0)


class Folder:
    """A folder opened once, the only way graphdbg writes files.

        >>> with Folder.open("out", create=True) as out:
        ...     out.replace("manifest.json", text)      # atomic: a reader sees the old or the new file

    The folder the user named is opened as given (a link there is the user's choice); every
    folder below it is opened with ``O_NOFOLLOW`` relative to its parent's descriptor, so a link
    planted inside can't lead the write elsewhere. Files are made under a fresh hidden name with
    ``O_EXCL | O_NOFOLLOW`` and renamed over the target between the same descriptors.
    """

    def __init__(self, fd: int, path: Path):
        self.fd, self.path = fd, Path(path)

    @classmethod
    def open(cls, path: Path | str, *, create: bool = False, follow: bool = True) -> Folder:
        """``follow=False``: an output graphdbg chose itself (minify's ``<dump>-min``, extract's
        ``graphs``): no part of ``path`` may be a symbolic link, each opened with ``O_NOFOLLOW``
        from where the path starts, so a link planted where it goes is refused, not followed."""
        path = Path(path)
        if not follow:
            return cls._open_unfollowed(path, create)
        if create:
            try:
                path.mkdir(parents=True, exist_ok=True)
            except FileExistsError:
                raise DumpError(f"{path}: exists and is not a folder") from None
            except OSError as e:
                raise DumpError(f"{path}: cannot make the folder ({e.strerror})") from None
        try:
            return cls(os.open(path, _DIR_FLAGS), path)
        except OSError as e:
            raise DumpError(f"{path}: cannot open the folder ({e.strerror})") from None

    @classmethod
    def _open_unfollowed(cls, path: Path, create: bool) -> Folder:
        here = cls(os.open("/" if path.is_absolute() else ".", _DIR_FLAGS), Path("/" if path.is_absolute() else "."))
        try:
            for part in path.parts[1:] if path.is_absolute() else path.parts:
                refuse_link(here.path / part, dir_fd=here.fd, name=part)
                there = here.sub(part, create=create) if part != ".." else \
                    Folder(os.open(part, _DIR_FLAGS, dir_fd=here.fd), here.path / part)
                here.close()
                here = there
        except BaseException:
            here.close()
            raise
        here.path = path
        return here

    def sub(self, name: str, *, create: bool = False) -> Folder:
        """A folder inside this one, opened without following a link."""
        _plain(self.path, name)
        if create:
            try:
                os.mkdir(name, dir_fd=self.fd)
            except FileExistsError:
                pass
        try:
            return Folder(os.open(name, _DIR_FLAGS | getattr(os, "O_NOFOLLOW", 0), dir_fd=self.fd), self.path / name)
        except OSError as e:
            raise DumpError(f"{self.path / name}: cannot open the folder ({e.strerror}; a link is never followed)") from None

    def create(self, name: str, data: bytes | str) -> Path:
        """A new file: refuses to replace anything already there (a file or a link)."""
        _plain(self.path, name)
        self._write_new(name, data)
        return self.path / name

    def replace(self, name: str, data: bytes | str) -> Path:
        """Write ``name`` atomically: a fresh hidden file, then ``os.replace`` over whatever was
        there (a planted link is replaced, not followed)."""

        _plain(self.path, name)
        tmp = f".{name[:80]}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        self._write_new(tmp, data)
        try:
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except OSError as e:
            self.remove(tmp)
            raise DumpError(f"{self.path / name}: cannot write ({e.strerror})") from None
        return self.path / name

    def put(self, parts: tuple[str, ...] | list[str], data: bytes | str, *, replace: bool = False,
            make_folders: bool = False) -> Path:
        """Write ``parts[-1]`` in the folder ``parts[:-1]`` below this one, each folder opened
        without following a link (``check_name`` gives the parts of a dump's file name)."""
        *folders, base = parts
        opened: list[Folder] = []
        try:
            here = self
            for part in folders:
                here = here.sub(part, create=make_folders)
                opened.append(here)
            return here.replace(base, data) if replace else here.create(base, data)
        finally:
            for f in opened:
                f.close()

    def remove(self, name: str) -> None:
        try:
            os.unlink(name, dir_fd=self.fd)
        except OSError:
            pass

    def new_fd(self, name: str) -> int:
        """A descriptor on a new file ``name`` (``O_CREAT | O_EXCL | O_NOFOLLOW``), for streaming."""
        _plain(self.path, name)
        try:
            return os.open(name, _NEW_FLAGS, 0o644, dir_fd=self.fd)
        except FileExistsError:
            raise DumpError(f"{self.path / name}: already exists; refusing to write through or over it") from None
        except OSError as e:
            raise DumpError(f"{self.path / name}: cannot write ({e.strerror})") from None

    def _write_new(self, name: str, data: bytes | str) -> None:
        blob = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        fd = self.new_fd(name)
        try:
            view = memoryview(blob)
            while view:
                view = view[os.write(fd, view):]
        except OSError as e:
            os.close(fd)
            self.remove(name)
            raise DumpError(f"{self.path / name}: cannot write ({e.strerror})") from None
        os.close(fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_file(path: Path | str, data: bytes | str, *, create_parent: bool = True, follow: bool = True) -> Path:
    """Write one file atomically through ``Folder`` (its folder opened once, no link followed at
    the file; ``follow=False``: none on the way to it either, see ``Folder.open``)."""
    path = Path(path)
    with Folder.open(path.parent, create=create_parent, follow=follow) as folder:
        return folder.replace(path.name, data)


def refuse_link(path: Path | str, *, dir_fd: int | None = None, name: str | None = None) -> None:
    """DumpError if ``path`` (or ``name`` in the folder ``dir_fd``) is a symbolic link: where
    graphdbg chose the output, a link there was planted, and is never written through."""
    try:
        st = os.lstat(name if name is not None else path, dir_fd=dir_fd)
    except OSError:
        return  # missing: it will be made
    if stat.S_ISLNK(st.st_mode):
        raise DumpError(f"{path}: is a symbolic link; graphdbg never writes its default output through a link "
                        "(name the output with -o to write there)")


def _plain(where: Path, name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        raise DumpError(f"{where}: refusing to write {name[:80]!r}: not a plain file name")
