"""Benchmark of the data layer: output spaces and tries for every prompt, against the plain reference.

    python benchmarks/data_layer.py [--tokenizer PATH] [--threads 2] [--reference-sample 6]

Runs the data-layer jobs of the workflow, each in a fresh process as Snakemake runs them and one after
the other as `--cores 2` schedules them (each job takes both cores): the output spaces and the tries of
the 1988 training prompts (d=5, 1001 bins, the soft-target data) and of the 42 evaluation prompts (d=5,
16384 bins, the evaluation target), with the tiny tokenizer. `total_s` is the sum of the jobs' wall
times, interpreter start and imports included; `peak_rss_mb` is the largest job's peak RSS, plus the
unique memory of its worker processes. Then it times, per prompt at 16384 bins, the output space and then
the trie (on that space, alone), ours and the plain reference's of tests/reference.py (full decimal grid,
one encode per string, dicts), on a sample of evaluation prompts. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Each job runs in a new interpreter that imports this file first, so the library is imported inside the
# functions: a job imports what its workflow script imports, and no more.

SETS = {"train_d5_b1001": ("train", 1001), "eval_d5_b16384": (("unseen", "ood"), 16384)}


class PeakMemory(threading.Thread):
    """Samples this process's RSS plus its workers' unique memory (USS): their shared pages count once."""

    def __init__(self, interval_s: float = 0.1):
        super().__init__(daemon=True)
        self.interval_s, self.peak_mb, self.running = interval_s, 0.0, True

    def run(self) -> None:
        me = psutil.Process()
        while self.running:
            total = me.memory_info().rss
            for worker in me.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    total += worker.memory_full_info().uss
            self.peak_mb = max(self.peak_mb, total / 2**20)
            time.sleep(self.interval_s)

    def __enter__(self) -> PeakMemory:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.running = False
        self.join()


def _set_prompts(name: str) -> list:
    from calibft.data.grid import prompts

    splits = SETS[name][0]
    return [p for split in ([splits] if isinstance(splits, str) else splits) for p in prompts(split)]


def spaces_job(name: str, out: str, threads: int) -> dict:
    """What rule output_space does."""
    from calibft.data.output_space import SpaceSet, iter_spaces

    with PeakMemory() as memory:
        start = time.perf_counter()
        chosen, bins = _set_prompts(name), SETS[name][1]
        spaces = SpaceSet.from_spaces([p.id for p in chosen], iter_spaces(chosen, 5, bins, threads))
        spaces.save(f"{out}/{name}_spaces.npz")
        compute_s = time.perf_counter() - start
    return {"compute_s": compute_s, "peak_mb": memory.peak_mb, "values": len(spaces.probs)}


def trie_job(name: str, out: str, tokenizer_path: str) -> dict:
    """What rule trie does."""
    from calibft.data.output_space import SpaceSet
    from calibft.data.trie import trie_set_for_spaces
    from calibft.lm.models import load_tokenizer

    with PeakMemory() as memory:
        start = time.perf_counter()
        tokenizer = load_tokenizer(tokenizer_path)
        tries = trie_set_for_spaces(tokenizer, SpaceSet.load(f"{out}/{name}_spaces.npz"))
        tries.save(f"{out}/{name}_tries.npz")
        compute_s = time.perf_counter() - start
    return {"compute_s": compute_s, "peak_mb": memory.peak_mb, "nodes": len(tries.node_parent)}


def _save_tiny_tokenizer(out: str) -> None:
    from calibft.demo.tiny_model import TinyModelSettings, train_tokenizer, training_chats

    settings = TinyModelSettings()
    train_tokenizer(training_chats(), settings.vocab_size, settings.max_position_embeddings).save_pretrained(out)


JOBS = {job.__name__: job for job in (spaces_job, trie_job, _save_tiny_tokenizer)}


def _in_fresh_process(fn, *args):
    """Run fn(*args) in a new interpreter, as Snakemake runs a script job; its result and its wall time.

    A plain `python` subprocess, not a multiprocessing "spawn" child: such a child would also spawn the
    workers of an output-space job (fresh interpreters that import SciPy again), where a workflow job forks.
    """
    start = time.perf_counter()
    job = subprocess.run(
        [sys.executable, __file__, "--job", fn.__name__, *map(str, args)], check=True, stdout=subprocess.PIPE, text=True
    )
    return json.loads(job.stdout.splitlines()[-1]), time.perf_counter() - start


def _per_item(build, items) -> tuple[list, float, float]:
    """The results of `build(item)` for each item, their mean milliseconds and their worst tracemalloc peak (MB)."""
    from calibft.data.granularity import timed_with_peak

    runs = [timed_with_peak(lambda item=item: build(item)) for item in items]
    results = [result for result, _, _ in runs]
    return results, 1000 * sum(seconds for _, seconds, _ in runs) / len(runs), max(peak for _, _, peak in runs)


def main() -> None:
    if sys.argv[1:2] == ["--job"]:  # one job, in the interpreter that `_in_fresh_process` started
        name, *args = sys.argv[2:]
        print(json.dumps(JOBS[name](*(int(a) if a.isdigit() else a for a in args))))
        return
    from calibft.data.output_space import build_output_space
    from calibft.data.trie import trie_of_space
    from calibft.lm.models import load_tokenizer
    from tests.reference import ReferenceTrie, reference_space

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", help="tokenizer folder (default: the tiny tokenizer, trained here)")
    parser.add_argument("--threads", type=int, default=2, help="processes of an output-space job")
    parser.add_argument("--reference-sample", type=int, default=6, help="evaluation prompts for the reference")
    args = parser.parse_args()

    figures: dict = {"benchmark": "data_layer", "threads": args.threads}
    jobs = {}
    with tempfile.TemporaryDirectory() as out:
        tokenizer_path = args.tokenizer or f"{out}/tiny_tokenizer"
        if args.tokenizer is None:
            _in_fresh_process(_save_tiny_tokenizer, tokenizer_path)
        for name in SETS:
            jobs[f"spaces_{name}"] = _in_fresh_process(spaces_job, name, out, args.threads)
            jobs[f"tries_{name}"] = _in_fresh_process(trie_job, name, out, tokenizer_path)
        tokenizer = load_tokenizer(tokenizer_path)
    figures["total_s"] = round(sum(wall for _, wall in jobs.values()), 2)
    figures["compute_s"] = round(sum(result["compute_s"] for result, _ in jobs.values()), 2)
    figures["peak_rss_mb"] = round(max(result["peak_mb"] for result, _ in jobs.values()), 1)
    figures["jobs"] = {
        job: {"wall_s": round(wall, 2), **{k: round(v, 2) for k, v in result.items()}}
        for job, (result, wall) in jobs.items()
    }

    # per prompt at 16384 bins, ours and the reference's, on the same sample of evaluation prompts; each trie is
    # timed alone, on the space built just before
    evaluation = _set_prompts("eval_d5_b16384")
    sample = evaluation[:: max(1, len(evaluation) // args.reference_sample)][: args.reference_sample]

    spaces, space_ms, space_peak = _per_item(lambda p: build_output_space(p.family, p.params, 5, 16384), sample)
    _, trie_ms, trie_peak = _per_item(lambda space: trie_of_space(tokenizer, space), spaces)
    ref_spaces, ref_space_ms, ref_space_peak = _per_item(
        lambda p: reference_space(p.family, p.params, 5, 16384), sample
    )
    _, ref_trie_ms, ref_trie_peak = _per_item(lambda space: ReferenceTrie(tokenizer, *space), ref_spaces)
    figures |= {
        "sample": [p.id for p in sample],
        "space_ms_per_prompt_16384": round(space_ms, 2),
        "trie_ms_per_prompt_16384": round(trie_ms, 2),
        "space_peak_mb_per_prompt_16384": round(space_peak, 2),
        "trie_peak_mb_per_prompt_16384": round(trie_peak, 2),
        "reference_space_ms_per_prompt_16384": round(ref_space_ms, 2),
        "reference_trie_ms_per_prompt_16384": round(ref_trie_ms, 2),
        "reference_space_peak_mb_per_prompt_16384": round(ref_space_peak, 2),
        "reference_trie_peak_mb_per_prompt_16384": round(ref_trie_peak, 2),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
