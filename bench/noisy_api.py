"""The API alone (as gpu_tenancy.wsgi), on the virtual time bench/noisy_neighbour.py's
engine keeps in a file, so that a replan in this process plans at the engine's now."""
import os
import struct

from gpu_tenancy.app import create_app
from gpu_tenancy.config import Config


class FileClock:
    """Reads the epoch second another process writes (8 bytes, see noisy_neighbour.SharedClock)."""

    def __init__(self, path: str):
        self.fd = os.open(path, os.O_RDONLY)

    def now(self) -> int:
        return struct.unpack("<q", os.pread(self.fd, 8, 0))[0]


application = create_app(Config.load(os.environ["GPU_TENANCY_CONFIG"], run_engine=False),
                         clock=FileClock(os.environ["BENCH_CLOCK_FILE"]))
