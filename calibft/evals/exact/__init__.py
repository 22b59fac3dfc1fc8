"""Exact structured evaluation (docs/metrics.md, Exact distribution on the output space).

    python -m calibft.evals.exact JOB     # JOB: an ExactJob as JSON text or file

For one model, condition and split, every prompt that the structured evaluation sampled gets the model's
probability of every value of the evaluation space (`calibft.lm.trie_walk`: the sampling settings in force, any of the
engine's stop tokens ending a value), and from them, free of sampling noise:

- `mass`: the probability that the answer is exactly one of the space's canonical strings;
- `kl_on_space` and `kl_sequences`: KL(target || model), the model renormalized on the space or not
  (`calibft.evals.metrics.exact_kl`);
- `w1`, `w1_norm`: the W1 of the model's distribution renormalized on the space, by the sampled W1's coupling
  (`exact_wasserstein1`).

It then sets the structured evaluation's samples of the same run against that distribution. `sampled` is the
paper's sampled W1 (every valid answer) with the spread that as many draws from the exact distribution give;
`on_space` keeps the answers whose text is a canonical string of the space, the same event as the exact
distribution's, so that their W1 falls within its spread (`within`) for about 99% of prompts when the engine
samples what the exact pass computes.

Every figure comes with certified bounds (`bounds`, per prompt and for the aggregates): a full walk's are the
figure itself. With a tolerance above 0 (`ExactJob.w1_norm_tolerance`, `mass_tolerance`), the walk expands only
the most probable prefixes until the bounds on the normalized W1 and the mass are that narrow
(`calibft.evals.exact.bounds`), and the figures are those of the completion it reports.

Outputs in `out_dir`: `probabilities.npz` (per prompt, with offsets: the values, the model's probabilities and
the target's) and `metrics.json` (per prompt, per family, aggregate). With a `checkpoint_dir`, each prompt's
probabilities are kept there as soon as they are computed, and a restarted job computes only the rest.

- `job`: `ExactJob`, free of torch, so that the workflow imports it to plan.
- `bounds`: the certified bounds on the figures from a partial walk, and where the adaptive walk may stop.
- `metrics`: each prompt's figures, the aggregates' bounds and metrics.json.
- `runner`: the job: the walk per prompt (checkpointed), probabilities.npz, metrics.json and provenance.
"""
