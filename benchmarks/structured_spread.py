"""A profile's structured outcomes over seeds, CPU feature sets and training step caps.

    python benchmarks/structured_spread.py demo [--seeds 11 12 13] [--feature-sets native avx2] [--every-table]
    python benchmarks/structured_spread.py mini --seeds 11 12 13 --feature-sets native
    python benchmarks/structured_spread.py mini --seeds 11 --feature-sets native --max-steps 30 60 120

For each feature set, seed and step cap, runs the profile (`snakemake --profile profiles/PROFILE`) in its own
scratch folder up to the structured evaluation of every model of the profile's config, base and both
adapters, on every split of `evaluation.structured.splits`, with the tables of those runs, of the SSOT
baseline and of the ablations; with --every-table, also every other evaluation and every results table (a
recorded reference's tolerances come from these tables, docs/reproduction.md). The
seed is the config's one `seeds` entry and, for a model that the workflow initializes (one listed under `tiny_models`),
that model's seed; a step cap sets `max_steps` of every recipe (without --max-steps, the config's own caps).
`native` runs with the CPU's own kernels; `avx2` emulates a CPU without AVX-512 (calibft.core.cpu.AVX2_FEATURE_SET).
A folder whose results are complete is only checked by Snakemake, so a sweep can be extended run by run.

Prints one JSON line: every run's figures, their ranges over the runs, and for each outcome that the demo's
tests assert (tests/workflow/test_demo.py) the minimum, maximum, mean and standard deviation of its figures, pooled
over the models and the soft and hard recipes. With --markdown FILE, also writes the tables of docs/mini.md: per step
cap, mean and standard deviation over the runs of each model's figures, and normalized W1 over the families
where the base and both adapters have a valid answer.
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

from calibft.artifacts.registry import where  # noqa: E402
from calibft.core.cpu import AVX2_FEATURE_SET  # noqa: E402
from calibft.pipeline.config import read_config  # noqa: E402

FEATURE_SETS = {"native": {}, "avx2": AVX2_FEATURE_SET}
RECIPES = ("soft", "hard")
CONDITIONS = ("base", *RECIPES)
METRICS = ("valid_rate", "logit_kl", "w1_norm")
# the figures behind each outcome a demo test asserts (or does not), by key suffix, pooled over models and recipes
CLAIMS = {
    "soft-target KL on unseen parameters, after / before training": "probe_kl_ratio",
    "logit KL on unseen parameters, tuned / base": "unseen/logit_kl_ratio",
    "logit KL on held-out families, tuned / base": "ood/logit_kl_ratio",
    "valid rate of the tuned models": "valid_rate",
    "normalized W1 on unseen parameters, tuned / base": "unseen/w1_norm_ratio",
}


def profile_config(profile: str) -> dict:
    """The config that `snakemake --profile profiles/PROFILE` runs with, over its base (a whole configuration)."""
    settings = yaml.safe_load((REPO / "profiles" / profile / "config.yaml").read_text())
    config = read_config(REPO / settings["configfile"])
    config.pop("base", None)  # applied: the file this writes stands alone
    return config


def run_config(config: dict, seed: int, max_steps: int | None) -> dict:
    """`config` with its one seed (and its initialized models' seeds) set to `seed`, and every recipe's step cap."""
    config = json.loads(json.dumps(config))  # a deep copy
    config["seeds"] = [seed]
    for name in config["models"]:
        if name in config.get("tiny_models", {}):
            config["tiny_models"][name]["seed"] = seed
    if max_steps is not None:
        for recipe in config["recipes"].values():
            recipe["max_steps"] = max_steps
    return config


def metrics_path(workdir: Path, model: str, cond: str, split: str) -> Path:
    return workdir / "results" / "eval" / model / cond / "structured" / split / "metrics.json"


def run_profile(
    profile: str, workdir: Path, config: dict, environment: dict[str, str], every_table: bool = False
) -> float:
    """Runs the profile up to the structured metrics and their tables in `workdir` (with `every_table`, up to every
    results table but the qualitative ones); returns the wall time in seconds."""
    workdir.mkdir(parents=True, exist_ok=True)
    configfile = workdir / "run_config.yaml"
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    splits = config["evaluation"]["structured"]["splits"]
    targets = [str(metrics_path(Path(), m, c, s)) for m in config["models"] for c in CONDITIONS for s in splits]
    structured = {"structured", "ssot", "ablation"}
    tables = [
        row
        for row in where(kind="table")
        if ((every_table and not row.chosen) or set(row.reads) <= structured) and row.split in (None, *splits)
    ]
    targets += [f"results/{row.files()[1]}" for row in tables]
    command = [sys.executable, "-m", "snakemake", "--profile", str(REPO / "profiles" / profile)]
    command += ["--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir)]
    command += ["--configfile", str(configfile), "--", *targets]
    start = time.perf_counter()
    with open(workdir / "snakemake.log", "w") as log:
        subprocess.run(command, cwd=REPO, env={**os.environ, **environment}, stdout=log, stderr=log, check=True)
    return time.perf_counter() - start


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def outcomes(workdir: Path, config: dict) -> dict[str, float | int | None]:
    """The figures of one run, read from its files, keyed `model/...`."""
    figures: dict[str, float | int | None] = {}
    for model in config["models"]:
        for recipe in RECIPES:
            run = json.loads((workdir / "results" / "adapters" / model / recipe / "run.json").read_text())
            figures[f"{model}/{recipe}/probe_kl_ratio"] = run["unseen_soft_kl_after"] / run["unseen_soft_kl_before"]
            figures[f"{model}/{recipe}/train_s"] = round(run["wall_time_s"])
        for split in config["evaluation"]["structured"]["splits"]:
            results = {cond: json.loads(metrics_path(workdir, model, cond, split).read_text()) for cond in CONDITIONS}
            for cond, result in results.items():
                for metric in METRICS:
                    figures[f"{model}/{cond}/{split}/{metric}"] = result["aggregate"][metric]
            for recipe in RECIPES:
                for metric in ("w1_norm", "logit_kl"):
                    tuned, base = results[recipe]["aggregate"][metric], results["base"]["aggregate"][metric]
                    ratio = None if tuned is None or base is None else tuned / base
                    figures[f"{model}/{recipe}/{split}/{metric}_ratio"] = ratio
            # normalized W1 over the families where the base and both adapters have a valid answer
            w1 = {cond: {f["family"]: f["w1_norm"] for f in result["families"]} for cond, result in results.items()}
            compared = [family for family in w1["base"] if all(w1[cond][family] is not None for cond in CONDITIONS)]
            figures[f"{model}/{split}/base_w1_undefined_families"] = sum(v is None for v in w1["base"].values())
            figures[f"{model}/{split}/w1_compared_families"] = len(compared)
            for cond in CONDITIONS:
                figures[f"{model}/{cond}/{split}/w1_norm_compared"] = median([w1[cond][f] for f in compared])
    return figures


def spread(runs: list[dict]) -> dict[str, list[float]]:
    """The range of every figure over the runs, where defined."""
    ranges = {}
    for key in runs[0]["figures"]:
        values = [run["figures"][key] for run in runs if run["figures"][key] is not None]
        if values:
            ranges[key] = [min(values), max(values)]
    return ranges


def claims(runs: list[dict]) -> dict[str, dict[str, float | None]]:
    """The statistics of each demo claim's figures, pooled over runs, models and recipes."""
    pooled = {}
    for claim, suffix in CLAIMS.items():
        values = [
            value
            for run in runs
            for key, value in run["figures"].items()
            if value is not None and key.endswith(suffix) and key.split("/")[1] in RECIPES
        ]
        if not values:  # e.g. a W1 ratio where the base's W1 is undefined in every run
            pooled[claim] = {"min": None, "max": None, "mean": None, "sd": None}
            continue
        pooled[claim] = {"min": min(values), "max": max(values), "mean": statistics.mean(values)}
        pooled[claim]["sd"] = statistics.stdev(values) if len(values) > 1 else None
    return pooled


def mean_sd(values: list[float | None], digits: int, scale: float = 1.0, unit: str = "") -> str:
    """`mean ± sd` of the values; `---` where one is undefined, with how many runs define it."""
    defined = [scale * v for v in values if v is not None]
    if len(defined) < len(values):
        return "---" if not defined else f"--- ({len(defined)} of {len(values)} runs defined)"
    if len(defined) == 1:
        return f"{defined[0]:.{digits}f}{unit}"
    return f"{statistics.mean(defined):.{digits}f} ± {statistics.stdev(defined):.{digits}f}{unit}"


def markdown(runs: list[dict], config: dict) -> str:
    """The tables of docs/mini.md: per step cap, each model's figures over the runs of that cap."""
    splits = config["evaluation"]["structured"]["splits"]
    lines = []
    for max_steps in dict.fromkeys(run["max_steps"] for run in runs):  # the caps in their order
        group = [run["figures"] for run in runs if run["max_steps"] == max_steps]
        seeds = ", ".join(f"{run['seed']} ({run['feature_set']})" for run in runs if run["max_steps"] == max_steps)
        cap = "the config's step caps" if max_steps is None else f"max_steps {max_steps}"
        lines += [f"{cap}; seeds {seeds}", ""]
        header = [f"{label}, {split}" for label in ("Valid rate", "Logit KL", "Normalized W1") for split in splits]
        lines += ["| Model | Condition | " + " | ".join(header) + " |", "|---|---|" + "---:|" * len(header)]
        for model, spec in config["models"].items():
            for cond in CONDITIONS:
                cells = [
                    mean_sd([f[f"{model}/{cond}/{split}/{metric}"] for f in group], *style)
                    for metric, style in (("valid_rate", (1, 100, "%")), ("logit_kl", (2,)), ("w1_norm", (2,)))
                    for split in splits
                ]
                lines.append(f"| {spec['display']} | {cond} | " + " | ".join(cells) + " |")
        columns = ["Families where the base's W1 is undefined", "Families compared", "Base", "Soft", "Hard"]
        lines += ["", "| Model | Split | " + " | ".join(columns) + " |", "|---|---|" + "---:|" * len(columns)]
        for model, spec in config["models"].items():
            for split in splits:
                undefined = ", ".join(str(f[f"{model}/{split}/base_w1_undefined_families"]) for f in group)
                compared = ", ".join(str(f[f"{model}/{split}/w1_compared_families"]) for f in group)
                cells = [
                    mean_sd([f[f"{model}/{cond}/{split}/w1_norm_compared"] for f in group], 2) for cond in CONDITIONS
                ]
                lines.append(f"| {spec['display']} | {split} | {undefined} | {compared} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", help="a folder under profiles/, e.g. demo or mini")
    parser.add_argument("--seeds", type=int, nargs="+", default=[11, 12, 13])
    parser.add_argument("--feature-sets", nargs="+", choices=list(FEATURE_SETS), default=list(FEATURE_SETS))
    parser.add_argument("--max-steps", type=int, nargs="+", help="step caps of every recipe (default: the config's)")
    parser.add_argument("--workdir", type=Path, help="default: benchmarks/results/structured_spread/PROFILE")
    parser.add_argument("--every-table", action="store_true", help="run every evaluation and results table")
    parser.add_argument("--markdown", type=Path, help="also write the tables of docs/mini.md to this file")
    args = parser.parse_args()
    config = profile_config(args.profile)
    workdir = args.workdir or REPO / "benchmarks" / "results" / "structured_spread" / args.profile
    runs = []
    for max_steps in args.max_steps or [None]:
        for feature_set in args.feature_sets:
            for seed in args.seeds:
                settings = run_config(config, seed, max_steps)
                folder = workdir / f"{feature_set}-seed{seed}-steps{max_steps or 'config'}"
                seconds = run_profile(args.profile, folder, settings, FEATURE_SETS[feature_set], args.every_table)
                run = {"feature_set": feature_set, "seed": seed, "max_steps": max_steps, "seconds": round(seconds)}
                runs.append({**run, "figures": outcomes(folder, settings)})
                print(json.dumps(runs[-1]), file=sys.stderr)
    if args.markdown:
        args.markdown.write_text(markdown(runs, config))
    print(json.dumps({"runs": runs, "spread": spread(runs), "claims": claims(runs)}))


if __name__ == "__main__":
    main()
