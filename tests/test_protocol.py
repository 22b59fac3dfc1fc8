"""Protocols: presets and overrides, their result folders, the schema and docs in step with the switches, and
the prompt's BOS per preset in training batches and in every evaluation's prompt encoding."""

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from transformers import LlamaConfig, LlamaForCausalLM

from calibft.core.protocol import PRESETS, SWITCH, SWITCHES, markdown_table, protocol_name, resolve
from calibft.data.grid import prompts
from calibft.data.output_space import SpaceSet, spaces_for_prompts
from calibft.data.trie import trie_set_for_spaces
from calibft.evals.mcq import runner as mcq_runner
from calibft.evals.mcq.job import MCQJob
from calibft.evals.metrics import across_families, within_families
from calibft.evals.noveltybench import runner as noveltybench_runner
from calibft.evals.noveltybench.job import GenerationJob
from calibft.evals.open_ended import runner as open_ended_runner
from calibft.evals.open_ended.job import OpenEndedJob
from calibft.evals.structured import metrics as structured_metrics
from calibft.evals.structured import runner as structured_runner
from calibft.evals.structured.job import StructuredJob
from calibft.evals.tinybench import runner as tinybench_runner
from calibft.evals.tinybench.job import TinyBenchJob
from calibft.pipeline.layout import Layout
from calibft.training.job import TrainJob
from calibft.training.objectives import fixed_paths
from calibft.training.train import run as train
from tests.test_chat import GEMMA3_TEMPLATE, byte_level_tokenizer

REPO = Path(__file__).resolve().parents[1]
PAPER = yaml.safe_load((REPO / "config.yaml").read_text())
RECIPE, TRAINING = PAPER["recipes"]["soft"], PAPER["training"]


def test_presets_take_the_release_or_the_text_and_agree_where_the_paper_is_silent():
    release, as_written = resolve({"preset": "release"}), resolve({"preset": "as_written"})
    assert resolve(None) == release
    assert release["prompt_bos"] == "doubled" and as_written["prompt_bos"] == "single"
    assert release["generation_defaults"] == "checkpoint" and as_written["generation_defaults"] == "exact"
    # the paper does not say how training answers are seeded; as_written keeps the pipeline's former draws
    assert release["training_draw_seeds"] == "release" and as_written["training_draw_seeds"] == "per_batch"
    # NoveltyBench: the release's HF path (its adapters applied, the checkpoint's sampling values) against the
    # paper's "temperature 1 and top-p=1", which the release's vLLM path asks for explicitly
    assert release["noveltybench_sampling"] == "hf_backend" and as_written["noveltybench_sampling"] == "vllm_backend"
    silent = ("logit_kl_across_families", "gsm8k_extraction", "logit_kl_path_seeds", "paloma_empty_documents")
    for name in (*silent, "open_ended_normalization"):  # the paper names no open-ended normalization
        assert release[name] == as_written[name], name
    assert release["open_ended_normalization"] == "release"
    # "after stripping any reasoning trace": the project's rule for every model, where the release strips only
    # `<think>` blocks (before SSOT and GSM8K only Qwen3's) and keeps GPT-OSS's analysis text
    assert release["answer_reasoning"] == "release" and as_written["answer_reasoning"] == "strip_reasoning"


def test_an_override_names_its_own_results_folder():
    def root(section):
        return Layout({"protocol": section}, "").root

    assert protocol_name(None) == "release" and root(None) == "results"
    assert root({"preset": "as_written"}) == "results/protocols/as_written"
    section = {"preset": "release", "switches": {"prompt_bos": "single", "numerics": "logits_dtype"}}
    assert protocol_name(section) == "release+prompt_bos=single"  # an override equal to the preset is no change
    assert root(section) == "results/protocols/release+prompt_bos=single"


@pytest.mark.parametrize(
    "section, message",
    [
        ({"preset": "paper"}, "protocol.preset is 'paper'"),
        ({"switches": {"bos": "single"}}, "protocol.switches.bos is not a switch"),
        ({"switches": {"prompt_bos": "triple"}}, "use one of doubled, single"),
    ],
)
def test_unknown_presets_switches_and_values_are_refused(section, message):
    with pytest.raises(ValueError, match=message):
        resolve(section)


def test_the_schema_allows_exactly_the_switches_and_their_values():
    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())["properties"]["protocol"]
    assert schema["properties"]["preset"]["enum"] == list(PRESETS)
    switches = schema["properties"]["switches"]["properties"]
    assert {name: entry["enum"] for name, entry in switches.items()} == {s.name: list(s.values) for s in SWITCHES}
    for switch in SWITCHES:
        assert {switch.release, switch.as_written} <= set(switch.values), switch.name


def test_the_docs_show_the_table_of_switches():
    assert markdown_table() in (REPO / "docs" / "fidelity.md").read_text()


def test_logit_kl_aggregates_the_family_means_by_the_switch():
    means = {"a": 1.0, "b": 2.0, "c": 6.0}
    assert across_families(means, "mean") == 3.0 and across_families(means, "median") == 2.0
    assert across_families({**means, "d": None}, "mean") is None
    assert within_families([1.0, 2.0, 9.0, None, 4.0], ["x", "x", "x", "y", "y"], "median") == {"x": 2.0, "y": 4.0}
    families = ["poisson", "chi", "weibull"]
    chosen = [p for p in prompts("ood") if p.family in families]
    kl = {p.id: 100.0 if p.family == families[0] else 1.0 for p in chosen}  # family means 100, 1, 1
    records = [{"id": p.id, "value": 0.0, "valid": False} for p in chosen]
    assert structured_metrics.score(chosen, records, kl, "mean")["aggregate"]["logit_kl"] == 34.0
    assert structured_metrics.score(chosen, records, kl, "median")["aggregate"]["logit_kl"] == 1.0


def test_fixed_path_seeds_draw_path_k_of_every_prompt_as_the_release_does(tiny_tokenizer):
    chosen = prompts("unseen")[:3]
    spaces = SpaceSet.from_spaces([p.id for p in chosen], spaces_for_prompts(chosen, 2, 50))
    tries = trie_set_for_spaces(tiny_tokenizer, spaces)
    paths = fixed_paths(tries, 4, 11, "fixed")
    for i in range(len(chosen)):  # sample_training_example: default_rng(seed + k).choice(values, p=probabilities)
        probs = spaces.probs[spaces.offsets[i] : spaces.offsets[i + 1]]
        expected = [int(np.random.default_rng(11 + k).choice(len(probs), p=probs)) for k in range(4)]
        assert paths[i].tolist() == expected
    per_prompt = fixed_paths(tries, 4, 11, "per_prompt")
    assert per_prompt.shape == (3, 4) and per_prompt.tolist() != paths.tolist()
    with pytest.raises(ValueError, match="seeds must be one of"):
        fixed_paths(tries, 4, 11, "random")


# ---- the prompt's BOS, per preset, where a model meets it ---------------------------------------------------


@pytest.fixture(scope="module")
def bos_model(tmp_path_factory) -> Path:
    """A tiny random model with a tokenizer whose chat template writes BOS and which adds one (Gemma-3's way)."""
    folder = tmp_path_factory.mktemp("bos") / "model"
    specials = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"]
    tokenizer = byte_level_tokenizer(specials, "<bos>", "<eos>", GEMMA3_TEMPLATE, adds_bos=True)
    tokenizer.pad_token = "<pad>"
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=512, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def prompt_rows(monkeypatch):
    """The first row of every multi-token forward pass (prompt prefills, training batches), without padding."""
    seen = []
    forward = LlamaForCausalLM.forward

    def spy(self, input_ids=None, attention_mask=None, **kwargs):
        if input_ids is not None and input_ids.shape[1] > 1:  # training batches pad prompts on the left
            row = input_ids[0] if attention_mask is None else input_ids[0][attention_mask[0].bool()]
            seen.append(row.tolist())
        return forward(self, input_ids=input_ids, attention_mask=attention_mask, **kwargs)

    monkeypatch.setattr(LlamaForCausalLM, "forward", spy)
    return seen


def leading_bos(row: list[int], bos: int) -> int:
    count = 0
    while count < len(row) and row[count] == bos:
        count += 1
    return count


def model_fields(folder: Path, out: Path, preset: str) -> dict:
    return {
        "model": str(folder), "model_key": "bos", "tokenizer": str(folder), "chat": {}, "condition": "base",
        "seed": 11, "precision": "fp32", "out_dir": str(out), "protocol": resolve({"preset": preset}),
        "sampling": {"samples_per_prompt": 1, "max_new_tokens": 1, "batch_size": 1},
    }  # fmt: skip


def run_structured(folder, out, preset):
    fields = model_fields(folder, out, preset)
    structured_runner.run(StructuredJob(**fields, evaluation="ssot", split="ood", system="Draw."))


def run_open_ended(folder, out, preset):
    (out / "prompts.json").parent.mkdir(parents=True, exist_ok=True)
    (out / "prompts.json").write_text(json.dumps(["Name a random city. Output ONLY the answer."]))
    open_ended_runner.run(OpenEndedJob(**model_fields(folder, out, preset), prompts_file=str(out / "prompts.json")))


def run_mcq(folder, out, preset):
    mcq_runner.run(MCQJob(**model_fields(folder, out, preset)))


def run_noveltybench(folder, out, preset):
    out.mkdir(parents=True, exist_ok=True)
    (out / "prompts.jsonl").write_text(json.dumps({"id": "p0", "prompt": "Tell me a joke."}) + "\n")
    job = GenerationJob(**model_fields(folder, out, preset), split="curated", prompts_file=str(out / "prompts.jsonl"))
    noveltybench_runner.generate(job)


def run_training(folder, out, preset):
    from calibft.lm.models import load_tokenizer

    tokenizer = load_tokenizer(folder)
    train_prompts, unseen = prompts("train")[:4], prompts("unseen")[:2]
    SpaceSet.from_spaces([p.id for p in train_prompts], spaces_for_prompts(train_prompts, 1, 8)).save(out / "t.npz")
    spaces = SpaceSet.from_spaces([p.id for p in unseen], spaces_for_prompts(unseen, 1, 8))
    trie_set_for_spaces(tokenizer, spaces).save(out / "probe.npz")
    lora = {"r": 2, "alpha": 4, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
    training = {
        "lora": lora, "learning_rate": 1e-3, "weight_decay": 0.0, "warmup_fraction": 0.0, "per_device_batch_size": 2,
        "gradient_accumulation": 1, "max_seq_len": 256, "precision": "fp32", "distributed": "ddp",
        "checkpoint_every": 10, "kl_probe_paths": 1, "stop_before_time_limit": 10,
    }  # fmt: skip
    recipe = {"objective": "hard", "space": "t", "epochs": 1, "samples_per_prompt": 1, "max_steps": 1}
    fields = model_fields(folder, out, preset)
    job = TrainJob(
        model=str(folder), tokenizer=str(folder), chat={}, recipe=recipe, training=training, seed=11,
        train_data=str(out / "t.npz"), probe_tries=str(out / "probe.npz"), out_dir=str(out / "adapter"),
        checkpoint_dir=str(out / "ckpt"), protocol=fields["protocol"],
    )  # fmt: skip
    train(job)


def run_tinybench(folder, out, preset):
    """One log-likelihood task and GSM8K (generated), so that both ways a tiny benchmark meets a prompt run."""
    mmlu = {"question": "2 + 3?", "choices": ["4", "5", "6", "7"], "answer": 1, "input_formatted": "2 + 3?\nAnswer:"}
    gsm8k = {"question": "1 + 1?", "answer": "#### 2", "input_formatted": "Question: 1 + 1?\nAnswer:"}
    tasks = {}
    for task, row in (("mmlu", mmlu), ("gsm8k", gsm8k)):
        (out / f"{task}.jsonl").write_text(json.dumps(row) + "\n")
        tasks[task] = str(out / f"{task}.jsonl")
    fields = model_fields(folder, out, preset) | {"sampling": {}}
    tinybench_runner.run(TinyBenchJob(**fields, tasks=tasks, max_new_tokens=2))


WHERE = {
    "training": run_training,
    "structured": run_structured,
    "open_ended": run_open_ended,
    "mcq": run_mcq,
    "noveltybench": run_noveltybench,
    "tinybench": run_tinybench,
}


@pytest.mark.parametrize("where", list(WHERE))
@pytest.mark.parametrize("preset, expected", [("release", 2), ("as_written", 1)])
def test_prompts_carry_two_bos_under_release_and_one_as_written(
    bos_model, tmp_path, prompt_rows, where, preset, expected
):
    out = tmp_path / where
    out.mkdir()
    WHERE[where](bos_model, out, preset)
    bos = json.loads((bos_model / "config.json").read_text())["bos_token_id"]
    assert prompt_rows, "no prompt reached the model"
    assert {leading_bos(row, bos) for row in prompt_rows} == {expected}


def test_every_switch_is_described():
    for switch in SWITCHES:
        assert switch.paper and switch.release_code and switch.moves, switch.name
    assert set(SWITCH) == set(resolve(None)) == set(asdict(TrainJob(**_minimal_train_job())).get("protocol"))


def _minimal_train_job() -> dict:
    return dict(
        model="m", tokenizer="t", chat={}, recipe=RECIPE, training=TRAINING, seed=0, train_data="d", probe_tries="p",
        out_dir="o", checkpoint_dir="c",
    )  # fmt: skip


def test_a_job_with_a_misspelt_or_missing_switch_fails_where_it_is_made():
    good = resolve(None)
    job = dict(_minimal_train_job(), protocol=good)
    assert TrainJob(**job).protocol == good
    misspelt = {("numerix" if name == "numerics" else name): value for name, value in good.items()}
    with pytest.raises(ValueError, match=r"unknown switches \['numerix'\] and lacks \['numerics'\]"):
        TrainJob(**dict(job, protocol=misspelt))
    with pytest.raises(ValueError, match="gives numerics 'bf16'"):
        TrainJob(**dict(job, protocol={**good, "numerics": "bf16"}))
    fields = dict(
        model="m", model_key="m", tokenizer="t", chat={}, condition="base", seed=0, precision="fp32",
        sampling={"samples_per_prompt": 1, "max_new_tokens": 4}, out_dir="o", evaluation="structured", split="ood",
    )  # fmt: skip
    with pytest.raises(ValueError, match="unknown switches"):
        StructuredJob(**fields, protocol=misspelt)
