"""The jobs as the workflow builds them from the paper's config and the demo's (calibft.pipeline.jobs,
calibft.pipeline.layout)."""

from __future__ import annotations

import copy
import json
from dataclasses import asdict
from pathlib import Path

import pytest
from snakemake.utils import validate

from calibft.core.io import read_job
from calibft.data.grid import prompts
from calibft.pipeline.assets import HubDataset
from calibft.pipeline.config import read_config
from calibft.pipeline.jobs import (
    generation_job,
    mcq_job,
    open_ended_job,
    paloma_job,
    scoring_job,
    ssot_job,
    structured_job,
    tinybench_job,
    train_job,
)
from calibft.pipeline.layout import Layout
from calibft.training.job import Recipe, TrainJob

REPO = Path(__file__).resolve().parents[1]


def load(path: str, **protocol) -> dict:
    """A config as the workflow sees it: over its base, validated, with the schema's defaults filled in."""
    config = read_config(REPO / path)
    if protocol:
        config = copy.deepcopy(config) | {"protocol": protocol}
    validate(config, str(REPO / "schemas" / "config.schema.yaml"))
    return config


PAPER = Layout(load("config.yaml"), "/repo")


def test_train_job_of_a_soft_and_a_hard_recipe():
    soft = train_job(PAPER, "qwen3_0p6b", "soft")
    assert soft.model == "resources/hf/models/Qwen/Qwen3-0.6B"
    assert soft.train_data == "results/tries/qwen3/soft/train.npz"  # the soft recipe's space, the model's tokenizer
    assert soft.probe_tries == "results/tries/qwen3/eval/unseen.npz"
    assert soft.out_dir == "results/adapters/qwen3_0p6b/soft"
    assert soft.checkpoint_dir == "results/checkpoints/qwen3_0p6b/soft"
    assert soft.recipe == Recipe(**PAPER.config["recipes"]["soft"]) and soft.protocol == PAPER.protocol
    assert soft.training.lora == PAPER.config["training"]["lora"]
    hard = train_job(PAPER, "qwen3_0p6b", "hard")
    assert hard.train_data == "results/output_spaces/eval/train.npz"  # hard recipes sample the space's strings
    assert (hard.recipe.temperature, hard.recipe.max_steps) == (1.0, None)  # the defaults: the config gives neither


def test_a_train_job_read_from_json_fails_on_a_misspelt_setting():
    job = json.loads(json.dumps(asdict(train_job(PAPER, "qwen3_0p6b", "soft"))))
    assert TrainJob(**job) == train_job(PAPER, "qwen3_0p6b", "soft")  # the job's JSON reads back into the same job
    job["recipe"]["epoch"] = job["recipe"].pop("epochs")
    with pytest.raises(TypeError, match="epoch"):
        TrainJob(**job)
    job["recipe"]["epochs"] = job["recipe"].pop("epoch")
    job["training"]["learning_rat"] = job["training"].pop("learning_rate")
    with pytest.raises(TypeError, match="learning_rat"):
        TrainJob(**job)


def test_structured_job_samples_the_split_with_the_condition_adapter():
    job = structured_job(PAPER, "qwen3_0p6b", "soft", "ood")
    assert (job.evaluation, job.split, job.condition) == ("structured", "ood", "soft")
    assert job.adapter == "results/adapters/qwen3_0p6b/soft"
    assert job.out_dir == "results/eval/qwen3_0p6b/soft/structured/ood"
    assert job.checkpoint_dir == "results/checkpoints/eval/qwen3_0p6b/soft/structured/ood"
    assert job.tries == "results/tries/qwen3/eval/ood.npz"
    assert job.prompt_ids is None  # the paper samples every prompt
    assert job.sampling == PAPER.config["evaluation"]["structured"]["sampling"]
    assert structured_job(PAPER, "qwen3_0p6b", "base", "ood").adapter is None


def test_a_jobs_chat_options_follow_the_chat_date_switch():
    """The config pins Llama-3.2's day; `chat_date: run_day` leaves it to the clock, in evaluations as in
    training, and writes the results under a protocol of their own."""
    assert structured_job(PAPER, "llama3_2_1b_it", "base", "ood").chat_options().date == "2024-07-26"
    run_day = Layout(load("config.yaml", preset="release", switches={"chat_date": "run_day"}), "/repo")
    job = structured_job(run_day, "llama3_2_1b_it", "base", "ood")
    assert job.chat_options().date is None and job.chat == PAPER.config["models"]["llama3_2_1b_it"]["chat"]
    assert job.out_dir == "results/protocols/release+chat_date=run_day/eval/llama3_2_1b_it/base/structured/ood"
    assert train_job(run_day, "llama3_2_1b_it", "soft").protocol["chat_date"] == "run_day"


def test_ssot_job_follows_the_protocol():
    release = ssot_job(PAPER, "qwen3_0p6b", "unseen")
    assert release.release_prompts == "resources/ssot_prompts.py" and release.system is None
    assert release.chat_overrides == {"template_kwargs": {"enable_thinking": True}}
    assert release.out_dir == "results/eval/qwen3_0p6b/base/ssot/unseen" and release.tries is None
    written = Layout(load("config.yaml", preset="as_written"), "/repo")
    job = ssot_job(written, "qwen3_0p6b", "unseen")
    assert job.release_prompts is None and job.answer_pattern == "<answer>(.*?)</answer>"
    assert job.system == written.config["evaluation"]["ssot"]["instruction"]
    assert job.out_dir == "results/protocols/as_written/eval/qwen3_0p6b/base/ssot/unseen"


def test_the_releases_answer_rule_removes_think_blocks_for_qwen3_only():
    """answer_reasoning: release: the release strips `<think>` blocks before SSOT extraction, GSM8K and NoveltyBench
    for its Qwen3 family only (the Qwen3 family's `release_strips_thinking`)."""
    for model, entry in PAPER.config["models"].items():
        qwen3 = entry["family"] == "Qwen3"
        assert ssot_job(PAPER, model, "ood").release_strips_thinking == qwen3, model
        assert tinybench_job(PAPER, model, "base").release_strips_thinking == qwen3, model
        assert generation_job(PAPER, model, "base", "curated").release_strips_thinking == qwen3, model
    demo = Layout(load("profiles/demo/demo.yaml"), "/repo")
    assert not ssot_job(demo, "tiny", "ood").release_strips_thinking  # the release's default family
    assert not tinybench_job(demo, "tiny", "base").release_strips_thinking


def test_demo_jobs_read_the_configured_fixtures():
    demo = Layout(load("profiles/demo/demo.yaml"), "/repo")
    open_ended = open_ended_job(demo, "tiny", "hard")
    assert open_ended.prompts_file == "/repo/profiles/demo/fixtures/open_ended_prompts.json"
    generation = generation_job(demo, "tiny", "base", "curated")
    assert generation.prompts_file.startswith("/repo/profiles/demo/fixtures/")
    assert generation.checkpoint_dir == "results/checkpoints/eval/tiny/base/noveltybench/curated"
    scoring = scoring_job(demo, "tiny", "base", "curated")
    assert scoring.generations == "results/eval/tiny/base/noveltybench/curated/generations.jsonl.gz"
    assert scoring.checkpoint_dir == "results/checkpoints/eval/tiny/base/noveltybench_scores/curated"
    tinybench = tinybench_job(demo, "tiny", "base")
    assert list(tinybench.tasks) == demo.config["evaluation"]["tinybenchmarks"]["tasks"]
    assert tinybench.irt_params == "results/irt/synthetic.pkl"


def test_a_smoke_run_samples_few_prompts_and_those_the_figures_draw():
    smoke = Layout(load("profiles/smoke/smoke.yaml"), "/repo")
    structured, ablations = smoke.config["evaluation"]["structured"], smoke.config["ablations"]
    drawn = {panel["prompt"] for panel in structured["qualitative"]} | set(ablations["qualitative"]["prompts"])
    for split in structured["splits"]:
        ids = structured_job(smoke, "gemma3_270m", "base", split).prompt_ids
        assert ids == ssot_job(smoke, "gemma3_270m", split).prompt_ids  # SSOT: the same
        assert drawn & {p.id for p in prompts(split)} <= set(ids)
        assert structured["max_prompts"] <= len(ids) <= structured["max_prompts"] + len(drawn)


def test_paper_jobs_read_the_pinned_downloads():
    assert open_ended_job(PAPER, "qwen3_8b", "base").prompts_file == "resources/open_random_gen_prompts.json"
    paloma = paloma_job(PAPER, "qwen3_8b", "base")
    assert paloma.slices == {
        name: f"resources/paloma/{name}.jsonl" for name in PAPER.config["evaluation"]["paloma"]["slices"]
    }
    assert scoring_job(PAPER, "qwen3_8b", "soft", "wildchat").classifier == "resources/hf/classifier"


BUILDS = [
    (train_job, ("qwen3_0p6b", "soft")),
    (structured_job, ("qwen3_0p6b", "hard", "unseen")),
    (ssot_job, ("qwen3_0p6b", "ood")),
    (open_ended_job, ("qwen3_0p6b", "soft")),
    (mcq_job, ("qwen3_0p6b", "hard")),
    (generation_job, ("qwen3_0p6b", "soft", "curated")),
    (scoring_job, ("qwen3_0p6b", "soft", "curated")),
    (tinybench_job, ("qwen3_0p6b", "base")),
    (paloma_job, ("qwen3_0p6b", "base")),
]


@pytest.mark.parametrize(("build", "wildcards"), BUILDS, ids=lambda b: getattr(b, "__qualname__", None))
def test_a_job_survives_its_json(build, wildcards):
    job = build(PAPER, *wildcards)
    assert read_job(type(job), "calibft.x", [json.dumps(asdict(job))]) == job


def test_with_several_seeds_each_seeds_jobs_carry_its_seed_and_write_under_it():
    two = Layout({**PAPER.config, "seeds": [11, 12]}, "/repo")
    train = train_job(two.seeded(12), model="qwen3_8b", recipe="soft")
    assert (train.seed, train.out_dir) == (12, "results/seeds/12/adapters/qwen3_8b/soft")
    assert train.checkpoint_dir == "results/seeds/12/checkpoints/qwen3_8b/soft"
    assert train.train_data == train_job(PAPER, model="qwen3_8b", recipe="soft").train_data  # shared
    job = structured_job(two.seeded(11), model="qwen3_8b", cond="soft", eval_split="ood")
    assert (job.seed, job.adapter) == (11, "results/seeds/11/adapters/qwen3_8b/soft")
    assert job.out_dir == "results/seeds/11/eval/qwen3_8b/soft/structured/ood"
    assert job.checkpoint_dir == "results/seeds/11/checkpoints/eval/qwen3_8b/soft/structured/ood"
    assert [layout.run_seed for layout in two.per_seed()] == [11, 12]
    with pytest.raises(ValueError, match=r"several seeds \[11, 12\]: take one seed's layout"):
        two.adapter_folder("qwen3_8b", "soft")
    with pytest.raises(ValueError, match="seed 13 is not one of the config's seeds"):
        two.seeded(13)


def test_with_one_seed_the_runs_keep_their_plain_paths():
    job = train_job(PAPER, model="qwen3_8b", recipe="soft")
    assert (job.seed, job.out_dir) == (11, "results/adapters/qwen3_8b/soft")
    assert PAPER.seeded(11).eval_folder("qwen3_8b", "base", "mcq") == "results/eval/qwen3_8b/base/mcq"


def test_a_protocols_logs_go_beside_its_results():
    assert PAPER.logs == "logs"
    assert Layout(load("config.yaml", preset="as_written"), "/repo").logs == "logs/protocols/as_written"


def test_a_paloma_slice_is_downloaded_at_the_configured_revision_with_a_token():
    dataset = PAPER.paloma_dataset("ptb")
    assert dataset == {
        "path": "allenai/paloma",
        "name": "ptb",
        "split": "test",
        "revision": PAPER.config["evaluation"]["paloma"]["revision"],
        "gated": True,
    }
    assert HubDataset(**dataset).gated  # what rule paloma_slice's script makes of it
