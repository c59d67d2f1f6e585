"""The run directory's guards: one process writes it at a time (:class:`RunLock`), and a write that the disk
refuses ends the run with one line (:func:`writing`).

The lock is ``<run dir>/.lock``, held with ``flock`` for the life of the run and naming its holder (host,
pid, start). The kernel drops a ``flock`` when its process dies, however it dies, so a lock file left by a
killed run is stale by construction and the next run takes it over (with a line saying so); a run that
ends in any other way removes the file.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_NAME = ".lock"
# what a full, read-only or over-quota disk raises; anything else is not the disk's doing
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EFBIG})
_BUSY_ERRNOS = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


class RunDirectoryError(RuntimeError):
    """A run directory that another process writes, or a write the disk refused: one line for the user."""


class WriteFailed(RunDirectoryError):
    """A file of the run could not be written (``what``), for the reason ``cause``."""

    def __init__(self, what: str | os.PathLike, cause: str):
        super().__init__(f"could not write {os.fspath(what)}: {cause}")
        self.what, self.cause = os.fspath(what), cause


@contextmanager
def writing(what: str | os.PathLike) -> Iterator[None]:
    """Turns a full, read-only or over-quota disk met inside the block into :class:`WriteFailed` naming the
    file (the OS error's own file name where it has one, else ``what``)."""
    try:
        yield
    except OSError as err:
        if err.errno not in DISK_ERRNOS:
            raise
        raise WriteFailed(err.filename or what, os.strerror(err.errno).lower()) from err


def torch_write_failed(err: RuntimeError, path: str | os.PathLike) -> WriteFailed | None:
    """The :class:`WriteFailed` behind torch.save's own error for a file the disk cut short (``unexpected
    pos`` from its zip writer; the OS error is lost inside torch), else None."""
    text = str(err)
    if "PytorchStreamWriter" not in text and "inline_container" not in text:
        return None
    first = (text.strip().splitlines() or [""])[0][:120]
    try:
        free = f"; {shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free} bytes free there"
    except OSError:
        free = ""
    return WriteFailed(path, f"the file system took only part of it (torch: {first}{free})")


def _describe(info: dict | None) -> str:
    if not info:
        return "another process (its .lock names none yet)"
    return (f"pid {info.get('pid')} on host {info.get('host')}"
            + (f" (since {info['started']})" if info.get("started") else ""))


def _read(path: Path) -> dict | None:
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def _busy(run_dir: Path, info: dict | None) -> RunDirectoryError:
    return RunDirectoryError(
        f"run directory {run_dir} is in use by {_describe(info)}: two runs would overwrite each other's "
        "checkpoints and metrics. Wait for that run to end (then resume=<dir> continues it) or choose "
        "another directory (hydra.run.dir=...)")


def holder(run_dir: str | os.PathLike) -> RunDirectoryError | None:
    """The error to give when a live run holds ``run_dir`` (None when none does). Takes nothing, creates
    nothing: for a check before anything is written (train.py, before Hydra writes its files)."""
    path = Path(run_dir) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None  # no lock file (or no directory): nobody holds it
    try:
        # shared: two of these checks at once do not see each other; only a holder's exclusive lock blocks
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as err:
        return _busy(Path(run_dir), _read(path)) if err.errno in _BUSY_ERRNOS else None
    finally:
        os.close(fd)  # also drops the shared lock
    return None


class RunLock:
    """``<run dir>/.lock``, held by this process from :meth:`acquire` to :meth:`release` (or its death)."""

    def __init__(self, run_dir: str | os.PathLike):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.fd: int | None = None

    def acquire(self) -> None:
        """Takes the lock or raises :class:`RunDirectoryError` naming its holder."""
        deadline = time.monotonic() + 1.0  # a concurrent :func:`holder` check holds it for microseconds
        while True:
            with writing(self.path):
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                os.close(fd)
                if err.errno not in _BUSY_ERRNOS:  # a file system without flock (some network or FUSE ones)
                    print(f"gprl: warning: {self.run_dir} has no file locks ({os.strerror(err.errno)}): "
                          "nothing stops a second run from writing into it", file=sys.stderr, flush=True)
                    return
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                raise _busy(self.run_dir, _read(self.path)) from None
            try:  # the holder may have removed the file between our open and flock: lock the one now there
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self.fd = fd
        left = _read(self.path)
        if left:
            print(f"gprl: took over the lock of {self.run_dir} left by {_describe(left)}, which ended "
                  "without releasing it", file=sys.stderr, flush=True)
        mine = {"host": socket.gethostname(), "pid": os.getpid(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        try:
            with writing(self.path):
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(mine).encode(), 0)
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Removes the lock file (while still holding it, so no other process takes a file about to go)."""
        if self.fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass  # a read-only disk: the file stays, and the next run takes the unheld lock over
        os.close(self.fd)
        self.fd = None
