"""What a run asks of a cluster, read from its plan: the jobs of `snakemake --dry-run` and the GPU-hours that
their resources request.

    snakemake -n --profile profiles/slurm all | calibft gpu-hours

A job's GPU-hours are its `gpu` times its `runtime` (the wall-time limit it asks for, in minutes): what the
scheduler reserves, an upper bound on what the run is billed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from calibft.core.repository import REPOSITORY

_JOB = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")
_FIELD = re.compile(r"^\s+(resources|wildcards): (.*)$")


@dataclass(frozen=True)
class PlannedJob:
    rule: str
    resources: dict[str, str]  # as Snakemake prints them, e.g. {"gpu": "4", "runtime": "360"}
    wildcards: dict[str, str] = field(default_factory=dict)

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
    """The jobs of a dry run's output (its lines), each with its resources and wildcards."""
    jobs: list[PlannedJob] = []
    for line in dry_run:
        line = line.rstrip("\n")
        if match := _JOB.match(line):
            jobs.append(PlannedJob(match.group(1), {}))
        elif jobs and (match := _FIELD.match(line)):
            name, value = match.groups()
            pairs = (item.split("=", 1) for item in value.split(", ") if "=" in item)
            getattr(jobs[-1], name).update({key: value for key, value in pairs})
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


def local_rules(workflow_dir: str | Path = REPOSITORY) -> set[str]:
    """The workflow's rules (and checkpoints) declared `localrule: True`: those that run in Snakemake's own process
    on a cluster, never through the scheduler."""
    sources = [Path(workflow_dir) / "Snakefile", *sorted((Path(workflow_dir) / "rules").glob("*.smk"))]
    text = "\n".join(path.read_text() for path in sources)
    blocks = re.split(r"^(?=(?:rule|checkpoint) \w+:)", text, flags=re.MULTILINE)
    rules = (block for block in blocks if block.startswith(("rule ", "checkpoint ")))
    return {re.match(r"\w+ (\w+):", block)[1] for block in rules if "localrule: True" in block}
