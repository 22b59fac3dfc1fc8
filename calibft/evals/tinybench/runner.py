"""The TinyBenchmarks runner: the 100 item scores of each tiny benchmark of a `TinyBenchJob`, in dataset row
order, scored in checkpointed chunks (`run_task`, `score_task`), then with the IRT parameters each row's gp-IRT
(`calibft.evals.tinybench.summary`). docs/tinybench.md specifies the tasks, their prompts and scores, GSM8K's
decoding and answer extraction, the outputs and the sources of the datasets' facts.

    python -m calibft.evals.tinybench JOB     # JOB: a TinyBenchJob as JSON text or file
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tqdm import tqdm

from calibft.core.checkpoints import checkpoint_folder, finish_checkpoints, per_prompt
from calibft.core.checks import check_choice
from calibft.core.io import read_job, read_jsonl, write_json, write_jsonl
from calibft.evals.bootstrap import REPLICATES
from calibft.evals.tinybench import gpirt
from calibft.evals.tinybench.choices import choice_requests, continuation_logliks, joint_request, score_choices
from calibft.evals.tinybench.generate import GREEDY, STOP_STRINGS, Decoding, generate_answers
from calibft.evals.tinybench.gsm8k import GSM8K_EXTRACTIONS, gsm8k_answers, gsm8k_text
from calibft.evals.tinybench.job import TINYBENCH_BATCH_SIZE, TINYBENCH_MAX_NEW_TOKENS, TinyBenchJob
from calibft.evals.tinybench.summary import gpirt_summary, summarize
from calibft.evals.tinybench.tasks import TINYBENCH_TASKS, item_field, task_spec
from calibft.lm.chat import ChatOptions, chat_prompt_ids, format_prompt

# Items scored together and kept as one checkpoint of a resumable job.
ITEMS_PER_CHECKPOINT = 25


def score_task(
    model,
    tokenizer,
    options: ChatOptions,
    task: str,
    items: Sequence[Mapping],
    batch_size: int = TINYBENCH_BATCH_SIZE,
    max_new_tokens: int = TINYBENCH_MAX_NEW_TOKENS,
    first_index: int = 0,
    *,
    gsm8k_extraction: str,
    prompt_bos: str = "single",
    decoding: Decoding = GREEDY,
    numerics: str = "fp32",
    text_rule: str = "lm_eval",
    answer_reasoning: str = "strip_reasoning",
    release_strips_thinking: bool = False,
) -> list[dict]:
    """One record per item, in the given order: index (first_index + position), score, the task's metric
    fields and what they came from (log-likelihoods, or the generation and its answers). GSM8K answers are
    extracted by `gsm8k_extraction` (one of `GSM8K_EXTRACTIONS`; see `gsm8k_answers`) from answers decoded by
    `decoding` (`generate_answers`) and cleaned of reasoning by `answer_reasoning` (`gsm8k_text`, with the model's
    `release_strips_thinking`); prompts are encoded with `prompt_bos` (`calibft.lm.chat.encode_prompt`);
    log-likelihoods are computed under `numerics` (`continuation_logliks`) of the requests that `text_rule` (the
    switch `tinybench_text`) builds (`choice_requests`)."""
    check_choice("GSM8K extraction", gsm8k_extraction, GSM8K_EXTRACTIONS)
    if task_spec(task).loglik:
        return _score_loglik_items(
            model, tokenizer, options, task, items, batch_size, first_index, prompt_bos, numerics, text_rule
        )
    return _score_generated_items(
        model, tokenizer, options, task, items, batch_size, max_new_tokens, first_index, gsm8k_extraction, prompt_bos,
        decoding, answer_reasoning, release_strips_thinking,
    )  # fmt: skip


def _score_loglik_items(
    model, tokenizer, options, task, items, batch_size, first_index, bos, numerics, text_rule
) -> list[dict]:
    """Every choice of every item in one batched `continuation_logliks` call; each user message formatted once,
    each choice's ids from its formatted prompt and continuation encoded together (`joint_request`)."""
    metric = TINYBENCH_TASKS[task].metrics[0]
    per_item = [choice_requests(task, row, text_rule) for row in items]
    prompts: dict[str, str] = {}
    requests = []
    for pairs in per_item:
        for message, continuation in pairs:
            if message not in prompts:
                prompts[message] = format_prompt(tokenizer, message, options)
            requests.append(joint_request(tokenizer, prompts[message], continuation, bos))
    logliks = continuation_logliks(model, tokenizer, requests, batch_size, numerics)
    records, at = [], 0
    for k, (row, pairs) in enumerate(zip(items, per_item, strict=True)):
        fields = score_choices(task, row, logliks[at : at + len(pairs)], text_rule)
        at += len(pairs)
        records.append({"index": first_index + k, "score": float(fields[metric]), **fields})
    return records


def _score_generated_items(
    model, tokenizer, options, task, items, batch_size, max_new_tokens, first_index, extraction, bos, decoding,
    reasoning, strips_thinking,
):  # fmt: skip
    """GSM8K answers decoded by `decoding`, cleaned of reasoning by `reasoning` (`gsm8k_text`), scored strict and
    flexible under the answer extraction `extraction`."""
    metric = TINYBENCH_TASKS[task].metrics[0]
    prompts = [
        chat_prompt_ids(tokenizer, item_field(row, "input_formatted", first_index + k), options, bos=bos)
        for k, row in enumerate(items)
    ]
    generations = generate_answers(
        model, tokenizer, prompts, max_new_tokens, STOP_STRINGS, batch_size, decoding, reasoning
    )
    records = []
    for k, (row, (raw, finished)) in enumerate(zip(items, generations, strict=True)):
        text = gsm8k_text(raw, reasoning, strips_thinking)
        answer = item_field(row, "answer", first_index + k)
        fields = gsm8k_answers(text, answer, extraction)
        records.append(
            {
                "index": first_index + k,
                "score": float(fields[metric]),
                **fields,
                "extraction": extraction,
                "generation": text,
                "finished": finished,
            }
        )
    return records


def load_items(path: str | Path) -> list[dict]:
    """The rows of an items file (JSON lines, gzip-compressed when named `.gz`), in file order."""
    rows = read_jsonl(path)
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"{path}: line {i + 1} is not a JSON object")
    if not rows:
        raise ValueError(f"{path}: no items")
    return rows


def gsm8k_decoding(job: TinyBenchJob, first_index: int) -> Decoding:
    """The decoding of the GSM8K items from `first_index` on (one checkpoint chunk): greedy, or what the
    generation settings in force make of a greedy request (`ModelJob.generation(sampling=False)`), seeded per
    chunk so that a resumed job draws the same answers."""
    seed = job.seed_of("tinybench", f"gsm8k_{first_index}")
    return Decoding.from_generation(job.generation(sampling=False), seed)


def run_task(job: TinyBenchJob, model, tokenizer, task: str, folder: Path | None) -> dict:
    """Score one task's items (in checkpointed chunks) and write `{out_dir}/{task}/items.jsonl` and
    `scores.json`; returns the scores.json content."""
    started = time.time()
    items = load_items(job.tasks[task])
    options = job.chat_options()
    records = []
    chunks = range(0, len(items), ITEMS_PER_CHECKPOINT)
    for begin in tqdm(chunks, desc=f"tinybench {job.model_key}/{job.condition} {task}", unit="chunk"):
        chunk = items[begin : begin + ITEMS_PER_CHECKPOINT]
        produce = functools.partial(
            score_task,
            model,
            tokenizer,
            options,
            task,
            chunk,
            job.batch_size,
            job.max_new_tokens,
            begin,
            gsm8k_extraction=job.protocol["gsm8k_extraction"],
            prompt_bos=job.protocol["prompt_bos"],
            decoding=GREEDY if TINYBENCH_TASKS[task].loglik else gsm8k_decoding(job, begin),
            numerics=job.protocol["numerics"],
            text_rule=job.protocol["tinybench_text"],
            answer_reasoning=job.protocol["answer_reasoning"],
            release_strips_thinking=job.release_strips_thinking,
        )
        records.extend(per_prompt(folder, f"{task}_{begin:04d}", produce))
    out = Path(job.out_dir) / task
    write_jsonl(out / "items.jsonl", records)
    spec = TINYBENCH_TASKS[task]
    header = job.header(
        "tinybench",
        task_file=job.tasks[task],
        dataset={"path": spec.dataset, "config": spec.config, "split": spec.split},
        wall_time_s=time.time() - started,
    )
    summary = summarize(task, records, **header)
    write_json(out / "scores.json", summary)
    return summary


def run(job: TinyBenchJob) -> None:
    """Score every task of `job` (`run_task`); with `irt_params`, write summary.json (`gpirt_summary`); then
    provenance.json."""
    tokenizer, model = job.load()
    folder = checkpoint_folder(job)
    summaries = {task: run_task(job, model, tokenizer, task, folder) for task in job.tasks}
    if job.irt_params is not None:
        summary = gpirt_summary(gpirt.load_params(job.irt_params), summaries, job.seed, REPLICATES)
        header = job.header("tinybench", params=job.irt_params)
        write_json(Path(job.out_dir) / "summary.json", {**header, **summary})
    generates = any(not TINYBENCH_TASKS[task].loglik for task in job.tasks)
    generation = job.generation(sampling=False) if generates else None
    job.write_provenance(model, tokenizer, generation, irt_params=job.irt_params, **job.tasks)
    finish_checkpoints(folder)


def main(argv: list[str] | None = None) -> None:
    """`python -m calibft.evals.tinybench JOB`: the job read from `argv` (default: the command line), run."""
    run(read_job(TinyBenchJob, "calibft.evals.tinybench", sys.argv[1:] if argv is None else argv))
