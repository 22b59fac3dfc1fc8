"""calibft.pipeline.slurm_states: the Slurm jobs that the slurm executor plugin would wait on forever. The cluster tests
(tests/workflow/test_slurm.py) show the whole path on a real Slurm."""

import asyncio
from dataclasses import dataclass

import calibft.pipeline.slurm_states
from calibft.pipeline.slurm_states import ended_jobs, watch_ended_jobs


def test_cancelled_jobs_and_preempted_jobs_that_were_not_requeued_have_ended():
    sacct = {
        "1": "CANCELLED by 0", "2": "PREEMPTED", "3": "PREEMPTED", "4": "RUNNING", "5": "CANCELLED", "6": "PENDING",
        "7": "COMPLETED", "8": "TIMEOUT", "9": "PREEMPTED",
    }  # fmt: skip
    squeue = {"3": "PENDING", "9": "PREEMPTED"}  # 3 is requeued (PreemptMode=REQUEUE); 2 left the queue
    assert ended_jobs(sacct, squeue) == {
        "1": "cancelled (CANCELLED by 0)",
        "2": "preempted and not requeued (the partition's PreemptMode cancels preempted jobs)",
        "9": "preempted and not requeued (the partition's PreemptMode cancels preempted jobs)",
    }  # 5 and 8 the plugin reports itself


@dataclass(frozen=True)
class Job:
    external_jobid: str


def test_the_wrapped_status_check_reports_ended_jobs_and_passes_the_others_on(monkeypatch):
    class Executor:
        def __init__(self):
            self.errors, self.checked = [], []

        def report_job_error(self, job, msg):
            self.errors.append((job.external_jobid, msg))

        async def check_active_jobs(self, active_jobs):
            self.checked.append([job.external_jobid for job in active_jobs])
            for job in active_jobs:
                yield job

    monkeypatch.setattr(
        calibft.pipeline.slurm_states, "query_ended_jobs", lambda ids: {"2": "cancelled (CANCELLED by 0)"}
    )
    watch_ended_jobs(Executor)
    watch_ended_jobs(Executor)  # once only
    executor = Executor()

    async def still_running():
        return [job.external_jobid async for job in executor.check_active_jobs([Job("1"), Job("2"), Job("3")])]

    assert asyncio.run(still_running()) == ["1", "3"]
    assert executor.checked == [["1", "3"]]
    ((job, message),) = executor.errors
    assert job == "2" and message.startswith("SLURM job 2 was cancelled (CANCELLED by 0). Snakemake resubmits it")
