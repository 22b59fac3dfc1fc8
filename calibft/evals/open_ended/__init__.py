"""Open-ended random generation (docs/metrics.md, Open-ended random generation).

    python -m calibft.evals.open_ended JOB     # JOB: an OpenEndedJob as JSON text or file

Requests such as "Name a random city. Output ONLY the answer." have no target distribution; the evaluation
measures how broad the model's answers are, two ways per prompt:

- top-t support: the smallest number of first tokens (softmax of the logits at the first generated
  position) whose probabilities cover t, at every threshold t in 0.01..0.99 (0.9 is the headline);
- unique fraction: `samples_per_prompt` sampled answers, each normalized (`metrics.normalize`, by the protocol's
  `open_ended_normalization` switch); the number of distinct non-empty answers divided by the number of samples.

Outputs in `out_dir`: `samples.jsonl.gz` (one object per sample: prompt_index, prompt, index, text,
normalized, finished; `text` is the answer as the normalization reads it, `runner.sample_answers`),
`support.jsonl` (one object per prompt: its support at every threshold, in the order of `metrics.json`'s
`thresholds`) and `metrics.json`, which `metrics.score` computes from those two files alone, with the bootstrap
interval of each aggregate over resamples of the samples within each prompt (`intervals`,
`metrics.resampled_distinct`).

- `job`: `OpenEndedJob` and the thresholds, free of torch, so that the workflow imports them to plan.
- `metrics`: the normalization, the unique fraction, the top-t support, their bootstrap and metrics.json.
- `runner`: the job: the prompts file, the first token's distribution, the sampled answers, the outputs.
"""
