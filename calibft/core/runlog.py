"""Logging for workflow jobs: everything a job reports, progress bars included, goes to its log file, and every
attempt of a job that is retried or requeued stays in it (`python -m calibft.runlog`)."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
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


def run_attempt(log: str | Path, attempt: int, command: Sequence[str]) -> int:
    """Run `command` as attempt `attempt` of a workflow job, its output in `log` and in `log`.attempts, which keeps
    every attempt of the job. Snakemake empties a job's log before each attempt, and a Slurm requeue runs an attempt
    again, so the log alone would show the last one; the kept file is started afresh by a first attempt, unless
    it is the same Slurm job again (requeued), and the log becomes a copy of it at the end. The command's exit
    status."""
    log, job = Path(log), os.environ.get("SLURM_JOB_ID")
    kept = log.with_name(log.name + ".attempts")
    started = f"== attempt {attempt}, Slurm job {job or 'none'},"
    requeued = job is not None and kept.exists() and any(line.startswith(started) for line in _lines(kept))
    if attempt == 1 and not requeued:
        kept.unlink(missing_ok=True)
    kept.parent.mkdir(parents=True, exist_ok=True)
    with open(kept, "a") as out:
        out.write(f"{started} {'requeued, ' if requeued else ''}{socket.gethostname()}, {time.strftime('%FT%T%z')}\n")
        out.flush()
        status = subprocess.call(list(command), stdout=out, stderr=subprocess.STDOUT)
    shutil.copyfile(kept, log)
    return status


def _lines(path: Path) -> Iterator[str]:
    with open(path, errors="replace") as f:
        yield from f


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m calibft.runlog LOG ATTEMPT COMMAND...`: `run_attempt`."""
    log, attempt, *command = sys.argv[1:] if argv is None else argv
    return run_attempt(log, int(attempt), command)


if __name__ == "__main__":
    sys.exit(main())
