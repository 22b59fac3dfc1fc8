"""`python -m calibft.core.runlog LOG ATTEMPT COMMAND...`: a job's log keeps every attempt of the job."""

import sys

from calibft.core.runlog import run_attempt


def _say(text: str, status: int = 0) -> list[str]:
    return [sys.executable, "-c", f"import sys; print({text!r}); sys.exit({status})"]


def test_the_log_keeps_every_attempt_and_a_new_run_starts_it_afresh(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    log = tmp_path / "logs" / "train.log"
    assert run_attempt(log, 1, _say("old run")) == 0
    assert run_attempt(log, 1, _say("first try", 3)) == 3  # a new run of the job: the old one is gone
    log.write_text("")  # Snakemake empties the log before each attempt
    assert run_attempt(log, 2, _say("second try")) == 0
    lines = log.read_text().splitlines()
    assert [line.split(",")[0] for line in lines if line.startswith("==")] == ["== attempt 1", "== attempt 2"]
    assert [line for line in lines if not line.startswith("==")] == ["first try", "second try"]
    assert lines[0].startswith("== attempt 1, Slurm job none, ")


def test_a_requeued_slurm_job_adds_to_its_attempt_instead_of_starting_afresh(tmp_path, monkeypatch):
    log = tmp_path / "train.log"
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    run_attempt(log, 1, _say("an earlier run"))
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    run_attempt(log, 1, _say("until preempted", 1))
    run_attempt(log, 1, _say("after the requeue"))  # the same job 42, run again by Slurm
    lines = log.read_text().splitlines()
    assert lines[0].startswith("== attempt 1, Slurm job 42, ") and "requeued" not in lines[0]
    assert lines[2].startswith("== attempt 1, Slurm job 42, requeued, ")
    assert [lines[1], lines[3]] == ["until preempted", "after the requeue"] and len(lines) == 4
