"""Structured-sampling evaluation and the SSOT baseline (docs/metrics.md, Structured sampling and SSOT baseline).

    python -m calibft.evals.structured JOB     # JOB: a StructuredJob as JSON text or file

For one model, condition (base or a recipe's adapter) and split, every prompt (or the job's `prompt_ids`, a
smoke run's few) gets:

- its logit KL (structured only): the trie KL of `logit_kl_paths` fixed paths from the evaluation target,
  teacher forced (`calibft.training.objectives.path_kl`);
- `samples_per_prompt` answers from the sampling engine, each parsed and checked for validity; the SSOT
  baseline prompts with its instruction as the system message and takes the answer from `answer_pattern`.
  Reasoning is removed by the protocol's `answer_reasoning` (`metrics.answer_part`).

Outputs in `out_dir`: `samples.jsonl.gz` (one object per sample: id, index, text, value, valid, finished; `text`
is the decoded answer as `metrics.answer_part` reads it, with its reasoning under `answer_reasoning: release`),
`logit_kl.jsonl` (structured only) and `metrics.json` (per prompt, per family, aggregate), which
`metrics.score` computes from the samples alone, so that anyone can recompute it. With a `checkpoint_dir`, each
prompt's samples are kept there as soon as they are drawn, and a job restarted after a preemption samples only
the prompts that are left (each prompt's seed is its own, so the result is the uninterrupted one).

- `job`: `StructuredJob`, free of torch, so that the workflow imports it to plan.
- `ssot`: the SSOT baseline's prompts and answer extraction as the authors' release has them.
- `metrics`: answers taken out of the texts and parsed, each prompt's figures and metrics.json.
- `runner`: the job: logit KL, sampling (checkpointed per prompt), metrics.json and provenance.
"""
