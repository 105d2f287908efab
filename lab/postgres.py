"""A PostgreSQL server of its own for a test or a benchmark: a fresh cluster in a temporary
directory, listening on loopback (and a socket in that directory) on a free port, stopped and
removed on exit. Debian's packaged server (`postgresql`), never its system service.

    with TemporaryPostgres() as pg:
        camus-xdp controller serve ... --db pg.url

PostgreSQL refuses to run as root: as root the cluster belongs to the `postgres` user (the
package creates it) and its programs run through `runuser`; as anyone else, as themselves.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server can be started here (not installed, or it would not start)."""


def server_bin() -> Path:
    """The newest installed server's programs (Debian: /usr/lib/postgresql/VERSION/bin)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(Path(p).parent.parent.name))
    if not found:
        raise PostgresUnavailable("PostgreSQL's server is not installed (Debian package `postgresql`; "
                                  "scripts/setup.sh installs it)")
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TemporaryPostgres:
    """A throwaway cluster: `url` is its database `camus` (user `camus`, trust on loopback)."""

    def __init__(self, start_timeout: float = 120.0) -> None:
        self.start_timeout = start_timeout
        self.dir = Path(tempfile.mkdtemp(prefix="camus-pg-"))
        self.port = _free_port()
        self.url = f"postgresql://camus@127.0.0.1:{self.port}/camus"
        self._as: list[str] = []
        self.log = self.dir / "server.log"

    def _run(self, *cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run([*self._as, *cmd], capture_output=True, text=True)

    def start(self) -> "TemporaryPostgres":
        bin_dir = server_bin()
        if os.geteuid() == 0:                     # the server will not run as root
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                raise PostgresUnavailable("running as root and there is no `postgres` user to run the "
                                          "server as") from None
            os.chown(self.dir, owner.pw_uid, owner.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        data = self.dir / "data"
        made = self._run(str(bin_dir / "initdb"), "-D", str(data), "-U", "camus", "-A", "trust",
                         "--no-sync", "-E", "UTF8")
        if made.returncode:
            raise PostgresUnavailable(f"initdb failed: {made.stderr.strip()[-500:]}")
        # fsync off: a test's cluster is thrown away; a crash test kills controllers, not this
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off -c max_connections=200"
        started = self._run(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(self.log), "-o", options,
                            "-w", "-t", str(int(self.start_timeout)), "start")
        if started.returncode:
            log = self.log.read_text()[-800:] if self.log.exists() else ""
            raise PostgresUnavailable(f"the server did not start: {started.stderr.strip()[-300:]} {log}")
        created = self._run(str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "camus", "camus")
        if created.returncode:
            self.stop()
            raise PostgresUnavailable(f"createdb failed: {created.stderr.strip()[-300:]}")
        return self

    def stop(self) -> None:
        data = self.dir / "data"
        if (data / "postmaster.pid").exists():
            self._run(str(server_bin() / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "TemporaryPostgres":
        try:
            return self.start()
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

