"""What a run asks of a cluster, read from its plan: the jobs of `snakemake --dry-run` and the GPU-hours that
their resources request.

    snakemake -n --profile profiles/slurm all | calibft gpu-hours

A job's GPU-hours are its `gpu` times its `runtime` (the wall-time limit it asks for, in minutes): what the
scheduler reserves, an upper bound on what the run is billed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_JOB = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")
_RESOURCES = re.compile(r"^\s+resources: (.*)$")


@dataclass(frozen=True)
class PlannedJob:
    rule: str
    resources: dict[str, str]  # as Snakemake prints them, e.g. {"gpu": "4", "runtime": "360"}

    @property
    def gpus(self) -> int:
        return int(self.resources.get("gpu") or 0)

    @property
    def gpu_hours(self) -> float:
        """GPUs times the requested runtime; a GPU job without a runtime is an error, not zero."""
        if not self.gpus:
            return 0.0
        if "runtime" not in self.resources:
            raise ValueError(f"a {self.rule} job asks for {self.gpus} GPU(s) but no runtime")
        return self.gpus * int(self.resources["runtime"]) / 60


def planned_jobs(dry_run: Iterable[str]) -> list[PlannedJob]:
    """The jobs of a dry run's output (its lines), each with its resources."""
    jobs: list[PlannedJob] = []
    for line in dry_run:
        line = line.rstrip("\n")
        if match := _JOB.match(line):
            jobs.append(PlannedJob(match.group(1), {}))
        elif jobs and (match := _RESOURCES.match(line)):
            pairs = (item.split("=", 1) for item in match.group(1).split(", ") if "=" in item)
            jobs[-1].resources.update({key: value for key, value in pairs})
    if not jobs:
        raise ValueError("no job in the input: pipe the output of `snakemake --dry-run` (nothing to do?)")
    return jobs


def gpu_hours_by_rule(jobs: Sequence[PlannedJob]) -> list[dict]:
    """Per rule that asks for GPUs: its jobs, their GPUs and GPU-hours, in order of first appearance."""
    rows: dict[str, dict] = {}
    for job in jobs:
        if job.gpus:
            row = rows.setdefault(job.rule, {"rule": job.rule, "jobs": 0, "gpus": 0, "gpu_hours": 0.0})
            row["jobs"] += 1
            row["gpus"] += job.gpus
            row["gpu_hours"] += job.gpu_hours
    return list(rows.values())
