"""Benchmark of the TinyBenchmarks bootstrap: the refits of the IRT ability with the finite-difference points
evaluated as one batch against upstream's one at a time, on the same resamples.

    python benchmarks/gpirt_bootstrap.py [--dim 10] [--replicates 1000] [--reference-replicates 100]

Builds synthetic IRT parameters in the real file's structure (`calibft.evals.tinybench.gpirt.synthetic_params`,
`--dim` ability dimensions, 100 anchors per scenario) and 100 item scores per task, then times
`calibft.evals.tinybench.summary.gpirt_summary` with `--replicates` replicates (what one TinyBenchmarks job adds to
its run: one batched BFGS fit per replicate and gp-IRT row). The plain reference refits `--reference-replicates`
of the same resamples one point at a time (`estimate_anchors(..., batched=False)`, upstream's way), and its time
is scaled to `--replicates`. `identical` says whether the two fits of every such resample gave the same gp-IRT,
bit for bit. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibft.evals.tinybench import gpirt
from calibft.evals.tinybench.summary import GPIRT_ROWS, gpirt_summary, item_picks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--replicates", type=int, default=1000)
    parser.add_argument("--reference-replicates", type=int, default=100)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()

    params = gpirt.synthetic_params(0, dim=args.dim)
    rng = np.random.default_rng(args.seed)
    summaries: dict[str, dict] = {}
    for task, metric in GPIRT_ROWS.values():
        scores = (rng.random(gpirt.N_SEEN) < 0.6).astype(float)
        column = {"scores": scores.tolist(), "accuracy": float(scores.mean())}
        summaries.setdefault(task, {"metrics": {}})["metrics"][metric] = column

    started = time.perf_counter()
    gpirt_summary(params, summaries, args.seed, args.replicates)
    ours_s = time.perf_counter() - started

    reference_s, identical = 0.0, True
    for task, metric in GPIRT_ROWS.values():
        scenario = gpirt.scenario_data(params, task)
        y = np.asarray(summaries[task]["metrics"][metric]["scores"])
        picks = item_picks(args.seed, task, gpirt.N_SEEN, args.replicates)[: args.reference_replicates]
        batched = gpirt.resampled_estimates(scenario, y, picks)["gpirt"]
        started = time.perf_counter()
        plain = [gpirt.estimate_anchors(scenario, y, row)["gpirt"] for row in picks]
        reference_s += time.perf_counter() - started
        identical = identical and batched.tolist() == plain

    print(
        json.dumps(
            {
                "benchmark": "gpirt_bootstrap",
                "dim": args.dim,
                "rows": len(GPIRT_ROWS),
                "replicates": args.replicates,
                "batched_s": round(ours_s, 2),
                "plain_s": round(reference_s * args.replicates / args.reference_replicates, 2),
                "reference_replicates": args.reference_replicates,
                "identical": identical,
            }
        )
    )


if __name__ == "__main__":
    main()
