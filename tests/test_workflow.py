"""The workflow as its users meet it: dry runs, schema validation, lint, and a real demo run of the data layer."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from calibft.granularity import read_costs
from calibft.grid import prompts
from calibft.io import read_jsonl
from calibft.output_space import SpaceSet, build_output_space
from calibft.plan import gpu_hours_by_rule, planned_jobs
from calibft.trie import TrieSet

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.workflow


# Dry runs plan with --forceall: a demo already run in the checkout would otherwise leave fewer jobs to plan.
def snakemake(
    *args: str, cwd: Path = REPO, env: dict | None = None, timeout: float = 900
) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "snakemake", *args]
    environment = None if env is None else {**os.environ, **env}
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=environment)


def paper_workflow_in(workdir: Path) -> list[str]:
    """Arguments that run the paper's workflow and configuration in `workdir` (--configfile stays last: it
    takes every value that follows)."""
    return [
        "--directory",
        str(workdir),
        "--snakefile",
        str(REPO / "Snakefile"),
        "--configfile",
        str(REPO / "config.yaml"),
    ]


def job_counts(output: str) -> dict[str, int]:
    table = output.split("Job stats:")[1].split("\n\n")[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.MULTILINE)}


@pytest.fixture(scope="module")
def paper_plan() -> str:
    """The dry run of the paper's `all` on the SLURM profile."""
    result = snakemake("-n", "--forceall", "--profile", "profiles/slurm", "all")
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_parsing_the_workflow_imports_no_deep_learning_library(tmp_path):
    """A dry run, and every cluster job's parse, pays no torch import: each library raises on import here."""
    for library in ("torch", "transformers", "peft"):
        (tmp_path / f"{library}.py").write_text(f"raise ImportError('{library} is imported')\n")
    pythonpath = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    result = snakemake("-n", "--forceall", "--profile", "profiles/demo", env={"PYTHONPATH": pythonpath})
    assert result.returncode == 0, result.stderr
    assert "Job stats:" in result.stdout


def test_paper_dry_run_on_slurm_plans_every_job(paper_plan):
    counts = job_counts(paper_plan)
    # 3 prompt files, 4 output spaces, 4 tokenizers x (soft train + eval unseen + eval ood) tries,
    # 12 models x (soft, hard) adapters, 12 models x 3 conditions x 2 splits structured evaluations,
    # the ablations (7 more spaces, 2 models x 8 more soft-training tries, 2 models x 17 more recipes trained
    # and evaluated on 2 splits),
    # 12 models x 2 splits SSOT runs and the release's SSOT prompts, the open-ended prompts and 12 x 3 open-ended
    # runs, 12 x 3 MCQ runs,
    # NoveltyBench's 2 prompt files, 3 evaluators and 12 x 3 x 2 generation and scoring jobs, 5 TinyBenchmarks
    # datasets, its IRT file and 12 x 3 TinyBenchmarks runs, 7 PALOMA slices and 12 x 3 PALOMA runs, the tables
    # and figures (the nine qualitative tables are planned once the checkpoint that chooses them has run), and a
    # snapshot of each of the 12 checkpoints (the four tokenizers come from four of them)
    assert counts == {
        "checkpoint_snapshot": 12, "prompts": 3, "output_space": 11, "trie": 28, "train": 58, "structured_eval": 140,
        "ssot_eval": 24,
        "open_ended_prompts": 1, "open_ended_eval": 36, "mcq_eval": 36, "noveltybench_prompts": 2,
        "evaluator_snapshot": 3, "noveltybench_generate": 72, "noveltybench_score": 72,
        "tinybenchmarks_items": 5, "irt_params": 1, "tinybench_eval": 36, "paloma_slice": 7, "paloma_eval": 36,
        "grid_granularity": 1, "grid_granularity_table": 1, "method_figure": 1, "ablation_table": 2,
        "config_tables": 1, "training_curves": 1, "structured_table": 2, "ssot_prompts": 1, "ssot_table": 2,
        "structured_sampling_figure": 1, "per_distribution_figure": 4, "qualitative_figure": 3, "transfer_table": 3,
        "open_ended_figure": 2, "retention_table": 4, "retention_figure": 3, "noveltybench_qualitative_cases": 1,
        "all": 1, "total": 617,
    }  # fmt: skip
    assert "build_tiny_model" not in paper_plan
    blocks = paper_plan.split("\n\n")
    trains = [block for block in blocks if "\nrule train:" in block]
    assert len(trains) == 58
    for block in trains:  # each on one node with 4 A100 GPUs, launched with FSDP
        assert "gpu=4, gpu_model=a100" in block
        assert "accelerate launch --config_file" in block and "fsdp.yaml --num_processes 4" in block
    model_jobs = "structured_eval|ssot_eval|open_ended_eval|mcq_eval|noveltybench_generate|tinybench_eval|paloma_eval"
    evals = [block for block in blocks if re.search(rf"\nrule ({model_jobs}):", block)]
    assert len(evals) == 380
    for block in evals:  # one A100 each, two for the 27B model
        gpus = 2 if "gemma3_27b_it" in block else 1
        assert f"gpu={gpus}, gpu_model=a100" in block, block
    scoring = [block for block in blocks if "\nrule noveltybench_score:" in block]
    assert len(scoring) == 72 and all("gpu=1, gpu_model=a100" in block for block in scoring)


def test_smoke_budgets_plan_every_job_of_the_paper_run_with_small_budgets(paper_plan):
    """The cluster rehearsal: the paper's jobs, one for one, two optimizer steps each, 30-minute limits."""
    result = snakemake(
        "-n", "--forceall", "--profile", "profiles/slurm", "all", "--configfile", "profiles/smoke/budgets.yaml"
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert job_counts(result.stdout) == job_counts(paper_plan)
    smoke, paper = planned_jobs(result.stdout.splitlines()), planned_jobs(paper_plan.splitlines())
    gpu_jobs = [job for job in smoke if job.gpus]
    assert len(gpu_jobs) == 510 and {job.resources["runtime"] for job in gpu_jobs} == {"30"}
    trains = [block for block in result.stdout.split("\n\n") if "\nrule train:" in block]
    assert len(trains) == 58 and all('"max_steps": 2' in block for block in trains)
    smoke_hours, paper_hours = (sum(row["gpu_hours"] for row in gpu_hours_by_rule(jobs)) for jobs in (smoke, paper))
    assert 0 < smoke_hours < paper_hours / 10
    readme = " ".join((REPO / "README.md").read_text().split())  # the README quotes both figures
    assert f"request {smoke_hours:,g} GPU-hours" in readme and f"against {paper_hours:,g} for the full run" in readme


def test_the_cpu_smoke_has_the_cluster_smokes_counts():
    """profiles/smoke/smoke.yaml cuts steps and prompts as the budgets for the paper's models do."""
    budgets = yaml.safe_load((REPO / "profiles/smoke/budgets.yaml").read_text())
    smoke = yaml.safe_load((REPO / "profiles/smoke/smoke.yaml").read_text())
    paper = yaml.safe_load((REPO / "config.yaml").read_text())
    assert set(budgets["recipes"]) == set(paper["recipes"]) and set(budgets["models"]) == set(paper["models"])
    assert {r["max_steps"] for r in budgets["recipes"].values()} == {r["max_steps"] for r in smoke["recipes"].values()}
    for evaluation in ("structured", "noveltybench"):
        assert budgets["evaluation"][evaluation]["max_prompts"] == smoke["evaluation"][evaluation]["max_prompts"]
    assert budgets["grid_granularity"]["prompts"] == smoke["grid_granularity"]["prompts"]


@pytest.mark.parametrize(
    ("profile", "steps", "samples", "gpus"),
    [("mini", {"soft": 60, "hard": 60}, 100, 0), ("mini-gpu", {"soft": 747, "hard": 7952}, 1000, 1)],
)
def test_the_mini_profiles_plan_the_structured_part_for_both_real_checkpoints(profile, steps, samples, gpus):
    result = snakemake("-n", "--forceall", "--profile", f"profiles/{profile}", "structured")
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    # 2 checkpoints built from their packages, 2 tokenizers x (soft train + eval unseen + eval ood) tries,
    # 2 models x (soft, hard) adapters, 2 models x 3 conditions x 2 splits structured evaluations, and the
    # structured tables and figures; nothing of the other evaluations
    assert counts == {
        "packaged_model": 2, "prompts": 3, "output_space": 4, "trie": 6, "train": 4, "structured_eval": 12,
        "config_tables": 1, "training_curves": 1, "structured_table": 2, "structured_sampling_figure": 1,
        "per_distribution_figure": 4, "qualitative_figure": 1, "structured": 1, "total": 42,
    }  # fmt: skip
    blocks = result.stdout.split("\n\n")
    evals = [block for block in blocks if "\nrule structured_eval:" in block]
    assert all(f'"samples_per_prompt": {samples},' in block and '"prompt_ids": null' in block for block in evals)
    trains = [block for block in blocks if "\nrule train:" in block]
    for recipe, max_steps in steps.items():
        planned = [block for block in trains if f"recipe={recipe}\n" in block]
        assert len(planned) == 2 and all(f'"max_steps": {max_steps}}}' in block for block in planned)
    assert all(f"gpu={gpus}," in block for block in trains + evals)


def test_one_table_plans_only_what_it_needs():
    result = snakemake("-n", "--forceall", "--profile", "profiles/slurm", "results/tables/main_ood.tex")
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    assert counts["structured_eval"] == 36 and counts["structured_table"] == 1
    assert "ssot_eval" not in counts and "qualitative_figure" not in counts
    assert "structured/unseen" not in result.stdout


def ssot_jobs(root: str, *config: str) -> dict[str, dict]:
    """The planned SSOT jobs of GPT-OSS and Qwen3 on the ood split, by model."""
    targets = [f"{root}/eval/{model}/base/ssot/ood/metrics.json" for model in ("gpt_oss_20b", "qwen3_14b")]
    result = snakemake("-n", "-p", "--forceall", *targets, *config)
    assert result.returncode == 0, result.stderr[-2000:]
    jobs = {}
    for line in result.stdout.splitlines():
        if "calibft.evals.structured" in line:
            job = json.loads(shlex.split(line.split("calibft.evals.structured", 1)[1])[0])
            jobs[job["model_key"]] = job
    return jobs


def test_gpt_oss_takes_its_own_ssot_instruction_and_its_final_answer_whole():
    """Paper appendix E.3 (protocol as_written): GPT-OSS keeps the SSOT reasoning in its analysis channel and
    answers bare in its final one; the other models get the shared instruction and the <answer> tags."""
    jobs = ssot_jobs("results/protocols/as_written", "--config", "protocol={preset: as_written}")
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    gpt_oss, qwen = jobs["gpt_oss_20b"], jobs["qwen3_14b"]
    assert gpt_oss["system"] == config["models"]["gpt_oss_20b"]["ssot_instruction"] != qwen["system"]
    assert gpt_oss["answer_pattern"] is None and gpt_oss["chat_overrides"] == {"assistant_prefix": ""}
    assert qwen["system"] == config["evaluation"]["ssot"]["instruction"]
    assert qwen["answer_pattern"] == "<answer>(.*?)</answer>"
    assert "release_prompts" not in gpt_oss and gpt_oss["protocol"]["ssot_prompt"] == "config"


def test_under_release_ssot_reads_the_release_prompts_downloaded_by_their_rule():
    jobs = ssot_jobs("results")
    gpt_oss, qwen = jobs["gpt_oss_20b"], jobs["qwen3_14b"]
    assert gpt_oss["release_prompts"] == qwen["release_prompts"] == "resources/ssot_prompts.py"
    assert (gpt_oss["release_style"], qwen["release_style"]) == ("gpt_oss", "default")
    assert "system" not in gpt_oss and "answer_pattern" not in qwen


def test_a_trie_job_asks_for_memory_in_proportion_to_its_output_space(tmp_path):
    # the space of the 16384-bin training grid takes 463 MiB; its tries peak at 5.4 GB (measured)
    (tmp_path / "results" / "prompts").mkdir(parents=True)
    (tmp_path / "results" / "prompts" / "train.jsonl").touch()
    space = tmp_path / "results" / "output_spaces" / "eval" / "train.npz"
    space.parent.mkdir(parents=True)
    with space.open("wb") as f:  # sparse: only its size matters to the plan
        f.truncate(485722476)
    os.utime(space, (space.stat().st_mtime + 10,) * 2)
    targets = ["results/tries/qwen3/eval/train.npz", "results/tries/qwen3/eval/unseen.npz"]
    result = snakemake(*targets, "-n", "--profile", "profiles/slurm", *paper_workflow_in(tmp_path))
    assert result.returncode == 0, result.stderr
    tries = {re.search(r"output: (\S+)", b)[1]: b for b in result.stdout.split("\n\n") if "\nrule trie:" in b}
    assert "mem_mb=11412," in tries["results/tries/qwen3/eval/train.npz"]  # 4000 + 16 x 463.2
    assert "mem_mb=<TBD>," in tries["results/tries/qwen3/eval/unseen.npz"]  # known once its space is built


def test_demo_dry_run_builds_the_tiny_model_and_only_its_tries():
    result = snakemake("-n", "--forceall", "--profile", "profiles/demo")
    assert result.returncode == 0, result.stderr
    assert job_counts(result.stdout) == {
        "build_tiny_model": 3, "prompts": 3, "output_space": 6, "trie": 5, "train": 5, "structured_eval": 12,
        "ssot_eval": 2, "open_ended_eval": 3, "mcq_eval": 3, "noveltybench_generate": 6, "noveltybench_score": 6,
        "synthetic_irt_params": 1, "tinybench_eval": 3, "paloma_eval": 3, "grid_granularity": 1,
        "grid_granularity_table": 1, "method_figure": 1, "ablation_table": 2, "config_tables": 1, "training_curves": 1,
        "structured_table": 2, "ssot_table": 2, "structured_sampling_figure": 1, "per_distribution_figure": 4,
        "qualitative_figure": 3, "transfer_table": 3, "open_ended_figure": 2, "retention_table": 4,
        "retention_figure": 3, "noveltybench_qualitative_cases": 1, "packaged_tokenizer": 1, "all": 1, "total": 95,
    }  # fmt: skip
    for asset in ("noveltybench_prompts", "evaluator_snapshot", "tinybenchmarks_items", "paloma_slice", "irt_params"):
        assert f"rule {asset}:" not in result.stdout, asset


def _config_with(tmp_path: Path, edit) -> Path:
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    edit(config)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda c: c["output_spaces"]["soft"].update(decimals=12), r"12 is greater than the maximum of 8"),
        (lambda c: c["evaluation"]["noveltybench"].update(max_prompts=2), r"2 is less than the minimum of 3"),
        (lambda c: c["output_spaces"]["eval"].pop("max_bins"), r"'max_bins' is a required property"),
        (lambda c: c.update(learning_rate=0.1), r"Additional properties are not allowed \('learning_rate'"),
        (lambda c: c["models"]["qwen3_4b"].update(tokenizer="qwen"), r"models\.qwen3_4b\.tokenizer is 'qwen'"),
        (lambda c: c["tries"].update(coarse=["train"]), r"tries\.coarse names no output space"),
        (lambda c: c["grid_granularity"].update(tokenizer="qwen"), r"grid_granularity\.tokenizer is 'qwen'"),
        (lambda c: c["grid_granularity"].update(decimals=[2, 9]), r"9 is greater than the maximum of 8"),
        (lambda c: c["method_figure"].update(prompt="poisson-001"), r"method_figure\.prompt 'poisson-001' is not"),
        (lambda c: c["method_figure"].update(max_bins=1001), r"1001 is greater than the maximum of 24"),
        (lambda c: c["ablations"].update(models=["qwen3_15b"]), r"ablations\.models names \['qwen3_15b'\]"),
        (lambda c: c["ablations"].update(soft=["hard"]), r"ablations\.soft names 'hard', a recipe of the other"),
        (
            lambda c: c["ablations"]["qualitative"].update(recipes=["soft_d2_b4096", "hard"]),
            r"ablations\.qualitative\.recipes names \['hard'\]",
        ),
        (
            lambda c: c["evaluation"].update(conditions=["base", "sharp"]),
            r"evaluation\.conditions names 'sharp'",
        ),
        (
            lambda c: c["evaluation"]["structured"]["qualitative"][0].update(prompt="gaussian-000"),
            r"'gaussian-000' is not an ood prompt id",
        ),
        (lambda c: c["evaluation"]["ssot"].update(answer_pattern="<answer>"), r"needs a group that captures"),
        (
            lambda c: c["models"]["gpt_oss_20b"].update(ssot_answer_pattern="final"),
            r"models\.gpt_oss_20b\.ssot_answer_pattern needs a group that captures",
        ),
        (lambda c: c["models"]["qwen3_4b"].pop("eval_resources"), r"'eval_resources' is a required property"),
        (
            lambda c: c["evaluation"]["noveltybench"].update(qualitative_models=["qwen3_15b"]),
            r"evaluation\.noveltybench\.qualitative_models names \['qwen3_15b'\]",
        ),
        (
            lambda c: c["evaluation"]["noveltybench"].update(prompts_files={"curated": "c.jsonl"}),
            r"noveltybench\.prompts_files has no file for \['wildchat'\]",
        ),
        (
            lambda c: c["evaluation"]["noveltybench"]["evaluators"].update(reward_model={"hf_id": "x/y"}),
            r"is not valid under any of the given schemas",
        ),
    ],
)
def test_malformed_config_fails_before_any_job(tmp_path, edit, message):
    bad = _config_with(tmp_path, edit)
    result = snakemake("-n", "--configfile", str(bad), "--replace-workflow-config", "all")
    assert result.returncode != 0
    assert re.search(message, result.stdout + result.stderr), result.stderr[-2000:]
    assert "Job stats" not in result.stdout


def test_tries_are_planned_for_the_tokenizers_of_their_readers(tmp_path):
    def edit(config):  # a trie that no job reads: built for every tokenizer, as asked
        config["output_spaces"]["coarse"] = {"decimals": 1, "max_bins": 11, "splits": ["unseen"]}
        config["tries"]["coarse"] = ["unseen"]

    result = snakemake("data", "-n", "--forceall", "--configfile", str(_config_with(tmp_path, edit)))
    assert result.returncode == 0, result.stderr[-2000:]
    planned = set(re.findall(r"output: (results/tries/\S+)", result.stdout))
    assert {f"results/tries/{t}/coarse/unseen.npz" for t in ("qwen3", "gemma3", "llama3", "gpt_oss")} <= planned
    # the ablation spaces' training tries only for the ablation models' tokenizers (Qwen3-14B, Gemma-3-12B-it)
    assert {p for p in planned if "/d2_b1001/" in p} == {
        "results/tries/qwen3/d2_b1001/train.npz",
        "results/tries/gemma3/d2_b1001/train.npz",
    }
    assert len(planned) == 28 + 4


def _readme_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)


def test_a_model_added_as_the_readme_shows_plans_its_training_and_evaluation(tmp_path):
    (added,) = [block for block in _readme_blocks("yaml") if block.startswith("# my_models.yaml")]
    (tmp_path / "my_models.yaml").write_text(added)
    target = "results/eval/mistral_7b/soft/structured/ood/metrics.json"
    assert target in (REPO / "README.md").read_text()
    result = snakemake(
        "-n", "--forceall", "--profile", "profiles/slurm", target, "--configfile", str(tmp_path / "my_models.yaml")
    )
    assert result.returncode == 0, result.stderr[-2000:]
    counts = job_counts(result.stdout)
    assert counts["train"] == 1 and counts["structured_eval"] == 1
    planned = set(re.findall(r"output: (results/tries/\S+)", result.stdout))
    assert "results/tries/mistral/soft/train.npz" in planned and "results/tries/mistral/eval/ood.npz" in planned
    train = next(block for block in result.stdout.split("\n\n") if "\nrule train:" in block)
    assert "model=mistral_7b" in train and "gpu=4, gpu_model=a100" in train


def test_the_paper_prompts_download_or_say_how_to_provide_them(tmp_path):
    from calibft.assets import OPEN_ENDED_PROMPTS, sha256_of

    target = f"resources/{OPEN_ENDED_PROMPTS.filename}"
    result = snakemake(target, "--cores", "1", *paper_workflow_in(tmp_path))
    if result.returncode == 0:  # a machine with network: the pinned file, verified
        assert sha256_of(tmp_path / target) == OPEN_ENDED_PROMPTS.sha256
    else:  # offline, as CI: the log says what is missing and where to put it by hand
        log = (tmp_path / "logs" / "assets" / "open_ended_prompts.log").read_text()
        assert OPEN_ENDED_PROMPTS.url in log and str(tmp_path / target) in log, log[-2000:]
        assert not (tmp_path / target).exists()


def test_the_noveltybench_prompts_download_or_say_how_to_provide_them(tmp_path):
    from calibft.assets import NOVELTYBENCH_PROMPTS

    asset = NOVELTYBENCH_PROMPTS["curated"]
    target = f"resources/{asset.filename}"
    result = snakemake(target, "--cores", "1", *paper_workflow_in(tmp_path))
    if result.returncode == 0:  # a machine with network: the pinned file, with the benchmark's 100 prompts
        asset.check(tmp_path / target)
    else:
        log = (tmp_path / "logs" / "assets" / "noveltybench_curated.log").read_text()
        assert asset.url in log and str(tmp_path / target) in log, log[-2000:]
        assert not (tmp_path / target).exists()


def test_offline_evaluators_stop_with_the_command_that_downloads_them(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "kept.json").write_text("{}")  # something computed earlier
    result = snakemake(
        "resources/hf/classifier", "--cores", "1", *paper_workflow_in(tmp_path), env={"HF_HUB_OFFLINE": "1"}
    )
    assert result.returncode != 0
    log = (tmp_path / "logs" / "assets" / "hf_classifier.log").read_text()
    command = "hf download yimingzhang/deberta-v3-large-generation-similarity --revision main"
    assert f"{command} --local-dir {tmp_path / 'resources' / 'hf' / 'classifier'}" in log, log[-2000:]
    assert not (tmp_path / "resources" / "hf" / "classifier").exists()
    assert (tmp_path / "results" / "kept.json").read_text() == "{}"


def test_no_gpu_job_names_a_hub_id(paper_plan):
    """Every training and evaluation job loads its checkpoint and tokenizer from their snapshots."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    hub_ids = {entry["hf_id"] for section in ("models", "tokenizers") for entry in config[section].values()}
    gpu_rules = ("train", "structured_eval", "ssot_eval", "open_ended_eval", "mcq_eval", "noveltybench_generate",
                 "tinybench_eval", "paloma_eval")  # fmt: skip
    jobs = [b for b in paper_plan.split("\n\n") if any(f"\nrule {rule}:" in f"\n{b}" for rule in gpu_rules)]
    assert len(jobs) > 400
    for job in jobs:
        outside_snapshots = re.sub(r"resources/hf/models/[^\s\"',]+", "", job)
        assert not [hub_id for hub_id in hub_ids if hub_id in outside_snapshots], job[:600]
        assert "resources/hf/models/" in job


def test_offline_a_snapshot_job_names_the_missing_snapshot_and_how_to_fetch_it(tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    target = "resources/hf/models/Qwen/Qwen3-0.6B"
    result = snakemake(target, "--cores", "1", *paper_workflow_in(tmp_path), env=env)
    assert result.returncode != 0
    log = (tmp_path / "logs" / "assets" / "hf_models" / "Qwen" / "Qwen3-0.6B.log").read_text()
    assert "Qwen/Qwen3-0.6B" in log and "hf download Qwen/Qwen3-0.6B --revision main --local-dir" in log, log[-2000:]
    assert not (tmp_path / target).exists()


def test_without_a_token_paloma_stops_at_its_asset_rule_naming_the_terms(tmp_path):
    env = {"HF_TOKEN": "", "HF_HOME": str(tmp_path / "hf")}  # no token, none stored by `hf auth login`
    result = snakemake("resources/paloma/ptb.jsonl", "--cores", "1", *paper_workflow_in(tmp_path), env=env)
    assert result.returncode != 0
    log = (tmp_path / "logs" / "assets" / "paloma_ptb.log").read_text()
    assert "allenai/paloma" in log and "https://huggingface.co/datasets/allenai/paloma" in log, log[-2000:]
    assert "HF_TOKEN" in log and not (tmp_path / "resources" / "paloma" / "ptb.jsonl").exists()


def test_lint_and_format_are_clean():
    lint = snakemake("--lint")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = subprocess.run([sys.executable, "-m", "snakefmt", "--check", "."], cwd=REPO, capture_output=True, text=True)
    assert fmt.returncode == 0, fmt.stderr


def test_conda_environment_pins_match_the_constraints():
    pins = dict(line.split("==") for line in (REPO / "constraints.txt").read_text().split() if "==" in line)
    env = yaml.safe_load((REPO / "envs" / "calibft.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    for requirement in pip:
        name, version = requirement.split("==")
        assert pins[name] == version, name


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory):
    """`snakemake --profile profiles/demo` for real, as a newcomer runs it, in a scratch folder."""
    workdir = tmp_path_factory.mktemp("demo")
    profile, snakefile = str(REPO / "profiles" / "demo"), str(REPO / "Snakefile")
    # About 8 minutes on 2 free cores (DESIGN.md asks for at most 10); the other test worker shares them.
    result = snakemake("--profile", profile, "--directory", str(workdir), "--snakefile", snakefile, timeout=2400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return workdir


def test_demo_run_writes_the_data_layer(demo_data):
    for split in ("train", "unseen", "ood"):
        records = read_jsonl(demo_data / "results" / "prompts" / f"{split}.jsonl")
        assert [r["prompt"] for r in records] == [p.prompt for p in prompts(split)]
    spaces = SpaceSet.load(demo_data / "results" / "output_spaces" / "eval" / "ood.npz")
    assert spaces.metadata == {"decimals": 5, "max_bins": 16384}
    expected = build_output_space("chi", {"df": 10.0}, 5, 16384)
    assert spaces.space(spaces.index("chi-002")).strings() == expected.strings()
    tries = TrieSet.load(demo_data / "results" / "tries" / "tiny" / "soft" / "train.npz")
    assert len(tries) == 1988 and tries.metadata["max_bins"] == 1001
    assert tries.metadata["tokenizer"] == "results/models/tiny"
    trie = tries.trie(tries.index("gaussian-060"))
    np.testing.assert_allclose(trie.node_mass[0], 1.0)
    for name in ("prompts/train", "output_spaces/soft/train", "tries/tiny/soft/train", "models/tiny"):
        assert (demo_data / "logs" / f"{name}.log").is_file(), name


# The demo's outcome tests assert what holds with a margin over seeds and CPUs: each threshold lies at least 3
# standard deviations beyond the mean of its figure over 12 measurements (seeds 11, 12 and 13, natively and as a
# CPU without AVX-512, soft and hard; `python benchmarks/structured_spread.py demo`, README "The demo's spread").


@pytest.mark.parametrize("recipe", ["soft", "hard"])
def test_demo_training_lowers_the_unseen_parameter_kl_by_40_percent(demo_data, recipe):
    # after / before: 0.39 to 0.51, mean 0.44, standard deviation 0.04
    adapter = demo_data / "results" / "adapters" / "tiny" / recipe
    run = json.loads((adapter / "run.json").read_text())
    assert run["unseen_soft_kl_after"] < 0.6 * run["unseen_soft_kl_before"], run
    assert (adapter / "adapter_model.safetensors").stat().st_size > 0
    log = read_jsonl(adapter / "train_log.jsonl")
    assert [r["step"] for r in log] == list(range(1, run["steps"] + 1))
    assert {"step", "epoch", "loss", "lr", "tokens_per_s"} <= log[0].keys()


def test_demo_renders_the_configuration_tables_training_curves_and_method_figure(demo_data):
    tables = demo_data / "results" / "tables"
    for name in ("shared_hyperparams", "method_hyperparams", "benchmark_distributions"):
        for suffix in ("tex", "csv", "md"):
            assert (tables / f"{name}.{suffix}").stat().st_size > 0, (name, suffix)
    assert "tab:method-hyperparams" in (tables / "method_hyperparams.tex").read_text()
    figures = demo_data / "results" / "figures"
    for name in ("training_curves", "method"):
        assert (figures / f"{name}.png").read_bytes()[:4] == b"\x89PNG", name
        assert (figures / f"{name}.pdf").stat().st_size > 0, name


def test_demo_renders_the_granularity_table_from_the_spaces_it_measured(demo_data):
    costs, metadata = read_costs(demo_data / "results" / "granularity" / "costs.json")
    assert [(c.decimals, c.max_bins) for c in costs] == [
        (d, b) for d in (2, 3, 4, 5, 6) for b in (1001, 2048, 4096, 8192, 16384)
    ]
    assert metadata["tokenizer"] == "qwen3" and len(metadata["prompt_ids"]) == 4
    # the d=5, 16384-bin row measured the evaluation's own spaces
    spaces = {
        split: SpaceSet.load(demo_data / "results" / "output_spaces" / "eval" / f"{split}.npz")
        for split in ("unseen", "ood")
    }
    sizes = [
        len(spaces[split].space(spaces[split].index(pid)).probs)
        for pid in metadata["prompt_ids"]
        for split in ("unseen", "ood")
        if pid in spaces[split].ids
    ]
    reference = next(c for c in costs if (c.decimals, c.max_bins) == (5, 16384))
    assert len(sizes) == 4 and reference.mean_values == np.mean(sizes)
    table = (demo_data / "results" / "tables" / "grid_granularity.tex").read_text()
    assert "\\label{tab:grid-granularity}" in table
    shaded = table.split("\\rowcolor")[1].splitlines()[1]
    assert shaded.startswith("5 & 16384 &"), shaded
    assert table.count("\\rowcolor") == 1


@pytest.mark.parametrize(
    "table,recipes",
    [("grid_ablation", ["soft_d2_b1001", "soft_d3_b1001", "soft"]), ("hard_label_ablation", ["hard_d3_b1001", "hard"])],
)
def test_demo_ablation_tables_show_each_recipes_evaluation(demo_data, table, recipes):
    rows = pd.read_csv(demo_data / "results" / "tables" / f"{table}.csv")
    assert len(rows) == len(recipes)
    for (_, row), recipe in zip(rows.iterrows(), recipes, strict=True):
        for split, column in (("ood", "OOD W₁ ↓"), ("unseen", "Unseen W₁ ↓")):
            aggregate = _structured(demo_data, recipe, split)["aggregate"]
            assert row[column] == pytest.approx(aggregate["w1_norm"]), (recipe, split)
    assert list(rows["d"]) == ([2, 3, 5] if table == "grid_ablation" else [3, 5])
    tex = (demo_data / "results" / "tables" / f"{table}.tex").read_text()
    assert tex.count("\\rowcolor") == 1  # the final recipe
    figure = demo_data / "results" / "figures" / "appendix_num_decimals_qualitative.png"
    assert figure.read_bytes()[:4] == b"\x89PNG"


CONDITIONS = ("base", "soft", "hard")


def _structured(demo_data: Path, cond: str, split: str) -> dict:
    return json.loads(
        (demo_data / "results" / "eval" / "tiny" / cond / "structured" / split / "metrics.json").read_text()
    )


# tuned / base logit KL: unseen parameters 0.46 to 0.73 (mean 0.57, standard deviation 0.09), held-out families
# 0.67 to 0.90 (0.76, 0.07). Normalized W1 is not asserted: its ratio on unseen parameters spans 0.88 to 1.54
# (README Status).
LOGIT_KL_RATIO_BELOW = {"unseen": 0.9, "ood": 1.0}


@pytest.mark.parametrize("split", ["unseen", "ood"])
@pytest.mark.parametrize("recipe", ["soft", "hard"])
def test_demo_fine_tuning_lowers_the_logit_kl(demo_data, recipe, split):
    base, tuned = (_structured(demo_data, cond, split)["aggregate"] for cond in ("base", recipe))
    assert tuned["logit_kl"] < LOGIT_KL_RATIO_BELOW[split] * base["logit_kl"], (base, tuned)
    assert tuned["valid_rate"] > 0.8, tuned  # 0.86 to 0.91 (mean 0.89, standard deviation 0.015)


def test_demo_structured_outputs_follow_the_artifact_contract(demo_data):
    for split in ("unseen", "ood"):
        for cond in CONDITIONS:
            folder = demo_data / "results" / "eval" / "tiny" / cond / "structured" / split
            samples = read_jsonl(folder / "samples.jsonl.gz")
            assert len(samples) == len(prompts(split)) * 200
            assert len(read_jsonl(folder / "logit_kl.jsonl")) == len(prompts(split))
        ssot = json.loads(
            (demo_data / "results" / "eval" / "tiny" / "base" / "ssot" / split / "metrics.json").read_text()
        )
        assert ssot["evaluation"] == "ssot" and ssot["aggregate"]["logit_kl"] is None
        assert len(ssot["prompts"]) == len(prompts(split))


def test_demo_renders_the_structured_tables_and_figures(demo_data):
    tables, figures = demo_data / "results" / "tables", demo_data / "results" / "figures"
    for name in ("main_ood", "main_unseen", "ssot_structured_ood", "ssot_structured_unseen"):
        for suffix in ("tex", "csv", "md"):
            assert (tables / f"{name}.{suffix}").stat().st_size > 0, (name, suffix)
    assert "tab:main-ood" in (tables / "main_ood.tex").read_text()
    assert "Tiny (demo)" in (tables / "main_unseen.md").read_text()
    names = ["main_structured_sampling", "main_ood_qualitative", "appendix_ssot_qualitative"]
    names += [f"appendix_{split}_{metric}_per_dist" for split in ("ood", "unseen") for metric in ("w1", "kl")]
    for name in names:
        assert (figures / f"{name}.png").read_bytes()[:4] == b"\x89PNG", name
        assert (figures / f"{name}.pdf").read_bytes()[:4] == b"%PDF", name


def test_readme_python_examples_run_on_the_demo_results(demo_data, monkeypatch):
    monkeypatch.chdir(demo_data)
    blocks = _readme_blocks("python")
    assert len(blocks) == 2
    namespaces: list[dict] = [{} for _ in blocks]
    for block, namespace in zip(blocks, namespaces, strict=True):
        exec(compile(block, "README.md", "exec"), namespace)
        np.testing.assert_allclose(namespace["q"].sum(), 1.0)
    (metrics,) = [namespace["metrics"] for namespace in namespaces if "metrics" in namespace]
    assert metrics["samples"] == 200 and metrics["valid_rate"] > 0.5


def test_demo_report_holds_every_table_and_figure_with_its_caption(demo_data):
    report = demo_data / "results" / "report.html"
    result = snakemake(
        "--profile", str(REPO / "profiles" / "demo"), "--directory", str(demo_data),
        "--snakefile", str(REPO / "Snakefile"), "--report", str(report),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "WARNING" not in result.stderr  # captions are valid reStructuredText
    html = report.read_text()
    rendered = [p.name for p in (demo_data / "results" / "tables").glob("*.tex")]
    rendered += [p.name for p in (demo_data / "results" / "figures").glob("*.pdf")]
    assert len(rendered) > 30
    assert all(f'"filename": "{name}"' in html for name in rendered), rendered
    captions = yaml.safe_load((REPO / "report" / "captions.yaml").read_text())
    for name in ("main_ood", "method", "grid_ablation", "config_tables", "noveltybench_qualitative_soft"):
        assert captions[name][:60] in html, name
    assert "Every table and figure of" in html  # the workflow's description


def test_demo_fine_tuning_diversifies_open_ended_answers(demo_data):
    aggregate = {
        cond: json.loads((demo_data / "results" / "eval" / "tiny" / cond / "open_ended" / "metrics.json").read_text())[
            "aggregate"
        ]
        for cond in CONDITIONS
    }
    # both objectives raise the share of distinct answers; the soft one also broadens the first-token support
    # (the paper too finds soft-target training the stronger on open-ended generation)
    for cond in ("soft", "hard"):
        assert aggregate[cond]["unique_fraction"] > aggregate["base"]["unique_fraction"], aggregate
    assert aggregate["soft"]["support"] > aggregate["base"]["support"], aggregate
    samples = read_jsonl(demo_data / "results" / "eval" / "tiny" / "base" / "open_ended" / "samples.jsonl.gz")
    assert len(samples) == 6 * 100


def test_demo_renders_the_transfer_tables_and_figures(demo_data):
    tables, figures = demo_data / "results" / "tables", demo_data / "results" / "figures"
    names = ["generative_distribution_summary", "noveltybench_summary", "mcq_summary"]
    cases = json.loads((tables / "noveltybench_qualitative_cases.json").read_text())
    assert [case["regime"] for case in cases] == ["soft"] * 3 + ["hard"] * 3 + ["base"] * 3
    assert all(case["label"] == f"tab:noveltybench-qualitative-{case['regime']}-tiny-curated-{case['index']}"
               for case in cases)  # fmt: skip
    names += [case["name"] for case in cases]
    for name in names:
        for suffix in ("tex", "csv", "md"):
            assert (tables / f"{name}.{suffix}").stat().st_size > 0, (name, suffix)
    for name in ("appendix_open_multi_threshold", "appendix_open_qualitative"):
        assert (figures / f"{name}.png").read_bytes()[:4] == b"\x89PNG", name
        assert (figures / f"{name}.pdf").read_bytes()[:4] == b"%PDF", name


def test_demo_transfer_numbers_recompute_from_the_stored_generations(demo_data):
    from calibft.evals.mcq import score as mcq_score
    from calibft.evals.noveltybench import summarize_prompts, utility

    for cond in CONDITIONS:
        folder = demo_data / "results" / "eval" / "tiny" / cond
        mcq = json.loads((folder / "mcq" / "metrics.json").read_text())
        samples = read_jsonl(folder / "mcq" / "generations.jsonl.gz")
        assert len(samples) == mcq["n"] == 200
        assert {k: mcq[k] for k in ("parsed", "tv", "failures")} == {
            k: v for k, v in mcq_score(samples).items() if k in ("parsed", "tv", "failures")
        }
        for split, count in (("curated", 5), ("wildchat", 3)):
            rows = read_jsonl(folder / "noveltybench" / split / "scores.jsonl")
            generations = read_jsonl(folder / "noveltybench" / split / "generations.jsonl.gz")
            assert [r["generations"] for r in rows] == [g["generations"] for g in generations]
            assert len(rows) == count and all(len(r["generations"]) == 10 for r in rows)
            assert all(r["utility"] == pytest.approx(utility(r["class_ids"], r["ratings"])) for r in rows)
            summary = json.loads((folder / "noveltybench" / split / "summary.json").read_text())
            assert summary["utility"] == pytest.approx(summarize_prompts(rows)["pooled"]["utility"])


def test_demo_renders_the_retention_tables_and_figures(demo_data):
    tables, figures = demo_data / "results" / "tables", demo_data / "results" / "figures"
    for name in ("retention_transfer_summary", "retention_summary", "paloma_model_summary", "paloma_slice_summary"):
        for suffix in ("tex", "csv", "md"):
            assert (tables / f"{name}.{suffix}").stat().st_size > 0, (name, suffix)
    for name in ("appendix_retention_gpirt_per_task", "appendix_paloma_perplexity", "appendix_paloma_bpb"):
        assert (figures / f"{name}.png").read_bytes()[:4] == b"\x89PNG", name
        assert (figures / f"{name}.pdf").read_bytes()[:4] == b"%PDF", name


def test_demo_retention_numbers_recompute_from_the_stored_scores(demo_data):
    from calibft.evals.gpirt import estimate, load_params
    from calibft.evals.tinybench import GPIRT_ROWS

    params = load_params(demo_data / "results" / "irt" / "synthetic.pkl")
    for cond in CONDITIONS:
        folder = demo_data / "results" / "eval" / "tiny" / cond
        gpirt = json.loads((folder / "tinybench" / "summary.json").read_text())
        assert list(gpirt["tasks"]) == list(GPIRT_ROWS)
        for row, result in gpirt["tasks"].items():
            task, metric = GPIRT_ROWS[row]
            scores = json.loads((folder / "tinybench" / task / "scores.json").read_text())["metrics"][metric]
            assert len(scores["scores"]) == 4
            assert {k: result[k] for k in ("irt", "pirt", "gpirt")} == estimate(params, task, scores["scores"])
        paloma = json.loads((folder / "paloma" / "summary.json").read_text())
        documents = read_jsonl(folder / "paloma" / "documents.jsonl.gz")
        assert len(paloma["slices"]) == 7 and len(documents) == 14
        for key in ("nll", "tokens", "bytes"):
            assert paloma["pooled"][key] == pytest.approx(sum(s[key] for s in paloma["slices"].values()))
            assert paloma["pooled"][key] == pytest.approx(sum(d[key] for d in documents))


def test_demo_logit_kl_aggregate_is_the_mean_of_the_family_means(demo_data):
    """Protocol release (the demo's): the release's `_summarize_logit_rows` averages the family means."""
    for split in ("unseen", "ood"):
        metrics = _structured(demo_data, "soft", split)
        means = [row["logit_kl"] for row in metrics["families"]]
        assert metrics["aggregate"]["logit_kl"] == pytest.approx(float(np.mean(means)), rel=1e-12)
        assert metrics["job"]["protocol"]["logit_kl_across_families"] == "mean"


def test_demo_result_folders_hold_their_provenance(demo_data):
    evals = demo_data / "results" / "eval" / "tiny"
    folders = [p.parent for p in evals.rglob("metrics.json")] + [p.parent for p in evals.rglob("summary.json")]
    folders += [p.parent for p in (demo_data / "results" / "adapters").rglob("run.json")]
    kinds = {folder.relative_to(evals).parts[1] for folder in folders if evals in folder.parents}
    assert {"structured", "ssot", "open_ended", "mcq", "noveltybench", "tinybench", "paloma"} <= kinds
    for folder in folders:
        record = json.loads((folder / "provenance.json").read_text())
        assert record["protocol"] == record["job"]["protocol"], folder
        assert record["protocol"]["prompt_bos"] == "doubled", folder
    structured = json.loads((evals / "soft" / "structured" / "ood" / "provenance.json").read_text())
    assert structured["generation"]["temperature"] == 1.0 and structured["generation"]["top_p"] == 1.0


@pytest.mark.parametrize(
    ("change", "planned"),
    [
        ({"evaluation": {"mcq": {"sampling": {"samples_per_prompt": 199}}}}, {"mcq_eval": 3}),
        ({"recipes": {"hard": {"max_steps": 399}}}, {"train": 1, "structured_eval": 2, "tinybench_eval": 1}),
    ],
)
def test_a_changed_budget_plans_its_jobs_again(demo_data, tmp_path, change, planned):
    """Snakemake records each job's resolved settings, so a config change reruns what it changes, only that."""
    overlay = tmp_path / "change.yaml"
    overlay.write_text(yaml.safe_dump(change))
    profile, snakefile = str(REPO / "profiles" / "demo"), str(REPO / "Snakefile")
    args = ["--profile", profile, "--directory", str(demo_data), "--snakefile", snakefile]
    result = snakemake("-n", *args, "--configfile", str(REPO / "profiles/demo/demo.yaml"), str(overlay))
    assert result.returncode == 0, result.stderr[-2000:]
    counts = job_counts(result.stdout)
    assert {rule: counts.get(rule) for rule in planned} == planned
    assert not {"prompts", "output_space", "trie", "build_tiny_model"} & set(counts)
    unchanged = snakemake("-n", *args)
    assert "Nothing to be done" in unchanged.stdout + unchanged.stderr


def test_another_protocol_plans_no_data_layer_job_and_leaves_the_default_results_alone(demo_data):
    profile, snakefile = str(REPO / "profiles" / "demo"), str(REPO / "Snakefile")
    args = ["--profile", profile, "--directory", str(demo_data), "--snakefile", snakefile]
    as_written = ["--config", "protocol={preset: as_written}"]
    result = snakemake("-n", *args, *as_written)
    assert result.returncode == 0, result.stderr[-2000:]
    planned = job_counts(result.stdout)
    for rule in ("prompts", "output_space", "trie", "build_tiny_model", "grid_granularity", "synthetic_irt_params"):
        assert rule not in planned, rule
    assert planned["train"] and planned["structured_eval"]  # what depends on the protocol is planned anew
    outputs = [line.split(":", 1)[1] for line in result.stdout.splitlines() if line.strip().startswith("output:")]
    assert all(path.strip().startswith("results/protocols/as_written/") for line in outputs for path in line.split(","))

    default = demo_data / "results" / "eval" / "tiny" / "base" / "structured" / "ood"
    before = {path: path.stat().st_mtime_ns for path in default.iterdir()}
    target = "results/protocols/as_written/eval/tiny/base/structured/ood/metrics.json"
    result = snakemake(*args, target, *as_written)  # --config takes every value that follows
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert {path: path.stat().st_mtime_ns for path in default.iterdir()} == before
    record = json.loads((demo_data / target).with_name("provenance.json").read_text())
    assert record["protocol"]["prompt_bos"] == "single" and record["protocol"]["generation_defaults"] == "exact"
