"""The demo's structured outcomes over seeds and CPU feature sets: the spread that the demo's tests must hold in.

    python benchmarks/demo_spread.py [--seeds 11 12 13] [--feature-sets native avx2] [--configfile FILE]

For each seed and feature set, runs the demo profile (`snakemake --profile profiles/demo`) in a scratch
folder up to the structured evaluation of the base model and both adapters, with the demo config's `seed`
and the tiny model's seed both set to the seed. `native` runs with the CPU's own kernels; `avx2` emulates
a CPU without AVX-512 (calibft.cpu.AVX2_FEATURE_SET). Prints one JSON line: every run's figures, their
ranges over the runs, and for each outcome that the demo's tests assert (tests/test_workflow.py) the minimum,
maximum, mean and standard deviation of its figures, pooled over the soft and hard recipes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from calibft.cpu import AVX2_FEATURE_SET  # noqa: E402

FEATURE_SETS = {"native": {}, "avx2": AVX2_FEATURE_SET}
CONDITIONS = ("base", "soft", "hard")
SPLITS = ("unseen", "ood")
RECIPES = ("soft", "hard")
# the figures behind each outcome a demo test asserts (or does not), pooled over the recipes
CLAIMS = {
    "soft-target KL on unseen parameters, after / before training": [f"{r}/probe_kl_ratio" for r in RECIPES],
    "logit KL on unseen parameters, tuned / base": [f"{r}/unseen/logit_kl_ratio" for r in RECIPES],
    "logit KL on held-out families, tuned / base": [f"{r}/ood/logit_kl_ratio" for r in RECIPES],
    "valid rate of the tuned models": [f"{r}/{split}/valid_rate" for r in RECIPES for split in SPLITS],
    "normalized W1 on unseen parameters, tuned / base": [f"{r}/unseen/w1_norm_ratio" for r in RECIPES],
}


def demo_config(path: Path, seed: int) -> dict:
    """The demo config at `path` with its seed and the tiny model's seed set to `seed`."""
    config = yaml.safe_load(path.read_text())
    config["seed"] = seed
    config["tiny_models"]["tiny"]["seed"] = seed
    return config


def run_demo(workdir: Path, config: dict, environment: dict[str, str]) -> float:
    """Runs the demo up to the structured metrics in `workdir`; returns the wall time in seconds."""
    workdir.mkdir(parents=True, exist_ok=True)
    configfile = workdir / "demo.yaml"
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    targets = [f"results/eval/tiny/{cond}/structured/{split}/metrics.json" for cond in CONDITIONS for split in SPLITS]
    command = [sys.executable, "-m", "snakemake", "--profile", str(REPO / "profiles" / "demo")]
    command += ["--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir)]
    command += ["--configfile", str(configfile), "--", *targets]
    start = time.perf_counter()
    with open(workdir / "snakemake.log", "w") as log:
        subprocess.run(command, cwd=REPO, env={**os.environ, **environment}, stdout=log, stderr=log, check=True)
    return time.perf_counter() - start


def outcomes(workdir: Path) -> dict[str, float]:
    """The figures the demo's tests assert, read from the run's files."""
    figures = {}
    for recipe in RECIPES:
        run = json.loads((workdir / "results" / "adapters" / "tiny" / recipe / "run.json").read_text())
        figures[f"{recipe}/probe_kl_ratio"] = run["unseen_soft_kl_after"] / run["unseen_soft_kl_before"]
    for split in SPLITS:
        aggregate = {
            cond: json.loads(
                (workdir / "results" / "eval" / "tiny" / cond / "structured" / split / "metrics.json").read_text()
            )["aggregate"]
            for cond in CONDITIONS
        }
        for cond in CONDITIONS:
            for metric in ("w1_norm", "logit_kl", "valid_rate"):
                figures[f"{cond}/{split}/{metric}"] = aggregate[cond][metric]
        for recipe in RECIPES:
            for metric in ("w1_norm", "logit_kl"):
                tuned, base = aggregate[recipe][metric], aggregate["base"][metric]
                ratio = None if tuned is None or base is None else tuned / base
                figures[f"{recipe}/{split}/{metric}_ratio"] = ratio
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[11, 12, 13])
    parser.add_argument("--feature-sets", nargs="+", choices=list(FEATURE_SETS), default=list(FEATURE_SETS))
    parser.add_argument("--configfile", type=Path, default=REPO / "profiles" / "demo" / "demo.yaml")
    parser.add_argument("--workdir", type=Path, default=REPO / "benchmarks" / "results" / "demo_spread")
    args = parser.parse_args()
    runs = []
    for feature_set in args.feature_sets:
        for seed in args.seeds:
            workdir = args.workdir / f"{feature_set}-seed{seed}"
            seconds = run_demo(workdir, demo_config(args.configfile, seed), FEATURE_SETS[feature_set])
            runs.append({"feature_set": feature_set, "seed": seed, "seconds": round(seconds), **outcomes(workdir)})
            print(json.dumps(runs[-1]), file=sys.stderr)
    spread = {}
    for key in runs[0]:
        values = [run[key] for run in runs if isinstance(run[key], float)]  # the figures, where defined
        if values:
            spread[key] = [min(values), max(values)]
    claims = {}
    for claim, keys in CLAIMS.items():
        values = [run[key] for run in runs for key in keys if run[key] is not None]
        claims[claim] = {"min": min(values), "max": max(values), "mean": statistics.mean(values)}
        claims[claim]["sd"] = statistics.stdev(values) if len(values) > 1 else None
    print(json.dumps({"runs": runs, "spread": spread, "claims": claims}))


if __name__ == "__main__":
    main()
