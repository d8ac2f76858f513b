"""A throwaway PostgreSQL cluster for a benchmark, as scripts/run-tests makes
one: initdb in a temporary directory, trust auth, 127.0.0.1 only, fsync off;
stopped by its postmaster's PID and removed."""
from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time


def find_pg_bin() -> str | None:
    found = [d for d in sorted(glob.glob("/usr/lib/postgresql/*/bin")) if os.access(os.path.join(d, "initdb"), os.X_OK)]
    initdb = shutil.which("initdb")
    return found[-1] if found else (os.path.dirname(initdb) if initdb else None)


class ThrowawayPostgres:
    def __init__(self, port: int, pg_bin: str | None = None):
        self.port = port
        pg_bin = pg_bin or find_pg_bin()
        if not pg_bin:
            raise SystemExit("PostgreSQL is not installed (no initdb): install it, or give --pg-bin")
        self.pg_bin = pg_bin
        self.dir = tempfile.mkdtemp(prefix="gt-bench-pg-")
        self.pid: int | None = None

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *cmd: str) -> None:
        prefix = []
        if os.geteuid() == 0:   # initdb refuses to run as root
            shutil.chown(self.dir, "postgres")
            prefix = ["runuser", "-u", "postgres", "--"]
        subprocess.run(prefix + list(cmd), check=True, stdout=subprocess.DEVNULL)

    def start(self) -> "ThrowawayPostgres":
        data = os.path.join(self.dir, "data")
        self._run(os.path.join(self.pg_bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self._run(os.path.join(self.pg_bin, "pg_ctl"), "-D", data, "-l", os.path.join(self.dir, "log"), "-w",
                  "-t", "60", "-o", f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} "
                  "-c fsync=off -c max_connections=200", "start")
        with open(os.path.join(data, "postmaster.pid")) as f:
            self.pid = int(f.readline())
        return self

    def stop(self) -> None:
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGTERM)
                for _ in range(100):
                    os.kill(self.pid, 0)
                    time.sleep(0.1)
            except ProcessLookupError:
                pass
            self.pid = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
