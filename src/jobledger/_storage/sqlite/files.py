"""Noticing a database file that was deleted or replaced under an open connection.

SQLite keeps using the inode it opened: after `rm app.db` (or a restore that renames a
new file into place) a running worker goes on committing to a file no other process can
open, and nothing fails. Two cheap checks see it:

* the process that opened the file compares `os.stat(path)` with the (device, inode) it
  recorded at open (`FileIdentity`); `os.stat` never opens the file, so it cannot drop a
  POSIX lock this process holds (see `_storage/lease.py`);
* anyone on the same host can look for processes holding `path (deleted)` open
  (`unlinked_holders`, Linux `/proc` only; elsewhere it finds nothing).
"""

from __future__ import annotations

import os

__all__ = ["FileIdentity", "unlinked_holders"]


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class FileIdentity:
    """The file `path` named when `record()` ran, and whether it still does."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._opened: tuple[int, int] | None = None

    def record(self) -> None:
        """Call right after opening the connection."""
        self._opened = _identity(self.path)

    def replaced(self) -> bool:
        """True when `path` is gone or names another file than the one recorded."""
        if self._opened is None:
            return False
        return _identity(self.path) != self._opened


def unlinked_holders(path: str) -> list[int]:
    """Pids of this host's processes (that we may inspect) with a deleted file that was
    at `path` still open; sorted. Empty where there is no `/proc`."""
    wanted = os.path.realpath(path) + " (deleted)"
    found: list[int] = []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:  # gone, or another user's
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if target == wanted:
                found.append(pid)
                break
    return sorted(found)
