"""The GPU check's exact-pass figures: the exact structured evaluation's walk of each prompt's trie."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

from benchmarks.gpu.peaks import peak_gb, reset_peak
from benchmarks.gpu.settings import CONFIG
from benchmarks.tiny_model import timed
from calibft.data.grid import evenly_spaced, prompts
from calibft.data.output_space import SpaceSet, spaces_for_prompts
from calibft.data.trie import TrieSet, trie_set_for_spaces
from calibft.lm.chat import ChatOptions, chat_prompt_ids
from calibft.lm.trie_walk import NextToken, forwarded_tokens, value_probabilities


@dataclass
class ExactInputs:
    """The prompts of the exact pass, their ids and their tries of one output space."""

    space: str  # the output_spaces entry of config.yaml
    split: str
    prompt_ids: list[list[int]]
    tries: TrieSet

    @classmethod
    def build(cls, tokenizer, options: ChatOptions, space_name: str, count: int) -> ExactInputs:
        """`count` prompts evenly spaced over the structured evaluation's first split, with their tries of the
        output space `space_name`."""
        space, split = CONFIG["output_spaces"][space_name], CONFIG["evaluation"]["structured"]["splits"][0]
        chosen = evenly_spaced(prompts(split), count)
        spaces = SpaceSet.from_spaces(
            [p.id for p in chosen], spaces_for_prompts(chosen, space["decimals"], space["max_bins"])
        )
        ids = [chat_prompt_ids(tokenizer, p.prompt, options) for p in chosen]
        return cls(space_name, split, ids, trie_set_for_spaces(tokenizer, spaces))


def exact_figures(model, inputs: ExactInputs, stops, device) -> dict:
    """Seconds per prompt of the exact pass, tokens it forwards, its peak memory and each prompt's probability
    on the space."""
    sampling = CONFIG["evaluation"]["structured"]["sampling"]
    batch_nodes = CONFIG["evaluation"]["exact"]["batch_nodes"]
    next_token = NextToken(sampling["temperature"], sampling["top_p"], tuple(stops))  # as evals.exact.runner.run
    reset_peak(device)
    seconds, sums, tokens = [], [], []
    for i, ids in enumerate(inputs.prompt_ids):
        trie = inputs.tries.trie(i)
        elapsed, (probs, _) = timed(device, value_probabilities, model, ids, trie, batch_nodes, next_token)
        seconds.append(elapsed)
        sums.append(float(probs.sum()))
        tokens.append(forwarded_tokens(len(ids), trie, batch_nodes))
    return {
        "space": space_label(inputs.space),
        "split": inputs.split,
        "prompts": len(seconds),
        "values_per_prompt": round(float(np.diff(inputs.tries.value_offsets).mean()), 1),
        "trie_nodes_per_prompt": round(float(np.diff(inputs.tries.node_offsets).mean()), 1),
        "forwarded_tokens_per_prompt": round(statistics.mean(tokens), 1),
        "batch_nodes": batch_nodes,
        "seconds": [round(s, 3) for s in seconds],
        "seconds_per_prompt": round(statistics.mean(seconds), 3),
        "probability_on_space": sums,
        "peak_gb": peak_gb(device),
    }


def space_label(name: str) -> str:
    """An output space of config.yaml by name and size, e.g. `eval (d=5, 16384 bins)`."""
    space = CONFIG["output_spaces"][name]
    return f"{name} (d={space['decimals']}, {space['max_bins']} bins)"
