"""NoveltyBench (docs/metrics.md, NoveltyBench): generations of the model under test, then their scores by the
benchmark's metric v1.0 (equivalence classes, reward ratings and utility).

    python -m calibft.evals.noveltybench generate JOB   # JOB: a GenerationJob as JSON text or file
    python -m calibft.evals.noveltybench score JOB      # JOB: a ScoringJob

Two jobs, because they need different models on the GPU: `generate` samples 10 answers to every prompt of
one split (each prompt the only user message, no system prompt) from the model under test, at the settings that
the `noveltybench_sampling` switch puts in force (`GenerationJob.checkpoint_defaults`); `score` loads the
benchmark's evaluators, the DeBERTa similarity classifier and the reward model, and scores each prompt's
answers with `metrics.score_prompt`.

Prompts files are JSON lines in the benchmark's format: `{"id": "curated-31", "category": "...", "prompt":
"..."}` (category optional). Outputs: `generations.jsonl.gz` (per prompt: id, split, category, prompt,
generations, finished), then `partitions.jsonl` (per prompt: id and class_ids, the similarity classifier's
equivalence classes of its generations), `scores.jsonl` (the generations' fields plus class_ids, rewards,
ratings, utility and distinct) and `summary.json` (the split's means and their bootstrap intervals over
resamples of the prompts, `intervals`; all recomputable from `scores.jsonl`). Both jobs keep per-prompt
checkpoints when given a `checkpoint_dir`, so a preempted job resumes where it stopped.

- `job`: `GenerationJob` and `ScoringJob`, free of torch, so that the workflow imports them to plan.
- `metrics`: the partition, ratings, utility, the split's means and their bootstrap.
- `runner`: the two jobs, the evaluators' inputs and forward passes, and the scoring's largest step (for
  `calibft.pipeline.memory`).
"""
