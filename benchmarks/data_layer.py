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
import multiprocessing
import shutil
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibft.grid import prompts
from calibft.models import load_tokenizer
from calibft.output_space import SpaceSet, build_output_space, iter_spaces
from calibft.trie import build_trie, tokenize_values, trie_set_for_spaces
from tests.reference import ReferenceTrie, reference_space


def _save_tiny_tokenizer(out: str) -> None:
    from calibft.tiny_model import TinyModelSettings, train_tokenizer, training_chats

    settings = TinyModelSettings()
    train_tokenizer(training_chats(), settings.vocab_size, settings.max_position_embeddings).save_pretrained(out)


def _tokenizer(path: str | None, scratch: str):
    """The tokenizer, loaded from a folder as a workflow job loads it (the tiny one is trained aside first)."""
    if path is None:
        path = f"{scratch}/tiny_tokenizer"
        trainer = multiprocessing.get_context("spawn").Process(target=_save_tiny_tokenizer, args=(path,))
        trainer.start()
        trainer.join()
    return load_tokenizer(path)


class Memory(threading.Thread):
    """Samples, while the data layer is built, this process's RSS and the PSS summed over its workers.

    RSS counts the pages that forked workers share with their parent once per process; PSS splits them,
    so the summed PSS is the memory the whole job really holds.
    """

    def __init__(self, interval_s: float = 0.05):
        super().__init__(daemon=True)
        self.interval_s, self.peak_rss_mb, self.peak_tree_pss_mb, self.running = interval_s, 0.0, 0.0, True

    def run(self) -> None:
        me = psutil.Process()
        while self.running:
            self.peak_rss_mb = max(self.peak_rss_mb, me.memory_info().rss / 2**20)
            total = 0
            for proc in [me, *me.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    total += proc.memory_full_info().pss
            self.peak_tree_pss_mb = max(self.peak_tree_pss_mb, total / 2**20)
            time.sleep(self.interval_s)

    def stop(self) -> None:
        self.running = False
        self.join()


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


def _data_job(out: Path, name: str, split_prompts, bins: int, tokenizer, threads: int, seconds: dict) -> int:
    """Output spaces and tries of one split, saved as the workflow saves them; records the stage times."""
    start = time.perf_counter()
    spaces = SpaceSet.from_spaces([p.id for p in split_prompts], iter_spaces(split_prompts, 5, bins, threads))
    seconds[f"{name}_spaces_s"] = time.perf_counter() - start
    start = time.perf_counter()
    tries = trie_set_for_spaces(tokenizer, spaces)
    seconds[f"{name}_tries_s"] = time.perf_counter() - start
    start = time.perf_counter()
    spaces.save(out / f"{name}_spaces.npz")
    tries.save(out / f"{name}_tries.npz")
    seconds[f"{name}_save_s"] = time.perf_counter() - start
    return len(tries.node_parent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", help="tokenizer folder (default: the tiny tokenizer, trained here)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reference-sample", type=int, default=6, help="evaluation prompts for the reference")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp()
    tokenizer = _tokenizer(args.tokenizer, scratch)
    train, evaluation = prompts("train"), prompts("unseen") + prompts("ood")

    # the data-layer jobs of the workflow, one after the other: build, save, let go
    memory = Memory()
    memory.start()
    seconds, nodes = {}, 0
    start = time.perf_counter()
    for name, split_prompts, bins in (("train", train, 1001), ("eval", evaluation, 16384)):
        nodes += _data_job(Path(scratch), name, split_prompts, bins, tokenizer, args.threads, seconds)
    total_s = time.perf_counter() - start
    memory.stop()

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
    shutil.rmtree(scratch)
    print(
        json.dumps(
            {
                "benchmark": "data_layer",
                "prompts": {"train_d5_b1001": len(train), "eval_d5_b16384": len(evaluation)},
                "threads": args.threads,
                "total_s": round(total_s, 3),
                "peak_rss_mb": round(memory.peak_rss_mb, 1),
                "peak_tree_pss_mb": round(memory.peak_tree_pss_mb, 1),
                **{key: round(value, 3) for key, value in seconds.items()},
                "trie_nodes": nodes,
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
