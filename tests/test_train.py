"""Training on the tiny model, CPU: LoRA-only gradients, resuming after preemption, run.json."""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest
import torch
from accelerate.utils import convert_outputs_to_fp32
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, get_cosine_schedule_with_warmup

from calibft.core.io import read_jsonl
from calibft.core.protocol import resolve
from calibft.data.grid import prompts, select
from calibft.data.output_space import SpaceSet, spaces_for_prompts
from calibft.data.trie import TrieSet, tokenize_values, trie_set_for_spaces
from calibft.demo.tiny_model import build_tiny_model
from calibft.lm.chat import ChatOptions, chat_prompt_ids
from calibft.lm.models import attach_lora, load_model, load_tokenizer
from calibft.training.job import TrainJob
from calibft.training.objectives import completion_logits, hard_batch_loss, make_batch, soft_batch_loss
from calibft.training.train import run

LORA = {"r": 4, "alpha": 8, "dropout": 0.05, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
TRAINING = {
    "lora": LORA, "learning_rate": 1e-3, "weight_decay": 0.01, "warmup_fraction": 0.1, "per_device_batch_size": 4,
    "gradient_accumulation": 1, "max_seq_len": 256, "precision": "fp32", "distributed": "ddp",
    "checkpoint_every": 4, "kl_probe_paths": 2, "stop_before_time_limit": 10,
}  # fmt: skip
CHAT = {"template_kwargs": {"enable_thinking": False}}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A quickly trained tiny model, and soft/hard training data for two prompts per family."""
    root = tmp_path_factory.mktemp("train")
    build_tiny_model(root / "tiny", train_steps=20)
    tokenizer = load_tokenizer(root / "tiny")
    chosen = [p for p in prompts("train") if p.id.endswith(("-000", "-001"))]
    unseen = prompts("unseen")[:6]
    for name, split_prompts, bins in (("train", chosen, 64), ("unseen", unseen, 128)):
        spaces = SpaceSet.from_spaces([p.id for p in split_prompts], spaces_for_prompts(split_prompts, 5, bins))
        spaces.save(root / f"{name}_spaces.npz")
        trie_set_for_spaces(tokenizer, spaces).save(root / f"{name}_tries.npz")
    return root


def _job(root: Path, name: str, objective: str, **recipe) -> TrainJob:
    data = "train_tries.npz" if objective == "soft" else "train_spaces.npz"
    return TrainJob(
        model=str(root / "tiny"), tokenizer=str(root / "tiny"), chat=CHAT,
        recipe={
            "objective": objective, "space": "train", "epochs": 2, "samples_per_prompt": 2, "max_steps": 12, **recipe
        },
        training=TRAINING, seed=11, train_data=str(root / data), probe_tries=str(root / "unseen_tries.npz"),
        out_dir=str(root / name / "adapter"), checkpoint_dir=str(root / name / "checkpoints"),
    )  # fmt: skip


def test_gradients_reach_only_the_lora_parameters(workdir):
    tokenizer = load_tokenizer(workdir / "tiny")
    model = attach_lora(load_model(workdir / "tiny", "fp32", "cpu"), LORA)
    tries = TrieSet.load(workdir / "train_tries.npz")
    chosen = select(prompts("train"), list(tries.ids[:4]))
    ids = [chat_prompt_ids(tokenizer, p.prompt, ChatOptions.from_config(CHAT)) for p in chosen]
    values = tries.sample_values(np.arange(4), np.random.default_rng(0))
    loss, _ = soft_batch_loss(model, tries, np.arange(4), ids, tokenizer.pad_token_id, values)
    loss.backward()
    with_grad = {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert with_grad and with_grad <= trainable
    assert all("lora_" in n for n in trainable)
    assert all(p.grad is None for n, p in model.named_parameters() if "lora_" not in n)


@pytest.mark.parametrize("objective", ["soft", "hard"])
def test_resuming_after_preemption_gives_the_uninterrupted_adapter(workdir, monkeypatch, objective):
    run(_job(workdir, f"{objective}_straight", objective))
    straight = load_file(workdir / f"{objective}_straight" / "adapter" / "adapter_model.safetensors")
    run_json = json.loads((workdir / f"{objective}_straight" / "adapter" / "run.json").read_text())
    assert run_json["steps"] == 12 and run_json["job"]["seed"] == 11
    assert {"torch", "transformers", "peft", "accelerate"} <= run_json["versions"].keys()
    assert run_json["unseen_soft_kl_before"] > 0 and run_json["unseen_soft_kl_after"] > 0

    # the same job, killed during step 10 (after the checkpoint of step 8), then started again
    real_step = torch.optim.AdamW.step
    calls = {"n": 0}

    def preempted_step(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 10:
            raise KeyboardInterrupt("preempted")
        return real_step(self, *args, **kwargs)

    job = _job(workdir, f"{objective}_resumed", objective)
    monkeypatch.setattr(torch.optim.AdamW, "step", preempted_step)
    with pytest.raises(KeyboardInterrupt):
        run(job)
    monkeypatch.setattr(torch.optim.AdamW, "step", real_step)
    progress = json.loads((Path(job.checkpoint_dir) / "progress.json").read_text())
    assert progress["step"] == 8 and progress["state"] == "state-8"
    assert sorted(p.name for p in Path(job.checkpoint_dir).glob("state*")) == ["state-8"]
    run(job)
    resumed = load_file(Path(job.out_dir) / "adapter_model.safetensors")
    run_json = json.loads((Path(job.out_dir) / "run.json").read_text())
    assert run_json["attempts"] == [{"resumed_at_step": 0}, {"resumed_at_step": 8}]

    assert straight.keys() == resumed.keys() and straight
    for name in straight:
        torch.testing.assert_close(resumed[name], straight[name], rtol=0, atol=0)
    log = [json.loads(line) for line in (Path(job.out_dir) / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == list(range(1, 13))  # no step lost or logged twice


def test_entry_point_takes_the_job_as_json_text_or_file(tmp_path, monkeypatch):
    import calibft.training.train

    seen = []
    monkeypatch.setattr(calibft.training.train, "run", seen.append)
    job = asdict(_job(tmp_path, "x", "soft"))
    calibft.training.train.main([json.dumps(job)])
    (tmp_path / "job.json").write_text(json.dumps(job))
    calibft.training.train.main([str(tmp_path / "job.json")])
    assert seen == [TrainJob(**job)] * 2


def test_a_checkpoint_of_another_base_model_is_not_resumed(workdir, tmp_path, monkeypatch):
    from safetensors.torch import save_file

    import calibft.training.train

    job = _job(workdir, "cleaned", "soft", max_steps=8)
    run(job)
    assert not Path(job.checkpoint_dir).exists()  # removed once the adapter is saved

    # A run preempted just before saving leaves a checkpoint of its last step...
    model = tmp_path / "tiny"
    shutil.copytree(workdir / "tiny", model)
    stale = replace(job, model=str(model), tokenizer=str(model), checkpoint_dir=str(tmp_path / "ckpt"))

    def preempted(*args):
        raise KeyboardInterrupt("preempted")

    with monkeypatch.context() as patch:
        patch.setattr(calibft.training.train, "_save_adapter", preempted)
        with pytest.raises(KeyboardInterrupt):
            run(stale)
    left = json.loads((tmp_path / "ckpt" / "progress.json").read_text())
    assert left["step"] == 8

    # ...then the base model is rebuilt at the same path with other weights: the job starts afresh.
    weights = load_file(model / "model.safetensors")
    generator = torch.Generator().manual_seed(0)
    save_file({k: v + 0.05 * torch.randn(v.shape, generator=generator) for k, v in weights.items()},
              model / "model.safetensors", metadata={"format": "pt"})  # fmt: skip
    run(stale)
    run_json = json.loads((Path(stale.out_dir) / "run.json").read_text())
    assert run_json["unseen_soft_kl_before"] != left["kl_before"]  # measured on the new base model
    steps = [json.loads(line)["step"] for line in (Path(stale.out_dir) / "train_log.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 9))


@pytest.mark.slow
def test_data_parallel_processes_step_the_schedule_once_per_optimizer_step(workdir, tmp_path):
    """The paper trains on 4 GPUs, each process on its own shard; here 2 CPU processes (gloo). The learning rate
    must follow warmup and cosine over the run's steps, not run num_processes times faster."""
    job = replace(_job(workdir, "two_processes", "soft", max_steps=10), world_size=2)
    (tmp_path / "job.json").write_text(json.dumps(asdict(job)))
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    env = {**os.environ, "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"}
    launched = subprocess.run(
        [*launch, "-m", "calibft.training.train", str(tmp_path / "job.json")], env=env, capture_output=True, text=True
    )
    assert launched.returncode == 0, launched.stderr[-3000:]

    run_json = json.loads((Path(job.out_dir) / "run.json").read_text())
    assert run_json["world_size"] == 2
    steps = run_json["steps"]
    optimizer = torch.optim.AdamW([torch.zeros(1, requires_grad=True)], lr=TRAINING["learning_rate"])
    schedule = get_cosine_schedule_with_warmup(optimizer, int(TRAINING["warmup_fraction"] * steps), steps)
    expected = []
    for _ in range(steps):
        optimizer.step()
        schedule.step()
        expected.append(schedule.get_last_lr()[0])
    log = [json.loads(line) for line in (Path(job.out_dir) / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == list(range(1, steps + 1))
    assert [r["lr"] for r in log] == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_the_adapter_takes_the_base_models_dtype(workdir):
    """FSDP flattens a layer's base and LoRA weights into one tensor: a bf16 base needs bf16 LoRA weights."""
    model = attach_lora(AutoModelForCausalLM.from_pretrained(workdir / "tiny", dtype=torch.bfloat16), LORA)
    dtypes = {(("lora_" in name), p.dtype) for name, p in model.named_parameters()}
    assert dtypes == {(False, torch.bfloat16), (True, torch.bfloat16)}


def test_the_hard_loss_pools_tokens_or_averages_sequences(workdir):
    """The `hard_loss_reduction` switch on the tiny model: one batch, its token-mean and its sequence-mean."""
    tokenizer = load_tokenizer(workdir / "tiny")
    model = load_model(workdir / "tiny", "fp32", "cpu")
    spaces = SpaceSet.load(workdir / "train_spaces.npz")
    items = np.arange(6)
    chosen = select(prompts("train"), list(spaces.ids[:6]))
    ids = [chat_prompt_ids(tokenizer, p.prompt, ChatOptions.from_config(CHAT)) for p in chosen]
    pad = tokenizer.pad_token_id
    values = spaces.sample_values(items, np.random.default_rng(5))
    losses = {
        reduction: hard_batch_loss(model, spaces, items, ids, pad, values, tokenizer, reduction=reduction)[0].item()
        for reduction in ("tokens", "sequences")
    }
    # the same batch by hand: the sampled strings, their tokens, each token's cross-entropy
    completions = tokenize_values(tokenizer, spaces.values[spaces.offsets[items] + values])
    assert len(set(completions.lengths.tolist())) > 1  # completions of different lengths: the reductions differ
    batch = make_batch(ids, completions.tokens, completions.lengths, pad)
    with torch.no_grad():
        logits = completion_logits(model, batch)
    token_ce = torch.nn.functional.cross_entropy(logits.double(), batch.step_target, reduction="none")
    per_sequence = [token_ce[batch.step_example == b].mean().item() for b in range(len(items))]
    assert losses["tokens"] == pytest.approx(token_ce.mean().item(), rel=1e-5)
    assert losses["sequences"] == pytest.approx(np.mean(per_sequence), rel=1e-5)
    assert abs(losses["tokens"] - losses["sequences"]) > 1e-4


@pytest.mark.parametrize("objective", ["soft", "hard"])
def test_logits_dtype_losses_behind_mixed_precision_are_the_pure_bf16_models(workdir, objective):
    """Accelerate's bf16 mixed precision returns float32 logits; under `numerics: logits_dtype` the losses still
    compute in bf16, bit for bit as on the release's pure bf16 model, and under `fp32` in float32."""
    tokenizer = load_tokenizer(workdir / "tiny")
    pure = AutoModelForCausalLM.from_pretrained(workdir / "tiny", dtype=torch.bfloat16)
    mixed = AutoModelForCausalLM.from_pretrained(workdir / "tiny", dtype=torch.bfloat16)
    mixed.forward = convert_outputs_to_fp32(mixed.forward)  # what Accelerator.prepare wraps the forward in
    soft = objective == "soft"
    data = TrieSet.load(workdir / "train_tries.npz") if soft else SpaceSet.load(workdir / "train_spaces.npz")
    items = np.arange(6)
    chosen = select(prompts("train"), list(data.ids[:6]))
    ids = [chat_prompt_ids(tokenizer, p.prompt, ChatOptions.from_config(CHAT)) for p in chosen]

    def loss(model, numerics):
        values, pad = data.sample_values(items, np.random.default_rng(5)), tokenizer.pad_token_id
        with torch.no_grad():
            if soft:
                return soft_batch_loss(model, data, items, ids, pad, values, numerics=numerics)[0]
            return hard_batch_loss(model, data, items, ids, pad, values, tokenizer, numerics=numerics)[0]

    released = loss(pure, "logits_dtype")
    assert released.dtype == torch.bfloat16
    assert torch.equal(loss(mixed, "logits_dtype"), released)
    assert loss(mixed, "fp32").dtype == torch.float32


@pytest.mark.parametrize("objective", ["soft", "hard"])
def test_run_passes_the_protocol_switches_to_the_objectives(workdir, monkeypatch, objective):
    import calibft.training.objectives

    seen = []

    def recorder(real):
        def call(*args, **kwargs):
            if torch.is_grad_enabled():  # a training step, not the KL probe
                seen.append({k: kwargs[k] for k in ("reduction", "numerics") if k in kwargs})
            return real(*args, **kwargs)

        return call

    objectives = calibft.training.objectives
    monkeypatch.setattr(objectives, "soft_target_kl", recorder(objectives.soft_target_kl))
    monkeypatch.setattr(objectives, "completion_cross_entropy", recorder(objectives.completion_cross_entropy))
    for switches in ({"numerics": "fp32", "hard_loss_reduction": "sequences"}, {}):
        protocol = resolve({"switches": switches})
        expected = {"numerics": protocol["numerics"]}
        if objective == "hard":
            expected["reduction"] = protocol["hard_loss_reduction"]
        seen.clear()
        run(replace(_job(workdir, f"{objective}_protocol", objective, max_steps=2), protocol=protocol))
        assert seen == [expected, expected]


@pytest.fixture(scope="module")
def soft_8_steps(workdir) -> TrainJob:
    """An uninterrupted soft run of 8 steps (checkpoints at 4 and 8)."""
    job = _job(workdir, "soft_8_steps", "soft", max_steps=8)
    run(job)
    return job


def _assert_trained_as(job: TrainJob, reference: TrainJob) -> None:
    """The same adapter bytes and the same steps, losses and learning rates."""
    adapters = [(Path(j.out_dir) / "adapter_model.safetensors").read_bytes() for j in (job, reference)]
    assert adapters[0] == adapters[1]
    logs = [read_jsonl(Path(j.out_dir) / "train_log.jsonl") for j in (job, reference)]
    assert [(r["step"], r["loss"], r["lr"]) for r in logs[0]] == [(r["step"], r["loss"], r["lr"]) for r in logs[1]]


def test_a_kill_while_a_checkpoint_is_written_resumes_from_the_previous_one(soft_8_steps, monkeypatch):
    """progress.json names a state only once every file of it is written: a kill in between leaves the previous
    checkpoint in force, and the half-written state is replaced."""
    import calibft.training.train

    job = replace(
        soft_8_steps, out_dir=f"{soft_8_steps.out_dir}_killed", checkpoint_dir=f"{soft_8_steps.checkpoint_dir}_killed"
    )
    real_write = calibft.training.train.write_json

    def killed(path, obj):
        if Path(path).name == "progress.json" and obj["step"] == 8:
            raise KeyboardInterrupt("killed while saving")
        return real_write(path, obj)

    with monkeypatch.context() as patch:
        patch.setattr(calibft.training.train, "write_json", killed)
        with pytest.raises(KeyboardInterrupt):
            run(job)
    checkpoints = Path(job.checkpoint_dir)
    assert json.loads((checkpoints / "progress.json").read_text())["state"] == "state-4"
    assert sorted(p.name for p in checkpoints.glob("state*")) == ["state-4", "state-8"]
    run(job)
    _assert_trained_as(job, soft_8_steps)
    assert json.loads((Path(job.out_dir) / "run.json").read_text())["attempts"][-1] == {"resumed_at_step": 4}


def test_a_run_near_its_time_limit_checkpoints_stops_and_resumes(soft_8_steps, monkeypatch):
    import calibft.training.train

    class AlmostOutOfTime:  # Slurm's time limit comes within the margin after step 6
        steps = 0

        def reached(self):
            self.steps += 1
            return self.steps == 6

    job = replace(
        soft_8_steps, out_dir=f"{soft_8_steps.out_dir}_timed", checkpoint_dir=f"{soft_8_steps.checkpoint_dir}_timed"
    )
    with monkeypatch.context() as patch:
        patch.setattr(calibft.training.train.TimeLimit, "of_this_job", lambda margin: AlmostOutOfTime())
        with pytest.raises(SystemExit, match="stopped after step 6 of 8, 10 minutes before the Slurm job's time limit"):
            run(job)
    assert json.loads((Path(job.checkpoint_dir) / "progress.json").read_text())["step"] == 6
    run(job)
    _assert_trained_as(job, soft_8_steps)


def test_a_non_finite_loss_stops_the_run_before_its_update(soft_8_steps, monkeypatch):
    import calibft.training.train

    job = replace(
        soft_8_steps, out_dir=f"{soft_8_steps.out_dir}_nan", checkpoint_dir=f"{soft_8_steps.checkpoint_dir}_nan"
    )
    real_loss, calls = calibft.training.train.soft_batch_loss, []

    def diverging(*args, **kwargs):
        loss, tokens = real_loss(*args, **kwargs)
        calls.append(len(calls) + 1)
        return (loss * float("nan") if calls[-1] == 6 else loss), tokens

    with monkeypatch.context() as patch:
        patch.setattr(calibft.training.train, "soft_batch_loss", diverging)
        with pytest.raises(SystemExit, match=r"the loss of step 6 is not finite \(nan on this process\)"):
            run(job)
    assert json.loads((Path(job.checkpoint_dir) / "progress.json").read_text())["step"] == 4
    assert not Path(job.out_dir).exists()


@pytest.mark.slow
def test_a_run_whose_processes_did_not_form_one_group_stops_before_any_step(workdir, tmp_path):
    """A job for 2 processes started as one, and 2 processes launched for GPUs without CUDA (accelerate's
    data-parallel launch then gives each its own group of one): each stops, and nothing is written."""
    job = replace(_job(workdir, "lonely", "soft"), world_size=2)
    with pytest.raises(SystemExit, match=r"2 processes .* 1 were launched, and process 0 is in a group of 1"):
        run(job)
    assert not Path(job.checkpoint_dir).exists()

    (tmp_path / "job.json").write_text(json.dumps(asdict(job)))
    launch = ["-m", "accelerate.commands.launch", "--config_file", "launch/ddp.yaml", "--num_processes", "2"]
    env = {k: v for k, v in os.environ.items() if k != "ACCELERATE_USE_CPU"}
    launched = subprocess.run(
        [sys.executable, *launch, "-m", "calibft.training.train", str(tmp_path / "job.json")],
        env=env, capture_output=True, text=True, cwd=Path(__file__).parents[1],
    )  # fmt: skip
    assert launched.returncode != 0
    assert launched.stderr.count("2 were launched, and process 0 is in a group of 1") == 2, launched.stderr[-3000:]
    assert not Path(job.checkpoint_dir).exists()
