"""`calibft preflight` on a Slurm cluster: whether the jobs of a plan can run where the profile sends them.

From the plan's jobs (their resources as the dry run resolves them: `slurm_partition`, `slurm_account`, `gpu`,
`gpu_model`, `gres`, `constraint`, `mem_mb`, `runtime`) and what Slurm says of its partitions and nodes
(`scontrol show partition|node --oneliner`), one check per question a cluster user would otherwise learn the
answer to from a failed job:
- sacct works (the executor plugin reads every job's state from it);
- each partition exists and is up, and Slurm accepts its account (`sbatch --test-only`, which asks the
  controller itself, so associations, AllowAccounts and QOS limits all count);
- each rule's jobs fit the partition: a node with the GPUs of the type asked for (and the node feature of a
  `constraint`), memory within that node's, runtime within the partition's time limit.
A rule's jobs are taken together per partition, account and GPU request, at their largest.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from calibft.pipeline.plan import PlannedJob
from calibft.pipeline.preflight_checks import OK, WILL_FAIL, Check

_PAIR = re.compile(r"(\w+)=(\S*)")
_UNLIMITED = {"UNLIMITED", "INFINITE", "NONE", "N/A"}


def slurm_minutes(limit: str) -> int | None:
    """A Slurm time (`days-hours:minutes:seconds`, `hours:minutes:seconds`, `minutes:seconds`, `minutes`) in whole
    minutes, rounded up; None for no limit."""
    if limit.upper() in _UNLIMITED:
        return None
    days, _, clock = limit.rpartition("-")
    parts = [int(part) for part in clock.split(":")]
    if days:  # days-hours[:minutes[:seconds]]
        hours, minutes, seconds = [*parts, 0, 0][:3]
    elif len(parts) == 3:
        hours, minutes, seconds = parts
    elif len(parts) == 2:
        hours, minutes, seconds = 0, *parts
    else:
        hours, minutes, seconds = 0, parts[0], 0
    return (int(days or 0) * 24 + hours) * 60 + minutes + (seconds > 0)


def gpu_counts(gres: str) -> dict[str, int]:
    """{GPU type: count} of a node's or a request's GRES (`gpu:a100:4(S:0-1),gpu:v100:2`); type "" where none is
    named."""
    counts: dict[str, int] = {}
    for item in gres.split(","):
        fields = item.split("(")[0].split(":")
        if fields[0] != "gpu":
            continue
        kind, count = (fields[1], fields[2]) if len(fields) >= 3 else ("", fields[1] if len(fields) == 2 else "1")
        counts[kind] = counts.get(kind, 0) + int(count)
    return counts


@dataclass(frozen=True)
class Node:
    name: str
    gpus: dict[str, int]  # {type: count}
    memory_mb: int
    features: frozenset[str]


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: tuple[str, ...]
    max_minutes: int | None
    up: bool
    default: bool


@dataclass(frozen=True)
class Request:
    """What a rule's jobs ask of Slurm, at their largest, for one partition, account and GPU type."""

    rule: str
    jobs: int
    partition: str | None
    account: str | None
    gpus: int
    gpu_model: str  # "" for any type
    constraint: str | None
    mem_mb: int
    runtime: int  # minutes

    def describe(self) -> str:
        gpus = f"{self.gpus} x {self.gpu_model or 'any'} GPU, " if self.gpus else ""
        memory = f"{self.mem_mb} MB" if self.mem_mb else "memory set when its input exists"
        return f"{gpus}{memory}, {self.runtime} min"


def requests(jobs: Sequence[PlannedJob], local: set[str]) -> list[Request]:
    """The requests of the jobs that go to Slurm (every rule but the `local` ones), in order of first appearance."""
    merged: dict[tuple, Request] = {}
    for job in jobs:
        if job.rule in local:
            continue
        res = job.resources
        gpus, gpu_model = int(res.get("gpu") or 0), res.get("gpu_model") or ""
        if res.get("gres"):  # GRES asked for instead of --gpus
            ((gpu_model, gpus),) = gpu_counts(res["gres"]).items() or [("", 0)]
        key = (job.rule, res.get("slurm_partition"), res.get("slurm_account"), gpu_model, res.get("constraint"))
        mem_mb, runtime = _known(res.get("mem_mb")), _known(res.get("runtime"))
        if key in merged:
            old = merged[key]
            merged[key] = Request(
                old.rule, old.jobs + 1, old.partition, old.account, max(old.gpus, gpus), gpu_model, old.constraint,
                max(old.mem_mb, mem_mb), max(old.runtime, runtime),
            )  # fmt: skip
        else:
            merged[key] = Request(job.rule, 1, key[1], key[2], gpus, gpu_model, key[4], mem_mb, runtime)
    return list(merged.values())


def _known(value: str | None) -> int:
    """A resource as a number; 0 where the dry run cannot know it yet (`<TBD>`: a trie job's memory depends on
    the size of its input, made by an earlier job)."""
    return int(value) if value and value.isdigit() else 0


def _slurm(*command: str) -> str:
    """A Slurm command's standard output; RuntimeError with its message when it fails."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise RuntimeError(f"`{' '.join(command)}` could not run: {err}") from err
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` failed: {done.stderr.strip() or done.returncode}")
    return done.stdout


def _records(*command: str) -> list[dict[str, str]]:
    """The `key=value` records of an `scontrol show ... --oneliner` listing, one per line."""
    return [dict(_PAIR.findall(line)) for line in _slurm(*command).splitlines() if line.strip()]


def cluster_state() -> tuple[dict[str, Partition], dict[str, Node]]:
    """Every partition and node that Slurm lists."""
    partitions = {}
    for p in _records("scontrol", "show", "partition", "--oneliner"):
        hosts = p.get("Nodes", "")
        names = _slurm("scontrol", "show", "hostnames", hosts).split() if hosts not in ("", "(null)") else []
        partitions[p["PartitionName"]] = Partition(
            name=p["PartitionName"],
            nodes=tuple(names),
            max_minutes=slurm_minutes(p.get("MaxTime", "UNLIMITED")),
            up=p.get("State") == "UP",
            default=p.get("Default") == "YES",
        )
    nodes = {
        n["NodeName"]: Node(
            name=n["NodeName"],
            gpus=gpu_counts(n.get("Gres", "")),
            memory_mb=int(n.get("RealMemory") or 0),
            features=frozenset(filter(None, n.get("AvailableFeatures", "").split(","))),
        )
        for n in _records("scontrol", "show", "node", "--oneliner")
    }
    return partitions, nodes


def sacct_check() -> Check:
    subject = "slurm sacct"
    try:
        _slurm("sacct", "--noheader", "-X", "--starttime", "now-1hour", "--format=JobIdRaw")
    except RuntimeError as err:
        return Check(
            WILL_FAIL, subject, f"{err}: the executor plugin reads the state of every job from sacct",
            "ask the cluster's administrators for job accounting (slurmdbd) on this cluster, or run the workflow "
            "where sacct works",
        )  # fmt: skip
    return Check(OK, subject, "job accounting answers (the executor reads job states from it)")


def accepts(partition: str, account: str | None) -> str | None:
    """None when Slurm would accept a job of `account` in `partition` (`sbatch --test-only`), else its message."""
    command = ["sbatch", "--test-only", f"--partition={partition}", "--time=1", "--mem=1", "--output=/dev/null"]
    command += [f"--account={account}"] if account else []
    try:
        done = subprocess.run([*command, "--wrap=true"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)
    return None if done.returncode == 0 else done.stderr.strip().removeprefix("sbatch: error: ")


def request_checks(request: Request, partition: Partition, nodes: dict[str, Node]) -> list[Check]:
    """Whether a request fits its partition: the GPUs (and feature), the memory, the time limit."""
    subject = f"slurm rule {request.rule} ({request.jobs} job{'s' * (request.jobs > 1)}) in partition {partition.name}"
    where = f"`set-resources` in the profile, e.g. `{request.rule}: {{slurm_partition: NAME}}`"
    members = [nodes[name] for name in partition.nodes if name in nodes]
    checks = []
    if request.constraint:
        members = [node for node in members if request.constraint in node.features]
    if request.gpus:
        fitting = [
            node for node in members
            if (node.gpus.get(request.gpu_model, 0) if request.gpu_model else sum(node.gpus.values())) >= request.gpus
        ]  # fmt: skip
        if not fitting:
            has = sorted({f"{count} x {kind or 'untyped'}" for node in members for kind, count in node.gpus.items()})
            checks.append(Check(
                WILL_FAIL, subject,
                f"no node has {request.gpus} GPU(s) of type {request.gpu_model or 'any'}"
                + (f" with feature {request.constraint}" if request.constraint else "")
                + f"; its nodes have {', '.join(has) or 'no GPUs'}",
                f"send the rule to a partition with such nodes, or ask for a GPU type it has (gpu_model of the "
                f"model's resources in the config, or {where})",
            ))  # fmt: skip
        members = fitting
    if members and request.mem_mb > max(node.memory_mb for node in members):
        checks.append(Check(
            WILL_FAIL, subject,
            f"its jobs ask for up to {request.mem_mb} MB; the largest node that fits them has "
            f"{max(node.memory_mb for node in members)} MB",
            f"lower mem_mb of the model's resources in the config (or {where}), or use a partition with larger nodes",
        ))  # fmt: skip
    if partition.max_minutes is not None and request.runtime > partition.max_minutes:
        checks.append(Check(
            WILL_FAIL, subject,
            f"its jobs ask for up to {request.runtime} min; the partition's time limit is {partition.max_minutes} min",
            f"use a partition with a longer limit ({where}), or lower runtime of the model's resources in the config "
            "to the limit: a training run checkpoints before its limit and its retry resumes from there",
        ))  # fmt: skip
    if not checks:
        limit = "no time limit" if partition.max_minutes is None else f"limit {partition.max_minutes} min"
        checks.append(Check(OK, subject, f"{request.describe()}: fits {members[0].name if members else '?'} ({limit})"))
    return checks


def slurm_checks(jobs: Sequence[PlannedJob], local: set[str]) -> list[Check]:
    """Every Slurm check of the plan's jobs that go to Slurm."""
    checks = [sacct_check()]
    try:
        partitions, nodes = cluster_state()
    except RuntimeError as err:
        fix = "run preflight where Snakemake runs, on a node whose Slurm commands reach the controller"
        return [*checks, Check(WILL_FAIL, "slurm controller", str(err), fix)]
    default = next((p.name for p in partitions.values() if p.default), None)
    accepted: dict[tuple[str, str | None], str | None] = {}
    for request in requests(jobs, local):
        name = request.partition or default
        subject = f"slurm rule {request.rule}"
        if name is None:
            fix = "set slurm_partition under default-resources in the profile"
            checks.append(Check(WILL_FAIL, subject, "no partition asked for, and the cluster has no default", fix))
            continue
        if name not in partitions:
            checks.append(Check(
                WILL_FAIL, subject, f"partition {name} does not exist (the cluster has {', '.join(partitions)})",
                "set slurm_partition (default-resources or set-resources in the profile) to one of those",
            ))  # fmt: skip
            continue
        partition = partitions[name]
        if not partition.up:
            fix = "wait until it is up, or use another partition"
            checks.append(Check(WILL_FAIL, f"slurm partition {name}", "it is not up", fix))
        if (name, request.account) not in accepted:
            accepted[name, request.account] = refusal = accepts(name, request.account)
            who = f"account {request.account}" if request.account else "the default account"
            if refusal is None:
                checks.append(Check(OK, f"slurm partition {name}", f"accepts jobs of {who} (sbatch --test-only)"))
            else:
                checks.append(Check(
                    WILL_FAIL, f"slurm partition {name}", f"refuses jobs of {who}: {refusal}",
                    "set slurm_account under default-resources in the profile to an account that may use it (`sacctmgr "
                    "show associations user=$USER format=account,partition` lists yours)",
                ))  # fmt: skip
        checks += request_checks(request, partition, nodes)
    return checks
