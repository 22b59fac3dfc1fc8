"""calibft.core.single_writer through `python -m calibft.core.runlog`: a second copy of a job, started while the first
still runs (a workflow restarted after its Snakemake died), waits for it, then adopts its outputs or resumes.
The cluster test (tests/workflow/test_slurm.py) does the same with Slurm jobs."""

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest

import calibft.core.single_writer as single_writer
from calibft.core import slurm_queue
from calibft.core.runlog import run_attempt
from calibft.core.single_writer import Writer, claim_path, read_claim, write_claim


@pytest.fixture(autouse=True)
def _outside_slurm(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setattr(single_writer, "POLL_S", 0.05)


def job_command(folder) -> list[str]:
    """A job that waits for `go`, then records that it ran (`runs`) and writes its output `out`."""
    script = (
        "import pathlib, sys, time\n"
        f"folder = pathlib.Path({str(folder)!r})\n"
        "while not (folder / 'go').exists(): time.sleep(0.02)\n"
        "with open(folder / 'runs', 'a') as f: f.write('ran\\n')\n"
        "(folder / 'out').write_text('written')\n"
        "sys.exit(int((folder / 'go').read_text() or 0))\n"
    )
    return [sys.executable, "-c", script]


def start_first_copy(tmp_path, log) -> subprocess.Popen:
    """The first copy of the job, as its own process, once it holds the claim."""
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    command = [sys.executable, "-m", "calibft.core.runlog", str(log), "1", "--outputs", str(tmp_path / "out"), "--"]
    first = subprocess.Popen([*command, *job_command(tmp_path)], env=env)
    deadline = time.monotonic() + 60
    while (holder := read_claim(claim_path(log))) is None or holder.pid != first.pid:
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.02)
    return first


def second_copy(tmp_path, log, command=None) -> tuple[threading.Thread, dict]:
    """The second copy, started while the first runs: its thread (it waits) and where its exit status lands."""
    result = {}
    command = command or job_command(tmp_path)
    thread = threading.Thread(target=lambda: result.update(status=run_attempt(log, 1, command, [tmp_path / "out"])))
    thread.start()
    time.sleep(0.5)
    return thread, result


def test_a_second_copy_waits_for_the_first_and_adopts_its_outputs(tmp_path):
    log = tmp_path / "logs" / "job.log"
    first = start_first_copy(tmp_path, log)
    thread, result = second_copy(tmp_path, log)
    assert thread.is_alive() and not (tmp_path / "runs").exists()  # waiting, nothing written
    (tmp_path / "go").write_text("0")
    assert first.wait(timeout=60) == 0
    thread.join(timeout=60)
    assert result == {"status": 0}
    assert (tmp_path / "runs").read_text() == "ran\n"  # one run: the first copy's
    assert read_claim(claim_path(log)).pid == first.pid and read_claim(claim_path(log)).exit_status == 0
    lines = log.read_text().splitlines()
    assert [line.split(",")[0] for line in lines if line.startswith("==")] == ["== attempt 1", "== attempt 1"]
    assert f"waited for process {first.pid} on " in lines[2] and "(with exit status 0)" in lines[2]
    assert "they are adopted, nothing runs again" in lines[3]


def test_a_second_copy_runs_the_job_itself_when_the_first_failed(tmp_path):
    log = tmp_path / "job.log"
    first = start_first_copy(tmp_path, log)
    thread, result = second_copy(tmp_path, log)
    (tmp_path / "go").write_text("3")  # the first copy fails; the second then fails alike, but it ran
    assert first.wait(timeout=60) == 3
    thread.join(timeout=60)
    assert result == {"status": 3} and (tmp_path / "runs").read_text() == "ran\nran\n"
    assert "(with exit status 3)" in log.read_text() and "adopted" not in log.read_text()
    holder = read_claim(claim_path(log))
    assert holder.pid == os.getpid() and holder.exit_status == 3


def test_a_second_copy_with_another_command_waits_then_runs_its_own(tmp_path):
    log = tmp_path / "job.log"
    first = start_first_copy(tmp_path, log)
    other = [*job_command(tmp_path)[:-1], job_command(tmp_path)[-1] + "# other settings\n"]
    thread, result = second_copy(tmp_path, log, other)
    assert thread.is_alive()
    (tmp_path / "go").write_text("0")
    first.wait(timeout=60)
    thread.join(timeout=60)
    assert result == {"status": 0} and (tmp_path / "runs").read_text() == "ran\nran\n"


def test_a_claim_of_an_ended_process_or_an_earlier_run_is_not_waited_for(tmp_path):
    log = tmp_path / "job.log"
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = replace(Writer.this_process(["x"]), pid=int(ended.stdout), process_start="1")
    (tmp_path / "go").write_text("0")
    for holder in (gone, replace(Writer.this_process(job_command(tmp_path)), pid=1, exit_status=0)):
        write_claim(claim_path(log), holder)
        assert run_attempt(log, 1, job_command(tmp_path), [tmp_path / "out"]) == 0
    assert (tmp_path / "runs").read_text() == "ran\nran\n"  # both ran at once, without adopting
    assert "waited" not in log.read_text()


def test_a_live_slurm_job_is_waited_for_until_squeue_and_sacct_say_it_ended(tmp_path, monkeypatch):
    """The holder is Slurm job 7 (alive for three polls, then its claim says it finished, which ends the wait
    without asking Slurm again); this attempt is job 8."""
    log, polls = tmp_path / "job.log", []
    command = job_command(tmp_path)
    holder = replace(Writer.this_process(command), slurm_job="7", host="node-1")

    def alive(job):
        assert job == "7"
        polls.append(job)
        if len(polls) == 3:  # job 7 writes its outputs and its exit status
            (tmp_path / "out").write_text("written")
            write_claim(claim_path(log), replace(holder, exit_status=0))
        return True

    write_claim(claim_path(log), holder)
    monkeypatch.setattr(single_writer, "job_alive", alive)
    monkeypatch.setenv("SLURM_JOB_ID", "8")
    assert run_attempt(log, 1, command, [tmp_path / "out"]) == 0
    assert not (tmp_path / "runs").exists() and len(polls) == 3
    assert "waited for Slurm job 7, which ran this job from" in log.read_text()
    # a requeue of job 7 itself is the same writer: it never waits on its own claim
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    write_claim(claim_path(log), holder)
    (tmp_path / "go").write_text("0")
    assert run_attempt(log, 1, command, [tmp_path / "out"]) == 0 and (tmp_path / "runs").exists()
    assert json.loads(claim_path(log).read_text())["slurm_job"] == "7"


@pytest.mark.parametrize(
    ("queued", "accounted", "alive"),
    [
        ({"5": "RUNNING"}, {}, True),
        ({"5": "PENDING"}, {}, True),
        ({}, {"5": "RUNNING"}, True),  # squeue lost it for a moment, sacct still has it running
        ({"5": "COMPLETED"}, {}, False),
        ({}, {"5": "CANCELLED by 0"}, False),
        ({}, {"5": "TIMEOUT"}, False),
        ({}, {}, False),  # neither knows it, or no Slurm to ask
    ],
)
def test_job_alive_reads_squeue_then_sacct(monkeypatch, queued, accounted, alive):
    monkeypatch.setattr(slurm_queue, "queue_states", lambda ids: queued)
    monkeypatch.setattr(slurm_queue, "accounting_states", lambda ids: accounted)
    assert slurm_queue.job_alive("5") is alive
