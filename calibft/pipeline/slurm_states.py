"""Slurm jobs that have ended although snakemake-executor-plugin-slurm (2.8.0, the pinned release) waits on them.

The plugin reads each job's state from `sacct` and takes any state it does not list for a running one. Two
endings fall through:
- a cancelled job: sacct writes `CANCELLED by UID`, which is not the `CANCELLED` it lists;
- a job preempted with PreemptMode=CANCEL: `PREEMPTED` is final there, but the plugin "leaves it to Slurm to
  resume" it, which only PreemptMode=REQUEUE does (there, sacct shows `PREEMPTED` until the requeued job starts
  again, while squeue shows it pending).

Snakemake would then poll such a job forever. `watch_ended_jobs` wraps the executor's status check (the
`check_active_jobs` of Snakemake's executor interface) so that these jobs are reported as failed, with what
happened, before the plugin sees them: Snakemake then resubmits them (`retries` in the profile) or stops with
that message, and a resubmitted training job resumes from its last checkpoint.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable

from calibft.core.slurm_queue import ALIVE, accounting_states, queue_states


def ended_jobs(sacct_states: dict[str, str], queued: dict[str, str]) -> dict[str, str]:
    """{job id: why it ended} of the jobs whose sacct state the plugin takes for a running one although the job
    has ended: cancelled (`CANCELLED by UID`), or preempted and not queued again (`queued`, squeue's
    state of each job it still lists)."""
    ended = {}
    for job, state in sacct_states.items():
        if state.startswith("CANCELLED by"):
            ended[job] = f"cancelled ({state})"
        elif state == "PREEMPTED" and queued.get(job) not in ALIVE:
            ended[job] = "preempted and not requeued (the partition's PreemptMode cancels preempted jobs)"
    return ended


def query_ended_jobs(job_ids: Iterable[str]) -> dict[str, str]:
    """`ended_jobs` of these Slurm jobs, from sacct and, for the preempted ones, squeue."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    sacct_states = accounting_states(ids)
    preempted = [job for job, state in sacct_states.items() if state == "PREEMPTED"]
    return ended_jobs(sacct_states, queue_states(preempted) if preempted else {})


def watch_ended_jobs(executor: type | None = None) -> None:
    """Wrap the status check of the slurm executor (or of `executor`) so that the jobs of `query_ended_jobs` are
    reported as failed. Nothing happens where the plugin is not installed; wrapping twice wraps once."""
    if executor is None:
        try:
            from snakemake_executor_plugin_slurm import Executor as executor
        except ImportError:
            return
    check = executor.check_active_jobs
    if getattr(check, "reports_ended_jobs", False):
        return

    async def check_active_jobs(self, active_jobs: list) -> AsyncGenerator:
        ended = query_ended_jobs([job.external_jobid for job in active_jobs])
        for job in active_jobs:
            if job.external_jobid in ended:
                self.report_job_error(
                    job,
                    msg=f"SLURM job {job.external_jobid} was {ended[job.external_jobid]}. Snakemake resubmits it "
                    "while `retries` (profiles/slurm/config.yaml) allow; a training job resumes from its last "
                    "checkpoint.",
                )
        async for job in check(self, [job for job in active_jobs if job.external_jobid not in ended]):
            yield job

    check_active_jobs.reports_ended_jobs = True
    executor.check_active_jobs = check_active_jobs
