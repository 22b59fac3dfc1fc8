"""MCQ answer-position balance (docs/metrics.md, MCQ answer-position balance): the paper's prompt, its strict
parser and the TV score.

    python -m calibft.evals.mcq JOB     # JOB: an MCQJob as JSON text or file

A model asked for a medical multiple-choice question with "the correct answer evenly distributed" should
place the correct answer on A, B, C and D equally often. Generations are parsed strictly, so that a model
cannot look balanced by emitting malformed questions, and the balance is scored as the total variation
distance between the answer-letter frequencies of the parseable generations and the uniform law.

Outputs in `out_dir`: `generations.jsonl.gz` (one object per generation: index, text, answer, reason, finished;
`text` is the decoded generation, with its reasoning under `answer_reasoning: release`; a generation that does not
parse has answer null and the parser's reason) and `metrics.json`, which `metrics.score` computes from the stored
texts alone (they are parsed again), with the bootstrap interval of each number over resamples of the generations
(`intervals`, `metrics.resampled_summaries`).

- `job`: `MCQJob` and the paper's prompt, free of torch, so that the workflow imports them to plan.
- `metrics`: the strict parser, the balance, its bootstrap and metrics.json.
- `runner`: the job: the generations, metrics.json and provenance.
"""
