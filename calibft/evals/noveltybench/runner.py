"""What NoveltyBench's two jobs run (`python -m calibft.evals.noveltybench generate|score JOB`): `generate` samples
the answers of the model under test to every prompt of one split; `score` loads the benchmark's evaluators, the
similarity classifier and the reward model, scores each prompt's answers with them
(`calibft.evals.noveltybench.metrics.score_prompt`) and writes the split's summary
(`calibft.evals.noveltybench.metrics.split_summary`). The evaluators' functions take their models and tokenizers
as arguments, so that they run with tiny random models and no hub access.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from calibft.core.checkpoints import checkpoint_folder, finish_checkpoints, per_prompt
from calibft.core.io import read_job, read_jsonl, write_json, write_jsonl
from calibft.core.provenance import write_provenance
from calibft.evals.noveltybench.job import GenerationJob, ScoringJob
from calibft.evals.noveltybench.metrics import Classify, score_prompt, split_summary
from calibft.lm.chat import chat_prompt_ids, encode_prompt, strip_model_response
from calibft.lm.generation import sample_texts
from calibft.lm.models import load_classifier, load_tokenizer

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


def load_prompts(path: str | Path, split: str) -> list[dict]:
    """The prompts of one split: {id, split, category, prompt} per line of a NoveltyBench JSON-lines file.

    A line without an id gets `{split}-{line number}`; ids must be unique and prompts non-empty strings.
    """
    rows = []
    for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}, line {i + 1}: not JSON ({err})") from err
        prompt = row.get("prompt") if isinstance(row, dict) else None
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"{path}, line {i + 1}: expected an object with a non-empty string `prompt`")
        rows.append(
            {
                "id": str(row.get("id", f"{split}-{i}")),
                "split": split,
                "category": row.get("category"),
                "prompt": prompt,
            }
        )
    if not rows:
        raise ValueError(f"{path}: no prompts")
    ids = [row["id"] for row in rows]
    duplicates = sorted({x for x in ids if ids.count(x) > 1})
    if duplicates:
        raise ValueError(f"{path}: duplicate prompt ids {duplicates[:5]}")
    return rows


def generate(job: GenerationJob) -> None:
    prompts = load_prompts(job.prompts_file, job.split)[: job.max_prompts]
    tokenizer, model = job.load()
    options, settings = job.chat_options(), job.settings()
    checkpoint = checkpoint_folder(job)
    reasoning = job.protocol["answer_reasoning"]
    records = []
    for row in tqdm(prompts, desc=f"noveltybench {job.model_key}/{job.condition}/{job.split}"):

        def draw(row=row):
            ids = chat_prompt_ids(tokenizer, row["prompt"], options, bos=job.protocol["prompt_bos"])
            seed = job.seed_of("noveltybench", row["id"])
            texts, finished = sample_texts(model, tokenizer, ids, settings, seed, reasoning=reasoning)
            if reasoning == "release":  # what the release's backend hands on (noveltybench/evaluate.py, line 281)
                texts = [strip_model_response(text, job.release_strips_thinking) for text in texts]
            return [{**row, "generations": texts, "finished": finished.tolist()}]

        records.extend(per_prompt(checkpoint, row["id"], draw))
    write_jsonl(Path(job.out_dir) / "generations.jsonl.gz", records)
    job.write_provenance(model, tokenizer, job.generation(), prompts=job.prompts_file)
    finish_checkpoints(checkpoint)


CLASSIFIER_THRESHOLD = 0.102
CLASSIFIER_MAX_SIDE = 128


def classifier_inputs(
    tokenizer: PreTrainedTokenizerBase, a: str, b: str, max_side: int = CLASSIFIER_MAX_SIDE
) -> list[int]:
    """[CLS] + first `max_side` tokens of a + [SEP] + first `max_side` tokens of b + [SEP]."""
    side_a = tokenizer.encode(a, add_special_tokens=False)[:max_side]
    side_b = tokenizer.encode(b, add_special_tokens=False)[:max_side]
    return [tokenizer.cls_token_id, *side_a, tokenizer.sep_token_id, *side_b, tokenizer.sep_token_id]


def similarity_probability(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, a: str, b: str) -> float:
    """The classifier's probability that a and b are equivalent: softmax(logits)[1] of the pair."""
    import torch

    ids = torch.tensor([classifier_inputs(tokenizer, a, b)], device=model.device)
    return float(pair_probabilities(model, ids)[0, 1])


def pair_probabilities(model: PreTrainedModel, ids: torch.Tensor) -> torch.Tensor:
    """float32 [pairs, 2] softmax of the classifier's logits for `ids` ([pairs, tokens] of `classifier_inputs`)."""
    import torch

    with torch.no_grad():
        # a pair has no padding: the all-ones mask that DeBERTa makes when given none, passed so that it does not
        # look for padding in the ids (which it cannot on the meta device)
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    return logits.float().softmax(-1)


def similarity_classifier(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, threshold: float = CLASSIFIER_THRESHOLD
) -> Classify:
    """`classify(a, b)` for `metrics.partition`: the similarity probability above `threshold` (the model in eval
    mode)."""
    model.eval()
    return lambda a, b: similarity_probability(model, tokenizer, a, b) > threshold


def reward_ids(
    tokenizer: PreTrainedTokenizerBase, conversation: Sequence[Mapping[str, str]], bos: str = "single"
) -> list[int]:
    """The reward model's input ids of one chat: its chat template rendered as text, then encoded.

    `bos` (the `noveltybench_reward_bos` switch of `calibft.core.protocol`): `single` encodes the text as NoveltyBench
    tokenizes inside `apply_chat_template`, so one BOS where the template writes one; `doubled` encodes it with
    the tokenizer's special tokens whatever it holds, as the authors' release does: two BOS for the Gemma-2
    reward model, whose template writes one (`calibft.lm.chat.encode_prompt`).
    """
    text = tokenizer.apply_chat_template(list(conversation), tokenize=False)
    return encode_prompt(tokenizer, text, bos)


def reward_scores(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    conversations: Sequence[Sequence[Mapping[str, str]]],
    batch_size: int = 8,
    bos: str = "single",
) -> np.ndarray:
    """Reward of each chat ([user prompt, assistant generation]) from a sequence-classification reward model,
    encoded by `reward_ids` with `bos`.

    Batches are padded on the tokenizer's padding side with the model's `pad_token_id`, which its own pooling
    uses to find each sequence's last real token; position ids count real tokens only, so a sequence scores
    the same alone, left padded or right padded. Sequences are batched by length, results come back in order.
    """
    import torch

    encoded = [reward_ids(tokenizer, c, bos) for c in conversations]
    pad_id = model.config.get_text_config().pad_token_id
    if pad_id is None and batch_size > 1:
        raise ValueError("the reward model has no pad_token_id: batches of more than one sequence cannot be pooled")
    if pad_id is not None and any(ids[-1] == pad_id for ids in encoded):
        raise ValueError("a conversation ends with the pad token: the model's pooling would skip it")
    left = tokenizer.padding_side == "left"
    order = np.argsort([len(ids) for ids in encoded], kind="stable")
    scores = np.empty(len(encoded))
    model.eval()
    for start in range(0, len(order), batch_size):
        batch = [encoded[i] for i in order[start : start + batch_size]]
        width = max(len(ids) for ids in batch)
        input_ids = torch.full((len(batch), width), pad_id if pad_id is not None else 0, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, ids in enumerate(batch):
            cols = slice(width - len(ids), width) if left else slice(0, len(ids))
            input_ids[row, cols] = torch.tensor(ids)
            mask[row, cols] = 1
        scores[order[start : start + batch_size]] = reward_batch(model, input_ids, mask).cpu().numpy()
    return scores


def reward_batch(model: PreTrainedModel, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """float32 [rows] rewards of one padded batch of `reward_scores` (`mask` 1 on the real tokens), on the model's
    device; position ids count real tokens only."""
    import torch

    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(
            input_ids=input_ids.to(model.device),
            attention_mask=mask.to(model.device),
            position_ids=position_ids.to(model.device),
        ).logits
    return logits[:, 0].float()


def largest_scoring_step(
    reward_model: PreTrainedModel,
    classifier: PreTrainedModel,
    rows: int,
    tokens: int,
    max_side: int = CLASSIFIER_MAX_SIDE,
) -> None:
    """The largest batches `score` runs, one after the other as it runs them, on token ids of zeros (the meta
    device for the memory estimate): `rows` chats of `tokens` tokens through the reward model (`reward_batch`),
    then one pair of generations of `max_side` tokens each through the similarity classifier
    (`pair_probabilities`; [CLS] a [SEP] b [SEP])."""
    import torch

    ids = torch.zeros(rows, tokens, dtype=torch.long)
    reward_batch(reward_model, ids, torch.ones_like(ids))
    pair_probabilities(classifier, torch.zeros(1, 2 * max_side + 3, dtype=torch.long, device=classifier.device))


def score(job: ScoringJob) -> None:
    started = time.time()
    generations = read_jsonl(job.generations)
    # The similarity classifier runs in fp32 whatever the precision, as upstream's partition.py loads it: its
    # fixed 0.102 threshold on P(equivalent) is sensitive to bf16 rounding. The reward model follows `precision`.
    classify = similarity_classifier(load_classifier(job.classifier, "fp32"), load_tokenizer(job.classifier_tokenizer))
    reward_model, reward_tokenizer = load_classifier(job.reward_model, job.precision), load_tokenizer(job.reward_model)
    checkpoint = checkpoint_folder(job)
    rows = []
    for record in tqdm(generations, desc=f"noveltybench scores {job.model_key}/{job.condition}/{job.split}"):

        def scored(record=record):
            texts = record["generations"]
            chats = [
                [{"role": "user", "content": record["prompt"]}, {"role": "assistant", "content": t}] for t in texts
            ]
            bos = job.protocol["noveltybench_reward_bos"]
            rewards = reward_scores(reward_model, reward_tokenizer, chats, job.reward_batch_size, bos)
            return [{**record, "rewards": rewards.tolist(), **score_prompt(texts, rewards, classify)}]

        rows.extend(per_prompt(checkpoint, record["id"], scored))
    out = Path(job.out_dir)
    write_jsonl(out / "partitions.jsonl", [{"id": row["id"], "class_ids": row["class_ids"]} for row in rows])
    write_jsonl(out / "scores.jsonl", rows)
    header = {
        "evaluation": "noveltybench",
        "model": job.model_key,
        "condition": job.condition,
        "split": job.split,
        "wall_time_s": time.time() - started,
        "job": asdict(job),
    }
    write_json(out / "summary.json", {**header, **split_summary(rows, job.split)})
    inputs = {"generations": job.generations, "classifier": job.classifier, "reward_model": job.reward_model}
    write_provenance(out, job, inputs=inputs, loaded={"reward_model": reward_model})
    finish_checkpoints(checkpoint)


COMMANDS = {"generate": (GenerationJob, generate), "score": (ScoringJob, score)}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        sys.exit(f"usage: python -m calibft.evals.noveltybench {{{'|'.join(COMMANDS)}}} JOB")
    job_type, command = COMMANDS[argv[0]]
    command(read_job(job_type, f"calibft.evals.noveltybench {argv[0]}", argv[1:]))
