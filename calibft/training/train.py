"""Calibration Fine-Tuning: one training loop for the soft-target and hard-target objectives.

    python -m calibft.training.train JOB.json            # one process (CPU or one GPU)
    accelerate launch --config_file launch/fsdp.yaml --num_processes 4 -m calibft.training.train JOB.json

JOB is a `TrainJob` as JSON (text or file); rule train writes it from the config.

Read top to bottom: load the base model and attach LoRA; encode the prompts; for every epoch take the
family-balanced order, this rank's shard and its batches; for every batch sample one canonical answer
per item, compute the objective from one forward pass, step. Every `checkpoint_every` steps the full
state goes to the checkpoint folder, and a restarted job continues from there to the same adapter. The folder
is stamped with the job and its base model's files, so that a different job never resumes from it, and it is
removed once the adapter is saved. Inside a Slurm job, a run that comes within `stop_before_time_limit`
minutes of the job's time limit writes a checkpoint and stops, for its retry to resume.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from calibft.core.checkpoints import checkpoint_folder, finish_checkpoints
from calibft.core.io import atomic_path, read_job, read_jsonl, write_json
from calibft.core.provenance import package_versions, write_provenance
from calibft.core.time_limit import TimeLimit
from calibft.data.grid import prompts, select
from calibft.data.output_space import SpaceSet
from calibft.data.trie import TrieSet
from calibft.lm.chat import ChatOptions, chat_prompt_ids, on_chat_date
from calibft.lm.models import attach_lora, load_model, load_tokenizer, padding_id
from calibft.training.batching import batch_values, batches, epoch_items, shard, total_steps
from calibft.training.job import TrainJob
from calibft.training.objectives import hard_batch_loss, path_kl, soft_batch_loss

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def _probe_kl(model, probe: TrieSet, probe_ids, pad_id, job: TrainJob) -> float:
    """The before/after KL of run.json: the mean logit KL over the unseen prompts."""
    switches = {"seeds": job.protocol["logit_kl_path_seeds"], "numerics": job.protocol["numerics"]}
    return float(path_kl(model, probe, probe_ids, pad_id, job.training.kl_probe_paths, job.seed, **switches).mean())


def _progress(checkpoint_dir: Path) -> dict:
    """The last checkpoint: its step and the folder of its state; step 0 where none was written."""
    path = checkpoint_dir / "progress.json"
    return json.loads(path.read_text()) if path.exists() else {"step": 0}


def check_process_group(accelerator, world_size: int) -> None:
    """Stop unless this process is one of a group of `world_size` (the job's processes, one per GPU). Launched
    processes that find no working CUDA device do not form a group: each would train alone, all into the same
    checkpoint folder."""
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if accelerator.num_processes == world_size == launched:
        return
    cuda = f"torch.cuda.is_available() is {torch.cuda.is_available()} with {torch.cuda.device_count()} devices"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
    raise SystemExit(
        f"calibft.training.train: this run trains with {world_size} processes (the model's resources.gpus), {launched} "
        f"were launched, and process {accelerator.process_index} is in a group of {accelerator.num_processes} "
        f"({cuda}; CUDA_VISIBLE_DEVICES={visible}). The processes did not form one group, so each would train "
        "alone into the same checkpoint folder: stopping before any step. Run it where the GPUs work, or set "
        "the model's resources.gpus to the GPUs there (0 trains one process on the CPU)."
    )


def _agreed(accelerator, flag: bool) -> bool:
    """True on every process when it is True on any (the processes must stop at the same step)."""
    if accelerator.num_processes == 1:
        return flag
    return bool(accelerator.reduce(torch.tensor(float(flag), device=accelerator.device), reduction="max").item())


def _check_finite(accelerator, loss: float, step: int, precision: str) -> None:
    """Stop every process before the update when the loss of any is NaN or infinite: one such update makes the
    adapter non-finite, and every evaluation of it fails."""
    if _agreed(accelerator, not math.isfinite(loss)):
        raise SystemExit(
            f"calibft.training.train: the loss of step {step} is not finite ({loss} on this process), so training "
            f"stops before its update. It diverged or overflowed in {precision} (training.precision). Its last "
            f"checkpoint is kept, and a retry with the same settings meets the same step: "
            f"lower training.learning_rate or train in fp32, and remove the job's checkpoint folder to start afresh"
        )


def run(job: TrainJob) -> None:
    from accelerate import Accelerator
    from transformers import get_cosine_schedule_with_warmup

    training, recipe = job.training, job.recipe
    started = time.time()
    use_gpu = torch.cuda.is_available()
    # The scheduler steps once per optimizer step. Accelerate would step it once per process, for the larger
    # batches of its own data loader, but every process here takes its own shard of the items.
    accelerator = Accelerator(
        mixed_precision="bf16" if use_gpu and training.precision == "bf16" else "no",
        step_scheduler_with_optimizer=False,
    )
    check_process_group(accelerator, job.world_size)
    torch.manual_seed(job.seed)

    tokenizer = load_tokenizer(job.tokenizer)
    pad_id = padding_id(tokenizer)
    model = load_model(job.model, training.precision, "cuda" if use_gpu else "cpu")
    model = attach_lora(model, training.lora)
    options = on_chat_date(ChatOptions.from_config(job.chat), job.protocol["chat_date"])

    # the training data, and every prompt encoded once
    soft = recipe.objective == "soft"
    data = TrieSet.load(job.train_data) if soft else SpaceSet.load(job.train_data)
    chosen = select(prompts("train"), list(data.ids))
    bos = job.protocol["prompt_bos"]
    prompt_ids = [chat_prompt_ids(tokenizer, p.prompt, options, bos=bos) for p in chosen]
    probe = TrieSet.load(job.probe_tries)
    probe_prompts = select(prompts("unseen"), list(probe.ids))
    probe_ids = [chat_prompt_ids(tokenizer, p.prompt, options, bos=bos) for p in probe_prompts]
    families = [p.family for p in chosen]

    world, rank, batch_size = job.world_size, accelerator.process_index, training.per_device_batch_size
    steps = total_steps(len(chosen), recipe.epochs, recipe.samples_per_prompt, recipe.max_steps, batch_size, world)
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=training.learning_rate,
        weight_decay=training.weight_decay,
    )
    # warmup steps rounded down, as the authors' training loop does (5 of the 189 soft steps)
    scheduler = get_cosine_schedule_with_warmup(optimizer, int(training.warmup_fraction * steps), steps)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)

    # resume from the last checkpoint, if a previous attempt of this job (same settings, same base model) left one
    checkpoint_dir = Path(job.checkpoint_dir)
    if accelerator.is_main_process:
        checkpoint_folder(job)  # empties one left by a different job
    accelerator.wait_for_everyone()
    progress = _progress(checkpoint_dir)
    log_path = checkpoint_dir / "train_log.jsonl"
    if progress["step"] > 0:
        accelerator.load_state(str(checkpoint_dir / progress["state"]))
        kept = [r for r in read_jsonl(log_path) if r["step"] <= progress["step"]] if log_path.exists() else []
        accelerator.print(f"resuming at step {progress['step']} of {steps}")
    else:
        kept = []
        progress["kl_before"] = _probe_kl(model, probe, probe_ids, pad_id, job)
    if accelerator.is_main_process:
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        log_path.write_text("".join(json.dumps(r) + "\n" for r in kept))
    attempts = Attempts(checkpoint_dir, progress["step"], started, write=accelerator.is_main_process)
    time_limit = TimeLimit.of_this_job(training.stop_before_time_limit)

    model.train()
    max_len, step = training.max_seq_len, 0
    for epoch in range(recipe.epochs):
        items = shard(epoch_items(families, recipe.samples_per_prompt, job.seed, epoch), rank, world)
        for batch_index, batch_items in enumerate(batches(items, batch_size)):
            step += 1
            if step > steps:
                break
            if step <= progress["step"]:
                continue  # done before the restart
            tick = time.perf_counter()
            values = batch_values(
                data, batch_items, job.protocol["training_draw_seeds"], job.seed, epoch, batch_index, rank,
                batch_size, world,
            )  # fmt: skip
            if soft:
                loss, tokens = soft_batch_loss(
                    model, data, batch_items, prompt_ids, pad_id, values, recipe.temperature, max_len,
                    numerics=job.protocol["numerics"],
                )  # fmt: skip
            else:
                loss, tokens = hard_batch_loss(
                    model, data, batch_items, prompt_ids, pad_id, values, tokenizer, max_len,
                    reduction=job.protocol["hard_loss_reduction"], numerics=job.protocol["numerics"],
                )  # fmt: skip
            loss_value = loss.item()  # one host sync, for the check and the log
            _check_finite(accelerator, loss_value, step, training.precision)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            if accelerator.is_main_process:
                record = {
                    "step": step,
                    "epoch": epoch,
                    "loss": loss_value,
                    "lr": scheduler.get_last_lr()[0],
                    "tokens_per_s": tokens * world / (time.perf_counter() - tick),
                }
                with open(log_path, "a") as log:
                    log.write(json.dumps(record) + "\n")
                attempts.alive()
            out_of_time = step < steps and _agreed(accelerator, time_limit.reached())
            if step % training.checkpoint_every == 0 or step == steps or out_of_time:
                _checkpoint(accelerator, checkpoint_dir, {**progress, "step": step})
            if out_of_time:
                raise SystemExit(
                    f"calibft.training.train: stopped after step {step} of {steps}, "
                    f"{training.stop_before_time_limit} minutes before the Slurm job's time limit "
                    f"(training.stop_before_time_limit); its checkpoint is written, and a retry of this job resumes "
                    f"from it"
                )

    kl_after = _probe_kl(model, probe, probe_ids, pad_id, job)
    _save_adapter(accelerator, model, job, log_path, steps, progress["kl_before"], kl_after, attempts)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        finish_checkpoints(checkpoint_dir)  # the adapter is saved: a later run starts afresh


def _checkpoint(accelerator, checkpoint_dir: Path, progress: dict) -> None:
    """The full training state of this step, in a folder of its own. progress.json, replaced atomically once every
    process has saved, names it, so it only ever names a complete state; the older states are removed after."""
    state = f"state-{progress['step']}"
    if accelerator.is_main_process:
        shutil.rmtree(checkpoint_dir / state, ignore_errors=True)  # half written by a killed attempt
    accelerator.wait_for_everyone()
    accelerator.save_state(str(checkpoint_dir / state))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        write_json(checkpoint_dir / "progress.json", {**progress, "state": state})
        for old in checkpoint_dir.glob("state*"):
            if old.name != state:
                shutil.rmtree(old)
    accelerator.wait_for_everyone()


class Attempts:
    """The wall time of every attempt of a run (attempts.json in the checkpoint folder): when each started, at
    which step, and when it last finished a step, so that run.json counts the attempts that a preemption or a
    time limit ended."""

    def __init__(self, checkpoint_dir: Path, resumed_at: int, started: float, write: bool):
        self.path, self.write = checkpoint_dir / "attempts.json", write
        self.records = json.loads(self.path.read_text()) if self.path.exists() else []
        self.records.append({"started": started, "resumed_at_step": resumed_at, "last_step_done": started})
        self.alive()

    def alive(self) -> None:
        self.records[-1]["last_step_done"] = time.time()
        if self.write:
            write_json(self.path, self.records)

    def wall_time_s(self) -> float:
        """The earlier attempts up to their last step, and this one until now."""
        earlier = sum(r["last_step_done"] - r["started"] for r in self.records[:-1])
        return earlier + time.time() - self.records[-1]["started"]


def _save_adapter(accelerator, model, job: TrainJob, log_path: Path, steps, kl_before, kl_after, attempts) -> None:
    state_dict = accelerator.get_state_dict(model)  # gathers the shards under FSDP
    if not accelerator.is_main_process:
        return
    out = Path(job.out_dir)
    staging = out.parent / f".{out.name}.staging"
    shutil.rmtree(staging, ignore_errors=True)
    accelerator.unwrap_model(model).save_pretrained(staging, state_dict=state_dict)
    out.mkdir(parents=True, exist_ok=True)
    for name in ADAPTER_FILES:
        (staging / name).replace(out / name)
    shutil.rmtree(staging)
    with atomic_path(out / "train_log.jsonl") as tmp:
        shutil.copyfile(log_path, tmp)
    write_json(
        out / "run.json",
        {
            "job": asdict(job),
            "steps": steps,
            "world_size": accelerator.num_processes,
            "wall_time_s": attempts.wall_time_s(),
            "attempts": [{"resumed_at_step": r["resumed_at_step"]} for r in attempts.records],
            "unseen_soft_kl_before": kl_before,
            "unseen_soft_kl_after": kl_after,
            "versions": package_versions(),
        },
    )
    inputs = {"train_data": job.train_data, "probe_tries": job.probe_tries}
    write_provenance(out, job, inputs=inputs, seeds={"seed": job.seed})


def main(argv: list[str] | None = None) -> None:
    """`python -m calibft.training.train JOB`, where JOB is a TrainJob as JSON text or the path of a JSON file."""
    run(read_job(TrainJob, "calibft.training.train", sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
