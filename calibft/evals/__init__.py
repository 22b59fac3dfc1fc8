"""One package per evaluation, each run as `python -m calibft.evals.<name> JOB` from the workflow (NoveltyBench:
`generate|score JOB`): `job` (its job dataclass, free of torch, which the workflow imports to plan), `runner` (what
the job runs), `__main__`, and its computations from texts and numbers in `metrics` (TinyBenchmarks: one module per
concern). Shared by them: `job` (`ModelJob`), `metrics` (what the structured and exact evaluations share) and
`bootstrap`."""
