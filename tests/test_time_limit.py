"""calibft.core.time_limit against a stand-in for squeue on the PATH (the cluster tests use the real one)."""

import os
from datetime import datetime

import pytest

import calibft.core.time_limit
from calibft.core.time_limit import TimeLimit, slurm_end_time


@pytest.fixture
def squeue(tmp_path, monkeypatch):
    """An `squeue` that prints what `answer` holds, and records its arguments."""
    answer, calls = tmp_path / "answer", tmp_path / "calls"
    script = tmp_path / "squeue"
    script.write_text(f'#!/bin/sh\necho "$@" >> {calls}\ncat {answer}\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return answer, calls


def test_the_end_time_is_squeues_local_time_and_none_without_a_limit(squeue):
    answer, calls = squeue
    answer.write_text("2026-11-27T10:42:28\n")
    assert slurm_end_time("17") == datetime(2026, 11, 27, 10, 42, 28).timestamp()
    assert calls.read_text() == "--noheader --jobs 17 --format=%e\n"
    for none in ("N/A\n", "NONE\n", "Unknown\n", ""):
        answer.write_text(none)
        assert slurm_end_time("17") is None


def test_the_limit_is_reached_within_the_margin_and_rechecked_every_30_s(squeue, monkeypatch):
    answer, calls = squeue
    now = [1_000_000.0]
    monkeypatch.setattr(calibft.core.time_limit.time, "time", lambda: now[0])
    answer.write_text(datetime.fromtimestamp(now[0] + 15 * 60).isoformat(timespec="seconds") + "\n")
    limit = TimeLimit(margin_s=10 * 60, job_id="17")
    assert not limit.reached()  # 15 minutes left
    now[0] += 4 * 60
    assert not limit.reached()
    now[0] += 61
    assert limit.reached()  # 9 min 59 s left
    assert len(calls.read_text().splitlines()) == 3  # at the start, then after 30 s or more each time

    answer.write_text(datetime.fromtimestamp(now[0] + 60 * 60).isoformat(timespec="seconds") + "\n")  # extended
    assert limit.reached()  # within 30 s of the last look
    now[0] += 30
    assert not limit.reached()


def test_outside_slurm_there_is_no_limit(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert TimeLimit.of_this_job(10).job_id is None and not TimeLimit.of_this_job(10).reached()
