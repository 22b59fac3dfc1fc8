"""TinyBenchmarks: the 100 anchor items of each tiny benchmark scored per item, in dataset row order, and the
full-benchmark accuracy that gp-IRT estimates from those scores (docs/tinybench.md, docs/metrics.md).

    python -m calibft.evals.tinybench JOB     # JOB: a TinyBenchJob as JSON text or file

- `job`: `TinyBenchJob` and its defaults; with `tasks`, free of torch, so that the workflow imports them to plan.
- `tasks`: `TINYBENCH_TASKS`, each task's dataset and how its items are scored.
- `gsm8k`: GSM8K answer extraction and exact match, under the release's protocol or lm-evaluation-harness's.
- `choices`: the log-likelihood tasks (MMLU, HellaSwag, TruthfulQA mc2, WinoGrande): requests, the model's
  log-likelihoods, item scores.
- `generate`: GSM8K's decoding, greedy or sampled, cut at stop strings.
- `summary`: scores.json of a task, and summary.json's gp-IRT figures with their bootstrap intervals.
- `gpirt`: the tinyBenchmarks gp-IRT estimator and its parameter file (also `calibft gpirt`).
- `runner`: the job: each task scored in checkpointed chunks, then the summaries and provenance.
"""
