"""The two training objectives and the forward pass they share (docs/method.md, Objectives).

A batch is one prompt and one sampled completion (its tokens, EOS last) per example. Prompts are padded
on the left and completions on the right, so every completion starts in the same column and the logits
that predict completion tokens are the last `width + 1` positions of the sequence: the model computes
the LM head only there (`logits_to_keep`), not over the prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from calibft.data.output_space import SpaceSet
from calibft.data.trie import PathTargets, TrieSet, tokenize_values
from calibft.lm.generation import seed_for

Q_FLOOR = 1e-8  # targets are clamped here and renormalized, as in the authors' loss
NUMERICS = ("logits_dtype", "fp32")  # the `numerics` switch of calibft.core.protocol
HARD_REDUCTIONS = ("tokens", "sequences")  # the `hard_loss_reduction` switch


@dataclass
class CompletionBatch:
    """Model inputs of prompts followed by completions, and where each completion step's logits are."""

    input_ids: torch.Tensor  # [B, T]
    attention_mask: torch.Tensor  # [B, T]
    position_ids: torch.Tensor  # [B, T]
    width: int  # completion columns (the longest completion)
    step_example: torch.Tensor  # [S] example of each flat completion step
    step_column: torch.Tensor  # [S] its column within the completion
    step_target: torch.Tensor  # [S] the completion token it predicts

    def to(self, device: torch.device) -> CompletionBatch:
        return CompletionBatch(**{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in vars(self).items()})

    @property
    def num_tokens(self) -> int:
        return int(self.attention_mask.sum())


def make_batch(
    prompt_ids: Sequence[Sequence[int]],
    completions: np.ndarray,
    lengths: np.ndarray,
    pad_id: int,
    max_len: int | None = None,
) -> CompletionBatch:
    """A CompletionBatch from token-id lists of prompts and a [B, width] completion matrix (-1 padded).

    A sequence longer than `max_len` is an error rather than silently truncated: its completion would lose
    the tokens that the objective trains on.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    longest = max(len(ids) + int(n) for ids, n in zip(prompt_ids, lengths, strict=True))
    if max_len is not None and longest > max_len:
        raise ValueError(f"a prompt with its completion takes {longest} tokens > training.max_seq_len = {max_len}")
    batch, width = len(prompt_ids), int(lengths.max())
    prompt_width = max(map(len, prompt_ids))
    input_ids = torch.full((batch, prompt_width + width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for b, ids in enumerate(prompt_ids):
        input_ids[b, prompt_width - len(ids) : prompt_width] = torch.as_tensor(ids)
        mask[b, prompt_width - len(ids) : prompt_width + lengths[b]] = 1
    in_completion = torch.as_tensor(np.arange(width) < lengths[:, None])
    completion = torch.as_tensor(completions[:, :width], dtype=torch.long)
    input_ids[:, prompt_width:] = torch.where(in_completion, completion, pad_id)
    step_example, step_column = torch.nonzero(in_completion, as_tuple=True)  # example-major, as PathTargets
    return CompletionBatch(
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=(mask.cumsum(1) - 1).clamp(min=0),
        width=width,
        step_example=step_example,
        step_column=step_column,
        step_target=completion[step_example, step_column],
    )


def completion_logits(model, batch: CompletionBatch) -> torch.Tensor:
    """[S, V] logits at every completion step, from one forward pass over prompt and completion."""
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        logits_to_keep=batch.width + 1,  # column 0 sits on the last prompt token and predicts step 0
        use_cache=False,
    )
    return out.logits[batch.step_example, batch.step_column]


def soft_target_kl(
    step_logits: torch.Tensor,
    step_example: torch.Tensor,
    child_step: torch.Tensor,
    child_token: torch.Tensor,
    child_q: torch.Tensor,
    temperature: float = 1.0,
    numerics: str = "fp32",
) -> torch.Tensor:
    """Trie KL of each example: per step sum_v q(v) (log q(v) - log softmax(z / tau)_v) over the trie children
    v, with the softmax over the whole vocabulary (mass outside the children is penalized); mean over the
    steps of the example.

    `numerics` (the `numerics` switch of `calibft.core.protocol`): `fp32` computes in float32 whatever the logits'
    dtype. `logits_dtype` computes in the logits' dtype as the authors' loss does (bf16 on GPUs): z / tau and
    its log-softmax, the targets cast to that dtype before they are clamped and renormalized, q log q and every
    product and difference; each sum (a step's target mass, a step's KL, an example's mean over its steps) is
    accumulated in float32 and rounded once to that dtype, as torch's sum and mean of such a tensor do. The
    result has the logits' dtype then.
    """
    log_pi = step_log_probs(step_logits, temperature, numerics)
    num_steps, num_examples, dtype = len(step_logits), int(step_example.max()) + 1, log_pi.dtype

    def sums(index: torch.Tensor, values: torch.Tensor, size: int) -> torch.Tensor:
        total = torch.zeros(size, device=values.device).index_add_(0, index, values.float())
        return total.to(dtype)

    q = child_q.to(dtype).clamp(min=Q_FLOOR)
    q = q / sums(child_step, q, num_steps)[child_step]
    terms = q * (q.log() - log_pi[child_step, child_token])
    per_step = sums(child_step, terms, num_steps)
    zeros = torch.zeros(num_examples, device=q.device)
    steps = zeros.index_add(0, step_example, torch.ones(num_steps, device=q.device))
    return (zeros.index_add(0, step_example, per_step.float()) / steps).to(dtype)


def step_log_probs(step_logits: torch.Tensor, temperature: float = 1.0, numerics: str = "fp32") -> torch.Tensor:
    """[S, V] log-softmax of each completion step's logits divided by `temperature`, over the whole vocabulary: in
    float32 under `numerics` `fp32`, in the logits' dtype under `logits_dtype` (`soft_target_kl`)."""
    _check(numerics, NUMERICS, "numerics")
    dtype = step_logits.dtype if numerics == "logits_dtype" else torch.float32
    return torch.log_softmax(step_logits.to(dtype) / temperature, dim=-1)


def completion_cross_entropy(
    step_logits: torch.Tensor,
    step_target: torch.Tensor,
    step_example: torch.Tensor | None = None,
    reduction: str = "tokens",
    numerics: str = "fp32",
) -> torch.Tensor:
    """Hard target: cross-entropy of every completion token of the batch, reduced to one number.

    `reduction` (the `hard_loss_reduction` switch of `calibft.core.protocol`): `tokens` is the mean over all the
    batch's completion tokens (a longer completion weighs more), as the authors' loss pools them; `sequences` the
    mean over each example's tokens (`step_example`, required then), then over the examples.

    `numerics` (the `numerics` switch): `fp32` computes in float32; `logits_dtype` in the logits' dtype, as the
    authors' loss calls `F.cross_entropy` on bf16 logits. `tokens` is then that very call (its log-softmax and
    mean in the logits' dtype, accumulated as the device's kernel does); `sequences` takes its per-token values
    and accumulates each mean in float32, rounded once to the logits' dtype.
    """
    _check(reduction, HARD_REDUCTIONS, "reduction")
    _check(numerics, NUMERICS, "numerics")
    logits = step_logits if numerics == "logits_dtype" else step_logits.float()
    if reduction == "tokens":
        return F.cross_entropy(logits, step_target)
    if step_example is None:
        raise ValueError("reduction 'sequences' needs step_example, the example of each completion step")
    per_token = F.cross_entropy(logits, step_target, reduction="none")
    num_examples = int(step_example.max()) + 1
    zeros = torch.zeros(num_examples, device=per_token.device)
    tokens = zeros.index_add(0, step_example, torch.ones_like(per_token, dtype=torch.float32))
    per_example = zeros.index_add(0, step_example, per_token.float()) / tokens
    return per_example.to(logits.dtype).mean()


def _check(value: str, allowed: tuple[str, ...], name: str) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


def loss_logits(model, batch, numerics: str) -> torch.Tensor:
    """The completion steps' logits as the losses take them (`completion_logits`).

    Under `numerics: logits_dtype` they are cast to the dtype of the model's weights: the release trains a pure
    bf16 model, whose logits are bf16, while Accelerate's bf16 mixed precision hands back float32 copies of bf16
    values. The cast is exact, so the loss is the release's bf16 computation. On the CPU (float32) it changes
    nothing.
    """
    logits = completion_logits(model, batch)
    if numerics == "logits_dtype":
        return logits.to(next(model.parameters()).dtype)
    return logits


def soft_path_kl(
    model, tries: TrieSet, items, values, prompt_ids, pad_id, temperature=1.0, max_len=None, numerics="fp32"
):
    """Trie KL of each item along the path of its value `values[i]` (teacher forced), and the batch's tokens;
    `numerics` as in `soft_target_kl`."""
    batch, targets = soft_batch(tries, items, values, prompt_ids, pad_id, max_len)
    device = next(model.parameters()).device
    batch = batch.to(device)
    kl = soft_target_kl(
        loss_logits(model, batch, numerics),
        batch.step_example,
        torch.as_tensor(targets.child_step, device=device),
        torch.as_tensor(targets.child_token, device=device),
        torch.as_tensor(targets.child_q, device=device),
        temperature,
        numerics=numerics,
    )
    return kl, batch.num_tokens


def soft_batch(tries: TrieSet, items, values, prompt_ids, pad_id, max_len=None) -> tuple[CompletionBatch, PathTargets]:
    """The batch of the soft objective (and of the logit KL): each item's prompt followed by the trie path of its
    value `values[i]`, and the path's targets."""
    targets = tries.path_targets(items, values)
    return make_batch([prompt_ids[i] for i in items], targets.tokens, targets.lengths, pad_id, max_len), targets


def hard_batch(spaces: SpaceSet, items, values, prompt_ids, pad_id, tokenizer, max_len=None) -> CompletionBatch:
    """The batch of the hard objective: each item's prompt followed by the tokens of its value `values[i]`, the
    canonical string, and its EOS."""
    completions = tokenize_values(tokenizer, spaces.values[spaces.offsets[items] + values])
    return make_batch([prompt_ids[i] for i in items], completions.tokens, completions.lengths, pad_id, max_len)


def soft_batch_loss(
    model, tries: TrieSet, items, prompt_ids, pad_id, values, temperature=1.0, max_len=None, numerics="fp32"
):
    """Soft objective of one batch: the path of each item's value (drawn from P_Y, `batching.batch_values`), the
    trie KL at each of its steps."""
    kl, tokens = soft_path_kl(model, tries, items, values, prompt_ids, pad_id, temperature, max_len, numerics)
    return kl.mean(), tokens


def hard_batch_loss(
    model,
    spaces: SpaceSet,
    items,
    prompt_ids,
    pad_id,
    values,
    tokenizer,
    max_len=None,
    reduction="tokens",
    numerics="fp32",
):
    """Hard objective of one batch: each item's canonical string (drawn from P_Y, `batching.batch_values`),
    cross-entropy on its tokens (`reduction` and `numerics` as in `completion_cross_entropy`)."""
    batch = hard_batch(spaces, items, values, prompt_ids, pad_id, tokenizer, max_len)
    batch = batch.to(next(model.parameters()).device)
    logits, example = loss_logits(model, batch, numerics), batch.step_example
    loss = completion_cross_entropy(logits, batch.step_target, example, reduction=reduction, numerics=numerics)
    return loss, batch.num_tokens


PATH_SEEDS = ("fixed", "per_prompt")


def fixed_paths(tries: TrieSet, paths: int, seed: int, seeds: str = "per_prompt") -> np.ndarray:
    """[prompts, paths] value indices drawn from each prompt's target.

    `per_prompt`: each prompt with a generator of its own (seed, prompt id), so that a prompt's paths do not
    depend on which other prompts are evaluated. `fixed`: path k of every prompt with `default_rng(seed + k)`,
    one `choice` over the prompt's values in the order of its output space, as the authors' release draws them
    (the `logit_kl_path_seeds` switch of `calibft.core.protocol`).
    """
    if seeds == "per_prompt":
        rows = [
            tries.sample_values(np.full(paths, i), np.random.default_rng(seed_for(seed, str(tries.ids[i]))))
            for i in range(len(tries))
        ]
        return np.stack(rows)
    if seeds != "fixed":
        raise ValueError(f"seeds must be one of {PATH_SEEDS}, got {seeds!r}")
    probs = [tries.value_probs[tries.value_offsets[i] : tries.value_offsets[i + 1]] for i in range(len(tries))]
    return np.array(
        [[np.random.default_rng(seed + k).choice(len(p), p=p) for k in range(paths)] for p in probs], dtype=np.int64
    ).reshape(len(tries), paths)


@torch.no_grad()
def path_kl(
    model,
    tries: TrieSet,
    prompt_ids,
    pad_id,
    paths: int,
    seed: int,
    batch_size: int = 16,
    seeds: str = "per_prompt",
    numerics: str = "fp32",
) -> np.ndarray:
    """[prompts, paths] soft-target KL along `fixed_paths`, teacher forced (the logit KL of docs/metrics.md,
    Structured sampling); `seeds` and `numerics` are the switches `logit_kl_path_seeds` and `numerics` of
    `calibft.core.protocol`."""
    was_training = model.training
    model.eval()
    values = fixed_paths(tries, paths, seed, seeds).ravel()
    items = np.repeat(np.arange(len(tries)), paths)
    kl = np.empty(len(items))
    for start in range(0, len(items), batch_size):
        part = slice(start, start + batch_size)
        part_kl, _ = soft_path_kl(model, tries, items[part], values[part], prompt_ids, pad_id, numerics=numerics)
        kl[part] = part_kl.float().cpu().numpy()
    model.train(was_training)
    return kl.reshape(len(tries), paths)
