"""The workflow as its users plan it: dry runs of every profile, schema validation, the errors that stop a run
before any job, lint."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from calibft.artifacts.registry import where
from calibft.pipeline.config import read_config
from calibft.pipeline.plan import gpu_hours_by_rule, planned_jobs
from tests.workflow.runner import REPO, code_blocks, job_counts, paper_workflow_in, snakemake

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def paper_plan() -> str:
    """The dry run of the paper's `all` on the SLURM profile."""
    result = snakemake("-n", "--forceall", "--profile", "profiles/slurm", "all")
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_parsing_the_workflow_imports_no_deep_learning_library(tmp_path):
    """A dry run, and every cluster job's parse, pays no torch or matplotlib import: each raises on import here."""
    for library in ("torch", "transformers", "peft", "matplotlib"):
        (tmp_path / f"{library}.py").write_text(f"raise ImportError('{library} is imported')\n")
    pythonpath = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    result = snakemake("-n", "--forceall", "--profile", "profiles/demo", env={"PYTHONPATH": pythonpath})
    assert result.returncode == 0, result.stderr
    assert "Job stats:" in result.stdout


def test_paper_dry_run_on_slurm_plans_every_job(paper_plan):
    counts = job_counts(paper_plan)
    # 3 prompt files, 4 output spaces, 4 tokenizers x (soft train + eval unseen + eval ood) tries,
    # 12 models x (soft, hard) adapters, 12 models x 3 conditions x 2 splits structured evaluations and as many
    # exact ones,
    # the ablations (7 more spaces, 2 models x 8 more soft-training tries, 2 models x 17 more recipes trained
    # and evaluated on 2 splits),
    # 12 models x 2 splits SSOT runs and the release's SSOT prompts, the open-ended prompts and 12 x 3 open-ended
    # runs, 12 x 3 MCQ runs,
    # NoveltyBench's 2 prompt files, 3 evaluators and 12 x 3 x 2 generation and scoring jobs, 5 TinyBenchmarks
    # datasets, its IRT file and 12 x 3 TinyBenchmarks runs, 7 PALOMA slices and 12 x 3 PALOMA runs, the tables
    # and figures (the nine qualitative tables are planned once the checkpoint that chooses them has run), a
    # snapshot of each of the 12 checkpoints (the four tokenizers come from four of them), and the reproduction
    # report: the 13 results tables against the paper's numbers, their summary and the compute report
    assert counts == {
        "checkpoint_snapshot": 12, "prompts": 3, "output_space": 11, "trie": 28, "train": 58, "structured_eval": 140,
        "exact_eval": 72, "ssot_eval": 24,
        "open_ended_prompts": 1, "open_ended_eval": 36, "mcq_eval": 36, "noveltybench_prompts": 2,
        "evaluator_snapshot": 3, "noveltybench_generate": 72, "noveltybench_score": 72,
        "tinybenchmarks_items": 5, "irt_params": 1, "tinybench_eval": 36, "paloma_slice": 7, "paloma_eval": 36,
        "grid_granularity": 1, "ssot_prompts": 1, "table": 19, "figure": 16, "noveltybench_qualitative_cases": 1,
        "reproduction": 13, "reproduction_summary": 1, "compute_report": 1, "all": 1, "total": 709,
    }  # fmt: skip
    assert "build_tiny_model" not in paper_plan
    blocks = paper_plan.split("\n\n")
    trains = [block for block in blocks if "\nrule train:" in block]
    assert len(trains) == 58
    for block in trains:  # each on one node with 4 A100 GPUs, launched with FSDP
        assert "gpu=4, gpu_model=a100" in block
        assert "accelerate launch --config_file" in block and "fsdp.yaml --num_processes 4" in block
    model_jobs = "structured_eval|exact_eval|ssot_eval|open_ended_eval|mcq_eval|noveltybench_generate|tinybench_eval"
    evals = [block for block in blocks if re.search(rf"\nrule ({model_jobs}|paloma_eval):", block)]
    assert len(evals) == 452
    for block in evals:  # one A100 each, two for the 27B model
        gpus = 2 if "gemma3_27b_it" in block else 1
        assert f"gpu={gpus}, gpu_model=a100" in block, block
    scoring = [block for block in blocks if "\nrule noveltybench_score:" in block]
    assert len(scoring) == 72 and all("gpu=1, gpu_model=a100" in block for block in scoring)


def _planned_jobs(output: str) -> list[str]:
    """The dry run's jobs, each with its command, in a stable order, without the header (date, run id, the
    command line) and the jobs' time stamps. Snakemake prints the jobs that are ready in no fixed order, and the
    first one without the blank line before it: the blocks are compared stripped."""
    body = output.split("Building DAG of jobs...", 1)[1]
    body = re.sub(r"^\[\w{3} \w{3} .*\d{4}\]\n", "", body, flags=re.MULTILINE)
    return sorted(block.strip("\n") for block in body.split("\n\n"))


@pytest.mark.parametrize("profile", ["demo", "demo-gpu", "smoke", "mini", "mini-gpu"])
def test_a_cluster_job_reads_the_configuration_of_the_main_process(profile, tmp_path):
    """Snakemake starts each cluster job with the main process's --configfiles but without
    --replace-workflow-config: the job must plan the same jobs, with the same commands."""
    configfiles = yaml.safe_load((REPO / "profiles" / profile / "config.yaml").read_text())["configfile"]
    configfiles = [configfiles] if isinstance(configfiles, str) else configfiles
    plan = ["-n", "-p", "--forceall", "--directory", str(tmp_path)]
    main = snakemake(*plan, "--profile", f"profiles/{profile}")
    job = snakemake(*plan, "--cores", "2", "--configfiles", *configfiles)
    assert main.returncode == 0 and job.returncode == 0, job.stderr[-2000:]
    assert _planned_jobs(main.stdout) == _planned_jobs(job.stdout)


def test_the_demo_on_one_gpu_runs_every_gpu_job_there_in_bf16(tmp_path):
    result = snakemake("-n", "-p", "--forceall", "--directory", str(tmp_path), "--profile", "profiles/demo-gpu")
    assert result.returncode == 0, result.stderr[-2000:]
    gpu_jobs = [block for block in result.stdout.split("\n\n") if "python -m calibft.core.runlog" in block]
    rules = {re.search(r"rule (\w+):", block).group(1) for block in gpu_jobs}
    assert {"train", "structured_eval", "exact_eval", "noveltybench_score", "paloma_eval"} <= rules
    assert all("gpu=1" in block and '"precision": "bf16"' in block for block in gpu_jobs)


def test_replace_workflow_config_is_refused_for_what_cluster_jobs_would_not_see(tmp_path):
    partial = tmp_path / "partial.yaml"
    partial.write_text(yaml.safe_dump({"seeds": [5]}))
    result = snakemake("-n", "--configfile", str(partial), "--replace-workflow-config")
    assert result.returncode != 0
    assert "put `standalone: true` in a configuration that replaces config.yaml" in result.stdout + result.stderr


def test_the_world_size_of_a_training_job_is_its_models_gpus(tmp_path):
    overlay = tmp_path / "gpus.yaml"
    overlay.write_text(yaml.safe_dump({"models": {"tiny": {"resources": {"gpus": 2}}}}))
    demo = ["-n", "-p", "--forceall", "--profile", "profiles/demo", "results/adapters/tiny/soft/run.json"]
    result = snakemake(*demo, "--configfile", "profiles/demo/demo.yaml", str(overlay))
    assert result.returncode == 0, result.stderr[-2000:]
    assert (
        '"world_size": 2}' in result.stdout and "ddp.yaml --num_processes 2 -m calibft.training.train" in result.stdout
    )
    one = snakemake(*demo)
    runlog = (
        "-m calibft.core.runlog logs/train/tiny/soft.log 1 --outputs results/adapters/tiny/soft/adapter_config.json "
    )
    assert '"world_size": 1}' in one.stdout and runlog in one.stdout
    assert "results/adapters/tiny/soft/run.json -- python -m calibft.training.train" in one.stdout


def test_smoke_budgets_plan_every_job_of_the_paper_run_with_small_budgets(paper_plan):
    """The cluster rehearsal: the paper's jobs, one for one, two optimizer steps each, 30-minute limits."""
    result = snakemake(
        "-n", "--forceall", "--profile", "profiles/slurm", "all", "--configfile", "profiles/smoke/budgets.yaml"
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert job_counts(result.stdout) == job_counts(paper_plan)
    smoke, paper = planned_jobs(result.stdout.splitlines()), planned_jobs(paper_plan.splitlines())
    gpu_jobs = [job for job in smoke if job.gpus]
    assert len(gpu_jobs) == 582 and {job.resources["runtime"] for job in gpu_jobs} == {"30"}
    trains = [block for block in result.stdout.split("\n\n") if "\nrule train:" in block]
    assert len(trains) == 58 and all('"max_steps": 2' in block for block in trains)
    smoke_hours, paper_hours = (sum(row["gpu_hours"] for row in gpu_hours_by_rule(jobs)) for jobs in (smoke, paper))
    assert 0 < smoke_hours < paper_hours / 10
    docs = " ".join((REPO / "docs" / "cluster.md").read_text().split())  # the docs quote both figures
    assert f"request {smoke_hours:,g} GPU-hours" in docs and f"against {paper_hours:,g} for the full run" in docs


def test_the_cpu_smoke_has_the_cluster_smokes_counts():
    """profiles/smoke/smoke.yaml cuts steps and prompts as the budgets for the paper's models do."""
    budgets = yaml.safe_load((REPO / "profiles/smoke/budgets.yaml").read_text())
    smoke = read_config(REPO / "profiles/smoke/smoke.yaml")
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
        "table": 5, "figure": 7, "structured": 1, "total": 44,
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
    (ood_table,) = where(kind="table", reads=("structured",), split="ood")
    result = snakemake("-n", "--forceall", "--profile", "profiles/slurm", f"results/{ood_table.files()[0]}")
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    assert counts["structured_eval"] == 36 and counts["table"] == 1
    assert "ssot_eval" not in counts and "figure" not in counts
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
    config = read_config(REPO / "config.yaml")
    gpt_oss, qwen = jobs["gpt_oss_20b"], jobs["qwen3_14b"]
    assert gpt_oss["system"] == config["models"]["gpt_oss_20b"]["ssot_instruction"] != qwen["system"]
    assert gpt_oss["answer_pattern"] is None and gpt_oss["chat_overrides"] == {"assistant_prefix": ""}
    assert qwen["system"] == config["evaluation"]["ssot"]["instruction"]
    assert qwen["answer_pattern"] == "<answer>(.*?)</answer>"
    assert gpt_oss["release_prompts"] is None and gpt_oss["protocol"]["ssot_prompt"] == "config"


def test_under_release_ssot_reads_the_release_prompts_downloaded_by_their_rule():
    jobs = ssot_jobs("results")
    gpt_oss, qwen = jobs["gpt_oss_20b"], jobs["qwen3_14b"]
    assert gpt_oss["release_prompts"] == qwen["release_prompts"] == "resources/ssot_prompts.py"
    assert (gpt_oss["release_style"], qwen["release_style"]) == ("gpt_oss", "default")
    assert gpt_oss["system"] is None and qwen["answer_pattern"] is None


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
        "exact_eval": 6, "ssot_eval": 2, "open_ended_eval": 3, "mcq_eval": 3, "noveltybench_generate": 6,
        "noveltybench_score": 6,
        "synthetic_irt_params": 1, "tinybench_eval": 3, "paloma_eval": 3, "grid_granularity": 1, "table": 19,
        "figure": 16, "noveltybench_qualitative_cases": 1, "packaged_tokenizer": 1, "reproduction": 13,
        "reproduction_summary": 1, "compute_report": 1, "all": 1, "total": 121,
    }  # fmt: skip
    for asset in ("noveltybench_prompts", "evaluator_snapshot", "tinybenchmarks_items", "paloma_slice", "irt_params"):
        assert f"rule {asset}:" not in result.stdout, asset


RUN_RULES = {"train", "structured_eval", "exact_eval", "ssot_eval", "open_ended_eval", "mcq_eval"}
RUN_RULES |= {"noveltybench_generate", "noveltybench_score", "tinybench_eval", "paloma_eval"}


def test_two_seeds_plan_every_training_and_evaluation_once_per_seed(tmp_path):
    """With `seeds: [11, 12]` each run goes under results/seeds/{seed}/ with its seed in its job; the data
    layer, the tables and the figures are planned once."""
    (tmp_path / "seeds.yaml").write_text("seeds: [11, 12]\n")
    one = snakemake("-n", "--forceall", "--profile", "profiles/demo")
    two = snakemake(
        "-n", "--forceall", "--profile", "profiles/demo", "--configfile", "profiles/demo/demo.yaml",
        str(tmp_path / "seeds.yaml"),
    )  # fmt: skip
    assert one.returncode == 0 and two.returncode == 0, two.stderr[-2000:]
    once, twice = job_counts(one.stdout), job_counts(two.stdout)
    assert {rule: twice[rule] for rule in RUN_RULES} == {rule: 2 * once[rule] for rule in RUN_RULES}
    shared = set(once) - RUN_RULES - {"total"}
    assert {rule: twice[rule] for rule in shared} == {rule: once[rule] for rule in shared}
    trained = re.findall(r"output: results/seeds/(\d+)/adapters/tiny/(\w+)/adapter_config.json", two.stdout)
    recipes = {recipe for _, recipe in trained}
    assert len(recipes) == once["train"] and sorted(trained) == sorted((s, r) for s in ("11", "12") for r in recipes)
    jobs = re.findall(r"python -m calibft\.training\.train '(\{.*\})'", two.stdout)
    assert sorted((job["seed"], job["out_dir"]) for job in map(json.loads, jobs)) == sorted(
        (int(seed), f"results/seeds/{seed}/adapters/tiny/{recipe}") for seed, recipe in trained
    )
    assert "results/seeds/12/eval/tiny/soft/structured/ood/metrics.json" in two.stdout
    assert "output: results/tables/main_ood.tex" in two.stdout and "results/seeds/11/tables" not in two.stdout


def _config_with(tmp_path: Path, edit, standalone: bool = False) -> Path:
    """config.yaml after `edit`: extending config.yaml, or in its place (`standalone`)."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    edit(config)
    config["standalone"] = standalone
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
        (lambda c: c["model_families"]["Qwen3"].pop("eval_resources"), r"'eval_resources' is a required property"),
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
    bad = _config_with(tmp_path, edit, standalone=True)
    result = snakemake("-n", "all", "--configfile", str(bad))
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


def test_a_model_added_as_the_readme_shows_plans_its_training_and_evaluation(tmp_path):
    (added,) = [block for block in code_blocks("yaml", "README.md") if block.startswith("# my_models.yaml")]
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
    from calibft.pipeline.assets import OPEN_ENDED_PROMPTS, sha256_of

    target = f"resources/{OPEN_ENDED_PROMPTS.filename}"
    result = snakemake(target, "--cores", "1", *paper_workflow_in(tmp_path))
    if result.returncode == 0:  # a machine with network: the pinned file, verified
        assert sha256_of(tmp_path / target) == OPEN_ENDED_PROMPTS.sha256
    else:  # offline, as CI: the log says what is missing and where to put it by hand
        log = (tmp_path / "logs" / "assets" / "open_ended_prompts.log").read_text()
        assert OPEN_ENDED_PROMPTS.url in log and str(tmp_path / target) in log, log[-2000:]
        assert not (tmp_path / target).exists()


def test_the_noveltybench_prompts_download_or_say_how_to_provide_them(tmp_path):
    from calibft.pipeline.assets import NOVELTYBENCH_PROMPTS

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


def test_the_readme_and_the_workflows_common_rules_stay_short():
    """The README is the way in, its details are in docs/; rules/common.smk holds the input functions, wildcard
    constraints and the glue that Snakemake needs, its logic is in calibft.pipeline."""
    readme = len((REPO / "README.md").read_bytes())
    assert readme <= 14_000, f"README.md is {readme:,} bytes, over 14,000: move details to docs/ and link them"
    common = len((REPO / "rules" / "common.smk").read_text().splitlines())
    assert common <= 450, (
        f"rules/common.smk is {common} lines, over 450: move logic into calibft.pipeline (a function of the config or "
        "the Layout, with a unit test) and keep a thin input function of the wildcards here"
    )


def test_conda_environment_pins_match_the_constraints():
    pins = dict(line.split("==") for line in (REPO / "constraints.txt").read_text().split() if "==" in line)
    env = yaml.safe_load((REPO / "envs" / "calibft.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    for requirement in pip:
        name, version = requirement.split("==")
        assert pins[name] == version, name
