"""Logging for workflow jobs: everything a job reports, progress bars included, goes to its log file."""

from __future__ import annotations

import logging
import sys
from pathlib import Path


def log_to(path: str | Path) -> logging.Logger:
    """Send logging and stderr (where tqdm writes) to `path`; return the `calibft` logger."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    stream = open(path, "a", buffering=1)
    sys.stderr = stream
    logging.basicConfig(
        stream=stream, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )
    return logging.getLogger("calibft")
