"""Pickles that would run code when loaded, for the tests that show calibft refuses them."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path


class _RunsCommand:
    """Unpickles by calling `os.system(command)`: what a tampered parameters file could hold."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def touching_pickle(path: Path, marker: Path) -> Path:
    """Write to `path` a parameters-shaped pickle whose loading runs `touch marker`; returns `path`."""
    path.write_bytes(pickle.dumps({"lb": _RunsCommand(f"touch {marker}"), "mmlu": {}}))
    return path


def assert_plain_pickle_runs_it(path: Path, marker: Path) -> None:
    """The control: `pickle.load` of the file (in another process) creates `marker`, so a test that finds no
    marker after calibft read the file shows that calibft ran nothing. The marker is removed again."""
    subprocess.run([sys.executable, "-c", "import pickle, sys; pickle.load(open(sys.argv[1], 'rb'))", str(path)])
    assert marker.exists(), "the test pickle should run its command under a plain pickle.load"
    marker.unlink()
