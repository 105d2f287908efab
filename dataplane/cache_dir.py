"""A folder of cache entries only root writes (the program cache and the compile cache): each
entry a file named by its key, written atomically (a reader sees the whole file or none), the
newest `keep` kept, and a folder that is not ours alone never read (its entries become kernel
code and unpickled objects).

`CAMUS_XDP_CACHE=DIR` moves the program cache to DIR (the others beside it); `off` turns them off.
"""
from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_PROGRAMS = Path("/var/cache/camus-xdp/programs")


def safe_dir(root: Path) -> bool:
    """The directory is ours alone: our user's, not writable by others."""
    st = root.stat()
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


@dataclass(frozen=True)
class CacheDir:
    name: str                   # "programs", or a folder beside it
    suffix: str                 # the entries' file suffix
    keep: int                   # entries kept, the newest used

    @property
    def root(self) -> Path | None:
        """Where the entries live; None when the caches are off."""
        where = os.environ.get("CAMUS_XDP_CACHE", "")
        if where.lower() in ("off", "0", "no"):
            return None
        programs = Path(where) if where else DEFAULT_PROGRAMS
        return programs if self.name == "programs" else programs.parent / self.name

    def _path(self, key: str) -> Path | None:
        root = self.root
        return None if root is None else root / f"{key}{self.suffix}"

    def read(self, key: str) -> bytes | None:
        """The entry's bytes (marked newest), or None: no entry, caches off, or a folder not
        ours alone (said once in the log)."""
        path = self._path(key)
        if path is None:
            return None
        try:
            if not safe_dir(path.parent):
                log.warning("cache folder %s is writable by others or not ours: not used", path.parent)
                return None
            data = path.read_bytes()
            os.utime(path)
            return data
        except OSError:
            return None

    def has(self, key: str) -> bool:
        path = self._path(key)
        return path is not None and path.exists()

    def write(self, key: str, data: bytes) -> None:
        """Keep an entry; the oldest past `keep` go. A folder that cannot be written (a read-only
        /var) or is not ours alone keeps nothing: the next use builds again."""
        path = self._path(key)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if not safe_dir(path.parent):
                return
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".entry-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            entries = sorted(path.parent.glob(f"*{self.suffix}"), key=lambda p: p.stat().st_mtime, reverse=True)
            for old in entries[self.keep:]:
                old.unlink(missing_ok=True)
        except OSError as exc:
            log.info("%s cache: could not keep %s (%s)", self.name, key, exc)

    def drop(self, key: str) -> None:
        """Remove an entry its reader could not use (damaged, stale)."""
        path = self._path(key)
        if path is not None:
            log.info("%s cache entry %s unusable: removed", self.name, path)
            path.unlink(missing_ok=True)
