"""`calibft preflight`: what would fail on this cluster, said on the login node before any job is submitted.

    calibft preflight --profile profiles/slurm all
    calibft preflight --profile profiles/slurm results/tables/NAME.tex --configfile my_models.yaml

It reads the plan that `snakemake -n` makes of the same profile, targets and configuration files, and checks, one
line each (OK, WARNING or WILL FAIL, a failure with its fix):
- the configuration against its schema, and the plan itself (the dry run);
- every Hugging Face repository and dataset the plan downloads: reachable with the token in use (a gated one with
  the page where access is asked for), its revision resolved, the bytes it will take (from the Hub's file
  metadata, the files a load reads) against the free space where downloads land (calibft.pipeline.preflight_hub);
- with a Slurm profile (`executor: slurm`): sacct, each partition and account, and each rule's GPUs, memory and
  time limit against the partition's nodes (calibft.pipeline.preflight_slurm);
- every GPU job of the plan against its GPUs' memory, by the memory table (`calibft memory`).
Its exit status is 1 when anything will fail, else 0.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import yaml

from calibft.core.repository import REPOSITORY
from calibft.pipeline.assets import HubDataset, hub_token
from calibft.pipeline.config import (
    DEFAULT_REVISION,
    SCHEMA,
    base_of,
    check_config,
    hub_checkpoints,
    merged,
    resolved,
    snapshot_folder,
    validate_config,
)
from calibft.pipeline.layout import Layout
from calibft.pipeline.plan import PlannedJob, local_rules, planned_jobs
from calibft.pipeline.preflight_checks import OK, WARNING, WILL_FAIL, Check
from calibft.pipeline.preflight_hub import ModelDownload, hub_checks
from calibft.pipeline.preflight_slurm import slurm_checks


def workflow_config(configfiles: Sequence[str], workdir: Path) -> dict:
    """The configuration that the workflow reads with these --configfiles, in `workdir`: the files merged in order
    over config.yaml (or over the base they name), unless they are whole (`standalone: true`); then as the
    workflow resolves and validates it. Raises ValueError (or the schema's error) naming what is wrong."""
    given: dict = {}
    for path in configfiles:
        given = merged(given, yaml.safe_load(Path(path).read_text()) or {})
    if not given.get("standalone", False):
        under = base_of(given) if "base" in given else yaml.safe_load((workdir / "config.yaml").read_text())
        given = merged(under, given)
    config = resolved(given, base_of(given))
    validate_config(config, str(REPOSITORY / SCHEMA), " and ".join(configfiles) or "config.yaml")
    check_config(config)
    return config


def configuration_check(configfiles: Sequence[str], workdir: Path) -> tuple[Check, dict | None]:
    subject = f"configuration {' + '.join(configfiles) or 'config.yaml'}"
    try:
        config = workflow_config(configfiles, workdir)
    except Exception as err:  # a schema error, a missing file, a bad value: each says what is wrong
        return Check(WILL_FAIL, subject, str(err), "correct the configuration as the message says"), None
    return Check(OK, subject, f"valid ({len(config['models'])} models)"), config


def dry_run(profile: str | None, configfiles: Sequence[str], targets: Sequence[str], workdir: Path):
    """The plan's check and its jobs (None when the dry run failed)."""
    command = [sys.executable, "-m", "snakemake", "-n", *targets]
    command += ["--profile", profile] if profile else ["--cores", "1"]
    command += ["--configfile", *configfiles] if configfiles else []
    done = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=900)
    subject = f"plan snakemake -n {' '.join(targets) or '(default target)'}"
    if done.returncode != 0:
        lines = (done.stdout + done.stderr).strip().splitlines()
        fix = "correct what the dry run reports, then run preflight again"
        return Check(WILL_FAIL, subject, "the dry run failed: " + " / ".join(lines[-6:]), fix), None
    try:
        jobs = planned_jobs(done.stdout.splitlines())
    except ValueError:
        return Check(OK, subject, "nothing to do: every output is there"), []
    gpu_jobs = sum(1 for job in jobs if job.resources.get("gpu") not in (None, "0"))
    return Check(OK, subject, f"{len(jobs)} jobs, {gpu_jobs} of them on GPUs"), jobs


def downloads(config: dict, jobs: Sequence[PlannedJob]) -> tuple[list[ModelDownload], list[HubDataset]]:
    """The Hugging Face repositories and dataset splits that the plan's download rules fetch."""
    layout, revisions = Layout(config, REPOSITORY), hub_checkpoints(config)
    evaluators = config["evaluation"]["noveltybench"]["evaluators"]
    models, datasets = [], []
    for job in jobs:
        wildcards = job.wildcards
        if job.rule == "checkpoint_snapshot":
            repo = wildcards["hf_repo"]
            models.append(ModelDownload(repo, revisions[repo], snapshot_folder(repo)))
        elif job.rule == "evaluator_snapshot":
            entry = evaluators[wildcards["evaluator"]]
            folder = layout.evaluator(wildcards["evaluator"])
            models.append(ModelDownload(entry["hf_id"], entry.get("revision", DEFAULT_REVISION), folder))
        elif job.rule == "tinybenchmarks_items":
            datasets.append(HubDataset(**layout.tinybench_dataset(wildcards["tb_task"])))
        elif job.rule == "paloma_slice":
            datasets.append(HubDataset(**layout.paloma_dataset(wildcards["paloma_slice"])))
    return models, datasets


def memory_checks(config: dict, jobs: Sequence[PlannedJob]) -> list[Check]:
    """Each model with GPU jobs in the plan against its GPUs' memory, by the memory table."""
    from calibft.pipeline import memory

    planned = {job.wildcards.get("model") for job in jobs if job.resources.get("gpu") not in (None, "0")}
    on_hub = sorted(key for key in planned if key in config["models"] and "hf_id" in config["models"][key])
    checks = [
        Check(WARNING, f"memory {key}", "a local model: its memory is not estimated (calibft memory reads config.json)")
        for key in sorted(planned - set(on_hub) - {None})
    ]
    if not on_hub:
        return checks
    try:
        rows, _, left_out = memory.plan_memory(config, on_hub)
    except Exception as err:  # the estimate needs each checkpoint's config.json: recorded, cached or on the Hub
        return [*checks, Check(WARNING, "memory", f"not estimated: {err}")]
    for key, why in left_out.items():
        checks.append(Check(WARNING, f"memory {key}", f"not estimated: {why}"))
    for model in dict.fromkeys(row.model for row in rows):
        mine = [row for row in rows if row.model == model]
        for row in (row for row in mine if not row.fits):
            checks.append(Check(
                WILL_FAIL, f"memory {model} {row.job}",
                f"estimated peak {row.estimate_gb:.1f} GB of {row.requested_gb:.0f} GB per GPU on {row.gpus} GPU(s): "
                f"less than the {100 * memory.HEADROOM:.0f}% free the table keeps",
                "give the model more GPUs or larger ones (resources / eval_resources: gpus, gpu_model) or a smaller "
                "batch (see `calibft memory` and docs/cluster.md)",
            ))  # fmt: skip
        if all(row.fits for row in mine):
            tightest = min(mine, key=lambda row: row.headroom)
            checks.append(Check(
                OK, f"memory {model}",
                f"its {len(mine)} GPU job kinds fit; the tightest, {tightest.job}, peaks at {tightest.estimate_gb:.1f} "
                f"of {tightest.requested_gb:.0f} GB per GPU ({100 * tightest.headroom:.0f}% free)",
            ))  # fmt: skip
    return checks


def profile_executor(profile: str | None) -> str | None:
    if profile is None:
        return None
    path = Path(profile) / "config.yaml"
    return (yaml.safe_load(path.read_text()) or {}).get("executor") if path.is_file() else None


def preflight(
    profile: str | None, configfiles: Sequence[str], targets: Sequence[str], workdir: Path = Path(".")
) -> list[Check]:
    """Every check of the plan, in order: configuration, plan, Hugging Face and disk, Slurm, GPU memory. A check
    that needs the configuration or the plan is left out when they fail."""
    checks = []
    check, config = configuration_check(configfiles, workdir)
    checks.append(check)
    check, jobs = dry_run(profile, configfiles, targets, workdir)
    checks.append(check)
    if config is None or jobs is None:
        return checks
    models, datasets = downloads(config, jobs)
    if models or datasets:
        in_workdir = [replace(model, folder=str(workdir / model.folder)) for model in models]
        checks += hub_checks(in_workdir, datasets, workdir / "resources", hub_token())
    else:
        checks.append(Check(OK, "hub", "the plan downloads nothing from Hugging Face"))
    if profile_executor(profile) == "slurm":
        checks += slurm_checks(jobs, local_rules())
    checks += memory_checks(config, jobs)
    return checks
