"""Reading a dry run's jobs and the GPU-hours their resources request (calibft.pipeline.plan, `calibft gpu-hours`)."""

import io
import json

import pytest

from calibft import cli
from calibft.pipeline.plan import gpu_hours_by_rule, planned_jobs

# Snakemake 9's dry-run output, cut down: a local rule, two GPU jobs, a checkpoint without GPUs, a CPU job.
DRY_RUN = """\
Building DAG of jobs...
Job stats:
job      count
-----  -------
all          1
total        5

[Tue Nov 24 02:19:16 2026]
localrule prompts:
    output: results/prompts/ood.jsonl
    jobid: 3
    resources: tmpdir=/tmp

[Tue Nov 24 02:19:16 2026]
rule train:
    input: results/tries/qwen3/soft/train.npz
    wildcards: model=qwen3_14b, recipe=soft
    resources: tmpdir=/tmp, mem_mb=256000, mem=256 GB, disk_mb=<TBD>, runtime=360, gpu=4, gpu_model=a100
Shell command: accelerate launch -m calibft.training.train '{"recipe": {"max_steps": 2}}'

[Tue Nov 24 02:19:16 2026]
rule structured_eval:
    resources: tmpdir=/tmp, mem_mb=64000, mem=64 GB, runtime=480, gpu=2, gpu_model=a100

[Tue Nov 24 02:19:16 2026]
checkpoint noveltybench_qualitative_cases:
    resources: tmpdir=/tmp, mem_mb=4000, runtime=60

[Tue Nov 24 02:19:16 2026]
rule structured_eval:
    resources: tmpdir=/tmp, runtime=30, gpu=1, gpu_model=a100
"""


def test_every_job_and_its_own_resources_are_read():
    jobs = planned_jobs(DRY_RUN.splitlines())
    assert [job.rule for job in jobs] == [
        "prompts", "train", "structured_eval", "noveltybench_qualitative_cases", "structured_eval"
    ]  # fmt: skip
    assert [job.gpus for job in jobs] == [0, 4, 2, 0, 1]
    assert jobs[1].resources["gpu_model"] == "a100" and jobs[1].resources["mem"] == "256 GB"
    assert jobs[3].resources["runtime"] == "60"  # a checkpoint's resources stay its own


def test_gpu_hours_are_gpus_times_the_requested_runtime_per_rule():
    rows = gpu_hours_by_rule(planned_jobs(DRY_RUN.splitlines()))
    assert rows == [
        {"rule": "train", "jobs": 1, "gpus": 4, "gpu_hours": 4 * 6.0},
        {"rule": "structured_eval", "jobs": 2, "gpus": 3, "gpu_hours": 2 * 8.0 + 0.5},
    ]


def test_a_gpu_job_without_a_runtime_is_refused():
    with pytest.raises(ValueError, match="a train job asks for 1 GPU"):
        gpu_hours_by_rule(planned_jobs(["rule train:", "    resources: gpu=1"]))


def test_the_command_reads_the_plan_from_stdin(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO(DRY_RUN))
    assert cli.main(["gpu-hours"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[-1] == {"rule": "total", "jobs": 5, "gpu_jobs": 3, "gpu_hours": 40.5}


def test_an_empty_plan_says_what_to_pipe(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("Nothing to be done (all requested files are present).\n"))
    assert cli.main(["gpu-hours"]) == 2
    assert "pipe the output of `snakemake --dry-run`" in capsys.readouterr().err
