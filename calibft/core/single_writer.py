"""One writer per workflow job, across restarts of the workflow.

A Slurm job outlives the Snakemake that submitted it. When that Snakemake dies (a closed login session, a killed
process) and is started again, it submits every job whose outputs are missing, including the ones still running
in Slurm: two copies of one job would then write the same checkpoint and output folders at once. Each attempt of a
job therefore records who writes for it in a claim file beside the job's log (`{log}.writer.json`): its Slurm job
id (or, outside Slurm, its host, process id and process start time), its command, and, once it ends, its exit
status.

An attempt that finds the claim held by another Slurm job that is still queued or running (squeue, then sacct),
or by another live process of this host, waits for it to end. Then:
- the holder ran the same command, finished with exit status 0, and every output of the job exists: the attempt
  adopts those outputs and runs nothing;
- otherwise (it failed, was cancelled, or ran another command) the attempt runs its command, which resumes from
  whatever checkpoint the holder left.

The claim is replaced atomically, so a reader sees a whole one. It guards against the copies that a restarted
Snakemake submits while the earlier ones run, which start minutes apart; it is not a lock for copies that start
in the same instant, which one Snakemake never submits.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from calibft.core.io import atomic_path
from calibft.core.slurm_queue import job_alive

POLL_S = 30.0  # how often a waiting attempt asks whether the holder still runs


@dataclass(frozen=True)
class Writer:
    """One attempt of a job, as its claim file records it."""

    command: list[str]
    host: str
    pid: int
    process_start: str | None  # the process's start time (/proc), so that a reused process id is not taken for it
    slurm_job: str | None
    started: str
    exit_status: int | None = None  # None while it runs (or when it was killed)

    @classmethod
    def this_process(cls, command: Sequence[str]) -> Writer:
        pid = os.getpid()
        return cls(
            command=list(command),
            host=socket.gethostname(),
            pid=pid,
            process_start=process_start(pid),
            slurm_job=os.environ.get("SLURM_JOB_ID"),
            started=time.strftime("%FT%T%z"),
        )

    def describe(self) -> str:
        if self.slurm_job is not None:
            return f"Slurm job {self.slurm_job}"
        return f"process {self.pid} on {self.host}"

    def same_attempt_as(self, other: Writer) -> bool:
        """Whether `other` is this attempt, or an earlier run of the same Slurm job (requeued): not another writer."""
        if self.slurm_job is not None or other.slurm_job is not None:
            return self.slurm_job == other.slurm_job
        return (self.host, self.pid, self.process_start) == (other.host, other.pid, other.process_start)


def claim_path(log: str | os.PathLike) -> Path:
    """The claim file of the job whose log is `log`."""
    log = Path(log)
    return log.with_name(log.name + ".writer.json")


def read_claim(path: Path) -> Writer | None:
    """The writer a claim file names; None when there is none or it cannot be read (a claim is advisory)."""
    try:
        return Writer(**json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def write_claim(path: Path, writer: Writer) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(asdict(writer), indent=2) + "\n", encoding="utf-8")


def process_start(pid: int) -> str | None:
    """The start time of a process of this host in clock ticks since boot (field 22 of /proc/PID/stat); None
    where /proc does not say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # the fields after the command name, which may hold spaces


def writer_alive(writer: Writer) -> bool:
    """Whether the writer may still be writing: its Slurm job is queued or running, or, outside Slurm, its process
    runs on this host. A writer on another host without a Slurm job cannot be asked, and is taken as ended."""
    if writer.exit_status is not None:
        return False
    if writer.slurm_job is not None:
        return job_alive(writer.slurm_job)
    if writer.host != socket.gethostname():
        return False
    try:
        os.kill(writer.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, as another user's process
    return writer.process_start is None or process_start(writer.pid) == writer.process_start


def wait_for_other_writer(
    claim: Path, me: Writer, say: Callable[[str], None], poll_s: float | None = None
) -> Writer | None:
    """Wait while another live writer holds `claim`; returns that writer as it ended (its claim read again), or
    None when no other live writer held it. `say` is told when and on whom the wait starts."""
    poll_s = POLL_S if poll_s is None else poll_s
    holder = read_claim(claim)
    if holder is None or holder.same_attempt_as(me) or not writer_alive(holder):
        return None
    say(
        f"{holder.describe()} still runs this job (its claim {claim}, since {holder.started}): waiting for it to "
        f"end before writing anything, and checking every {poll_s:g} s"
    )
    while writer_alive(holder):
        time.sleep(poll_s)
        holder = read_claim(claim) or holder
    return holder


def adoptable(holder: Writer | None, me: Writer, outputs: Sequence[str | os.PathLike]) -> bool:
    """Whether the attempt may take the outputs of the writer it waited for instead of running: that writer ran
    the same command, finished with exit status 0, and every output exists."""
    return (
        holder is not None
        and holder.exit_status == 0
        and holder.command == me.command
        and all(Path(path).exists() for path in outputs)
    )
