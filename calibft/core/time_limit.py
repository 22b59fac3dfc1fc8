"""The time limit of the Slurm job that a process runs in, so that a training run can write a checkpoint and stop
before Slurm ends the job, and resume on its retry.

Slurm's own warning, `sbatch --signal`, reaches the job's processes through Snakemake's two job-step processes,
whose default action on that signal is to exit, which ends the step; the run therefore asks Slurm for its end time
instead (squeue, at most every 30 s, so that a limit changed with `scontrol update` is seen too).
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime

RECHECK_S = 30.0


def slurm_end_time(job_id: str) -> float | None:
    """When Slurm ends this job (seconds since the epoch); None without a limit or when squeue cannot say."""
    try:
        done = subprocess.run(
            ["squeue", "--noheader", "--jobs", job_id, "--format=%e"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    try:
        return datetime.fromisoformat(done.stdout.strip()).timestamp()  # local time, as squeue prints it
    except ValueError:
        return None  # "N/A", "NONE", "Unknown" or nothing: no limit known


@dataclass
class TimeLimit:
    """The job's end time less a margin; `reached` is True once the margin has begun."""

    margin_s: float
    job_id: str | None = None
    end: float | None = None
    checked: float = -float("inf")

    @classmethod
    def of_this_job(cls, margin_minutes: float) -> TimeLimit:
        """The limit of the Slurm job in SLURM_JOB_ID; none outside Slurm."""
        return cls(margin_s=60.0 * margin_minutes, job_id=os.environ.get("SLURM_JOB_ID"))

    def reached(self) -> bool:
        if self.job_id is None:
            return False
        now = time.time()
        if now - self.checked >= RECHECK_S:
            self.end, self.checked = slurm_end_time(self.job_id), now
        return self.end is not None and now >= self.end - self.margin_s
