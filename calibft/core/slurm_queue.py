"""What Slurm says of a job: its state in squeue (queued or running) and in sacct (its record once it left the
queue)."""

from __future__ import annotations

import subprocess

# squeue's states of a job that is queued or running, requeued jobs included
ALIVE = {
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING",
    "SIGNALING", "STAGE_OUT", "SUSPENDED", "STOPPED",
}  # fmt: skip


def job_states(command: list[str]) -> dict[str, str]:
    """{job id: state} from a `sacct --parsable2` or `squeue` listing of `id|state` lines; empty if it fails."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if done.returncode != 0:
        return {}
    rows = (line.split("|", 1) for line in done.stdout.splitlines() if "|" in line)
    return {job.strip(): state.strip() for job, state in rows}


def queue_states(job_ids: list[str]) -> dict[str, str]:
    """squeue's state of each of these jobs that it still lists."""
    return job_states(["squeue", "--noheader", "--states=all", "--format=%i|%T", "-j", ",".join(job_ids)])


def accounting_states(job_ids: list[str]) -> dict[str, str]:
    """sacct's state of each of these jobs (the jobs, not their steps), on every cluster."""
    sacct = ["sacct", "-X", "--parsable2", "--noheader", "--clusters", "all", "--format=JobIdRaw,State", "-j"]
    return job_states([*sacct, ",".join(job_ids)])


def job_alive(job_id: str) -> bool:
    """Whether a Slurm job is queued or running: squeue's state, or sacct's once squeue no longer lists it (a
    job that neither knows, or where Slurm cannot be asked, is taken as ended)."""
    state = queue_states([job_id]).get(job_id) or accounting_states([job_id]).get(job_id, "")
    return state.split()[0] in ALIVE if state else False
