"""Benchmark of the data layer: output spaces and tries for every prompt, against the plain reference.

    python benchmarks/data_layer.py [--tokenizer PATH] [--threads 2] [--reference-sample 6]

Builds the output spaces and tries of the 1988 training prompts (d=5, 1001 bins, the soft-target data)
and of the 42 evaluation prompts (d=5, 16384 bins, the evaluation target) with the tiny tokenizer, then
times the plain reference of tests/reference.py (full decimal grid, one encode per string, dicts) on a
sample of evaluation prompts. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibft.grid import prompts
from calibft.output_space import SpaceSet, build_output_space, iter_spaces
from calibft.trie import build_trie, tokenize_values, trie_set_for_spaces
from tests.reference import ReferenceTrie, reference_space


def _tokenizer(path: str | None):
    if path:
        from calibft.models import load_tokenizer

        return load_tokenizer(path)
    from calibft.tiny_model import TinyModelSettings, train_tokenizer, training_chats

    return train_tokenizer(training_chats(), TinyModelSettings().vocab_size)


class TreeMemory(threading.Thread):
    """Samples the proportional set size (PSS) summed over this process and its workers.

    RSS counts the pages that forked workers share with their parent once per process; PSS splits them,
    so the sum is the memory the job really holds.
    """

    def __init__(self, interval_s: float = 0.1):
        super().__init__(daemon=True)
        self.interval_s, self.peak_mb, self.running = interval_s, 0.0, True

    def run(self) -> None:
        me = psutil.Process()
        while self.running:
            total = 0
            for proc in [me, *me.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    total += proc.memory_full_info().pss
            self.peak_mb = max(self.peak_mb, total / 2**20)
            time.sleep(self.interval_s)

    def stop(self) -> float:
        self.running = False
        self.join()
        return self.peak_mb


def _timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def _per_prompt(build, sample) -> tuple[float, float]:
    """Mean milliseconds and worst tracemalloc peak (MB) of `build(prompt)` over the sample."""
    seconds, peak = 0.0, 0
    for p in sample:
        tracemalloc.start()
        _, s = _timed(lambda p=p: build(p))
        peak = max(peak, tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        seconds += s
    return 1000 * seconds / len(sample), peak / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", help="tokenizer folder (default: the tiny tokenizer, trained here)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reference-sample", type=int, default=6, help="evaluation prompts for the reference")
    args = parser.parse_args()
    tokenizer = _tokenizer(args.tokenizer)
    train, evaluation = prompts("train"), prompts("unseen") + prompts("ood")

    memory = TreeMemory()
    memory.start()
    start = time.perf_counter()
    ids = [p.id for p in train]
    train_set, train_space_s = _timed(lambda: SpaceSet.from_spaces(ids, iter_spaces(train, 5, 1001, args.threads)))
    train_tries, train_trie_s = _timed(lambda: trie_set_for_spaces(tokenizer, train_set))
    ids = [p.id for p in evaluation]
    eval_set, eval_space_s = _timed(lambda: SpaceSet.from_spaces(ids, iter_spaces(evaluation, 5, 16384, args.threads)))
    eval_tries, eval_trie_s = _timed(lambda: trie_set_for_spaces(tokenizer, eval_set))
    total_s = time.perf_counter() - start
    peak_tree_pss_mb = memory.stop()
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux

    # per-prompt figures at 16384 bins, ours and the reference's, on the same sample
    sample = evaluation[:: max(1, len(evaluation) // args.reference_sample)][: args.reference_sample]

    def ours_space(p):
        return build_output_space(p.family, p.params, 5, 16384)

    def ours_trie(p):
        space = ours_space(p)
        return build_trie(tokenize_values(tokenizer, space.strings()), space.probs)

    def reference_trie(p):
        strings, probs = reference_space(p.family, p.params, 5, 16384)
        return ReferenceTrie(tokenizer, strings, probs)

    space_ms, space_peak = _per_prompt(ours_space, sample)
    space_and_trie_ms, trie_peak = _per_prompt(ours_trie, sample)
    ref_space_ms, ref_space_peak = _per_prompt(lambda p: reference_space(p.family, p.params, 5, 16384), sample)
    ref_both_ms, ref_trie_peak = _per_prompt(reference_trie, sample)
    print(
        json.dumps(
            {
                "benchmark": "data_layer",
                "prompts": {"train_d5_b1001": len(train), "eval_d5_b16384": len(evaluation)},
                "threads": args.threads,
                "total_s": round(total_s, 3),
                "peak_rss_mb": round(peak_rss_mb, 1),
                "peak_tree_pss_mb": round(peak_tree_pss_mb, 1),
                "train_spaces_s": round(train_space_s, 3),
                "train_tries_s": round(train_trie_s, 3),
                "eval_spaces_s": round(eval_space_s, 3),
                "eval_tries_s": round(eval_trie_s, 3),
                "trie_nodes": int(len(train_tries.node_parent) + len(eval_tries.node_parent)),
                "space_ms_per_prompt_16384": round(space_ms, 2),
                "trie_ms_per_prompt_16384": round(space_and_trie_ms - space_ms, 2),
                "space_peak_mb_per_prompt_16384": round(space_peak, 2),
                "trie_peak_mb_per_prompt_16384": round(trie_peak, 2),
                "reference_sample": [p.id for p in sample],
                "reference_space_ms_per_prompt_16384": round(ref_space_ms, 2),
                "reference_trie_ms_per_prompt_16384": round(ref_both_ms - ref_space_ms, 2),
                "reference_space_peak_mb_per_prompt_16384": round(ref_space_peak, 2),
                "reference_trie_peak_mb_per_prompt_16384": round(ref_trie_peak, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
