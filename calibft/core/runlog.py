"""Logging for workflow jobs: everything a job reports, progress bars included, goes to its log file, and every
attempt of a job that is retried or requeued stays in it (`python -m calibft.core.runlog`), which runs each job as its
only writer (calibft.core.single_writer)."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from calibft.core.single_writer import Writer, adoptable, claim_path, wait_for_other_writer, write_claim


def log_to(path: str | Path) -> logging.Logger:
    """Send logging and stderr (where tqdm writes) to `path`; return the `calibft` logger."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    stream = open(path, "a", buffering=1)
    sys.stderr = stream
    logging.basicConfig(
        stream=stream, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )
    return logging.getLogger("calibft")


def run_attempt(log: str | Path, attempt: int, command: Sequence[str], outputs: Sequence[str] = ()) -> int:
    """Run `command` as attempt `attempt` of a workflow job, its output in `log` and in `log`.attempts, which keeps
    every attempt of the job. Snakemake empties a job's log before each attempt, and a Slurm requeue runs an attempt
    again, so the log alone would show the last one; the kept file is started afresh by a first attempt, unless
    it is the same Slurm job again (requeued) or it waited for another copy of the job, and the log becomes a copy
    of it at the end.

    The attempt is the job's only writer (calibft.core.single_writer): while another copy of the job still runs
    (submitted before the workflow was restarted), it waits for it, then adopts that copy's `outputs` when it
    ran the same command to success, and otherwise runs `command`. The command's exit status (0 when adopted)."""
    log, job = Path(log), os.environ.get("SLURM_JOB_ID")
    kept = log.with_name(log.name + ".attempts")
    claim, me = claim_path(log), Writer.this_process(command)
    waited = wait_for_other_writer(claim, me, lambda text: print(text, file=sys.stderr, flush=True))
    started = f"== attempt {attempt}, Slurm job {job or 'none'},"
    requeued = job is not None and kept.exists() and any(line.startswith(started) for line in _lines(kept))
    if attempt == 1 and not requeued and waited is None:
        kept.unlink(missing_ok=True)
    kept.parent.mkdir(parents=True, exist_ok=True)
    with open(kept, "a") as out:
        out.write(f"{started} {'requeued, ' if requeued else ''}{socket.gethostname()}, {time.strftime('%FT%T%z')}\n")
        if waited is not None:
            ended = (
                f"with exit status {waited.exit_status}"
                if waited.exit_status is not None
                else "without an exit status: killed or cancelled"
            )
            out.write(
                f"waited for {waited.describe()}, which ran this job from {waited.started}, until it ended ({ended})\n"
            )
        if adoptable(waited, me, outputs):
            out.write("it ran this command to its end and wrote every output: they are adopted, nothing runs again\n")
            status = 0
        else:
            out.flush()
            write_claim(claim, me)
            status = subprocess.call(list(command), stdout=out, stderr=subprocess.STDOUT)
            write_claim(claim, replace(me, exit_status=status))
    shutil.copyfile(kept, log)
    return status


def _lines(path: Path) -> Iterator[str]:
    with open(path, errors="replace") as f:
        yield from f


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m calibft.core.runlog LOG ATTEMPT [--outputs PATH... --] COMMAND...`: `run_attempt`."""
    log, attempt, *command = sys.argv[1:] if argv is None else argv
    outputs = []
    if command[:1] == ["--outputs"]:
        end = command.index("--")
        outputs, command = command[1:end], command[end + 1 :]
    return run_attempt(log, int(attempt), command, outputs)


if __name__ == "__main__":
    sys.exit(main())
