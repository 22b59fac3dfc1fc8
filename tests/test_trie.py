import copy
import itertools

import numpy as np
import pytest
from scipy import stats
from tokenizers import Regex, normalizers, pre_tokenizers

from calibft.data import trie as trie_module
from calibft.data.grid import prompts
from calibft.data.output_space import SpaceSet, spaces_for_prompts
from calibft.data.trie import TokenizedValues, TrieSet, build_trie, tokenize_values, trie_set_for_spaces
from tests.conftest import make_bpe_tokenizer
from tests.reference import ReferenceTrie

SAMPLE = prompts("train")[::83] + prompts("unseen")[::5] + prompts("ood")[::4]


@pytest.fixture(scope="module")
def sample_spaces():
    return SpaceSet.from_spaces([p.id for p in SAMPLE], spaces_for_prompts(SAMPLE, 5, 1001), decimals=5, max_bins=1001)


@pytest.fixture(scope="module")
def sample_tries(bpe_tokenizer, sample_spaces):
    return trie_set_for_spaces(bpe_tokenizer, sample_spaces)


@pytest.mark.parametrize("tokenizer_name", ["bpe_tokenizer", "tiny_tokenizer"])
def test_every_prefix_matches_the_dict_reference(request, tokenizer_name, sample_spaces):
    tokenizer = request.getfixturevalue(tokenizer_name)
    tries = trie_set_for_spaces(tokenizer, sample_spaces)
    for i in range(len(sample_spaces)):
        space, trie = sample_spaces.space(i), tries.trie(i)
        reference = ReferenceTrie(tokenizer, space.strings(), space.probs.tolist())
        inner = np.flatnonzero(trie.child_count > 0)
        assert len(inner) == len(reference.next_mass)
        for node in inner:
            tokens, q = trie.children(node)
            expected = reference.q(tuple(trie.prefix_tokens(node).tolist()))
            assert dict(zip(tokens.tolist(), q.tolist(), strict=True)) == pytest.approx(expected, abs=1e-12)
        for value in range(len(space.probs)):
            assert tuple(trie.value_tokens(value).tolist()) == reference.sequences[value]


def test_q_sums_to_one_and_path_products_give_the_mass(sample_tries):
    for i in range(len(sample_tries)):
        trie = sample_tries.trie(i)
        for node in np.flatnonzero(trie.child_count > 0):
            assert trie.children(node)[1].sum() == pytest.approx(1.0, abs=1e-12)
        for value in range(len(trie.value_probs)):
            q_along_path = [
                dict(zip(*trie.children(parent), strict=True))[trie.node_token[child]]
                for parent, child in itertools.pairwise(trie.ancestors(int(trie.value_leaf[value])))
            ]
            assert np.prod(q_along_path) == pytest.approx(trie.value_probs[value], rel=1e-9)


def test_path_targets_are_the_trie_children_along_each_path(sample_tries, rng):
    prompt_index = rng.integers(0, len(sample_tries), 16)
    values = sample_tries.sample_values(prompt_index, rng)
    targets = sample_tries.path_targets(prompt_index, values)
    assert targets.step_offsets[-1] == targets.lengths.sum()
    for b, (i, v) in enumerate(zip(prompt_index, values, strict=True)):
        trie = sample_tries.trie(i)
        nodes = trie.ancestors(int(trie.value_leaf[v]))
        assert targets.tokens[b, : targets.lengths[b]].tolist() == trie.value_tokens(v).tolist()
        assert (targets.tokens[b, targets.lengths[b] :] == -1).all()
        for t, node in enumerate(nodes[:-1]):
            rows = targets.child_step == targets.step_offsets[b] + t
            tokens, q = trie.children(node)
            assert targets.child_token[rows].tolist() == tokens.tolist()
            np.testing.assert_allclose(targets.child_q[rows], q, rtol=1e-12)


def test_sampled_values_follow_the_output_space(sample_tries):
    """Chi-square goodness of fit of 20000 draws against P_Y (seeded, so not flaky)."""
    i = 1
    probs = sample_tries.trie(i).value_probs
    draws = sample_tries.sample_values(np.full(20000, i), np.random.default_rng(7))
    counts = np.bincount(draws, minlength=len(probs))
    keep = probs * 20000 >= 5  # pool the sparse cells, as the test requires
    observed = np.append(counts[keep], counts[~keep].sum())
    expected = np.append(probs[keep], probs[~keep].sum()) * 20000
    assert stats.chisquare(observed[expected > 0], expected[expected > 0]).pvalue > 1e-3


def test_same_seed_same_paths(sample_tries):
    index = np.arange(len(sample_tries))
    first = sample_tries.sample_values(index, np.random.default_rng(11))
    assert (first == sample_tries.sample_values(index, np.random.default_rng(11))).all()


def test_save_and_load_round_trip(sample_tries, tmp_path):
    sample_tries.save(tmp_path / "t.npz")
    loaded = TrieSet.load(tmp_path / "t.npz")
    assert loaded.metadata == sample_tries.metadata and loaded.metadata["decimals"] == 5
    for name in ("ids", "node_parent", "node_mass", "child_start", "value_leaf"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(sample_tries, name))
    assert loaded.index(SAMPLE[3].id) == 3
    with pytest.raises(KeyError, match="no prompt with id 'nope-000'"):
        loaded.index("nope-000")


def test_a_subset_holds_the_same_tries_and_path_targets(sample_tries):
    chosen = [SAMPLE[5].id, SAMPLE[0].id, SAMPLE[9].id]
    subset = sample_tries.subset(chosen)
    assert subset.ids.tolist() == chosen and subset.metadata == sample_tries.metadata
    for i, prompt_id in enumerate(chosen):
        mine, theirs = subset.trie(i), sample_tries.trie(sample_tries.index(prompt_id))
        for name in ("node_parent", "node_token", "node_mass", "child_start", "child_count", "value_leaf"):
            np.testing.assert_array_equal(getattr(mine, name), getattr(theirs, name))
    values = np.array([3, 0, 7])
    mine = subset.path_targets(np.arange(3), values)
    theirs = sample_tries.path_targets(np.array([sample_tries.index(i) for i in chosen]), values)
    for name in ("tokens", "lengths", "step_offsets", "child_step", "child_token", "child_q"):
        np.testing.assert_array_equal(getattr(mine, name), getattr(theirs, name))
    with pytest.raises(KeyError, match="no prompt with id 'nope-000'"):
        sample_tries.subset(["nope-000"])


def test_hand_built_trie():
    trie = build_trie(TokenizedValues.from_lists([[1, 2, 9], [1, 3, 9], [4, 9]]), np.array([0.2, 0.3, 0.5]))
    assert trie.children(0)[0].tolist() == [1, 4]
    np.testing.assert_allclose(trie.children(0)[1], [0.5, 0.5])
    np.testing.assert_allclose(trie.children(1)[1], [0.4, 0.6])
    assert trie.value_tokens(2).tolist() == [4, 9]


def test_tokenizer_without_eos_is_refused():
    with pytest.raises(ValueError, match="has no EOS token"):
        tokenize_values(make_bpe_tokenizer(eos=None), ["1.0"])


class _ListTokenizer:
    """A tokenizer without a Rust backend: only `__call__` returning lists of ids, like the slow ones."""

    def __init__(self, fast):
        self.fast, self.eos_token_id, self.name_or_path = fast, fast.eos_token_id, "list-tokenizer"

    def __call__(self, texts, add_special_tokens):
        return {"input_ids": [self.fast.encode(t, add_special_tokens=add_special_tokens) for t in texts]}


def _alone(tokenizer, strings: list[str]) -> list[list[int]]:
    """Each string encoded on its own, EOS appended: what `tokenize_values` must give."""
    return [[*tokenizer.encode(s, add_special_tokens=False), tokenizer.eos_token_id] for s in strings]


def _rows(tokenized) -> list[list[int]]:
    return [row[:length].tolist() for row, length in zip(tokenized.tokens, tokenized.lengths, strict=True)]


def test_batched_encoding_equals_one_encode_per_string_on_both_paths(bpe_tokenizer, sample_spaces):
    strings = sample_spaces.space(2).strings()
    for tokenizer in (bpe_tokenizer, _ListTokenizer(bpe_tokenizer)):
        assert _rows(tokenize_values(tokenizer, strings, chunk=100)) == _alone(bpe_tokenizer, strings)  # 2+ chunks


# The number-splitting parts of the paper's tokenizers (their tokenizer.json): one digit per piece (Qwen3),
# runs of up to three digits (Llama-3, and GPT-OSS's o200k), SentencePiece-style spaces (Gemma-3).
_LETTERS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+"
_REST = r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_O200K_WORDS = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
)


def _byte_level_split(pattern: str):
    split = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    return pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


PIPELINES = {
    "qwen3": (None, _byte_level_split(rf"{_LETTERS}|\p{{N}}|{_REST}")),
    "llama3": (None, _byte_level_split(rf"{_LETTERS}|\p{{N}}{{1,3}}|{_REST}")),
    "gpt_oss": (None, _byte_level_split(rf"{_O200K_WORDS}|\p{{N}}{{1,3}}|{_REST}")),
    "gemma3": (normalizers.Replace(" ", "▁"), pre_tokenizers.Split(" ", behavior="merged_with_previous")),
}


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_joined_encoding_is_exact_and_taken_for_the_papers_tokenizers(pipeline, sample_spaces, monkeypatch):
    tokenizer = make_bpe_tokenizer()
    tokenizer.backend_tokenizer.normalizer, tokenizer.backend_tokenizer.pre_tokenizer = PIPELINES[pipeline]
    strings = sample_spaces.space(5).strings()
    assert len(strings) > 3 * trie_module._JOINED  # several joined texts in one batch, and several batches
    expected = _alone(tokenizer, strings)
    monkeypatch.setattr(trie_module, "_encode_each", None)  # the string-by-string fallback would fail
    assert _rows(tokenize_values(tokenizer, strings, chunk=len(strings) // 2)) == expected


def test_joined_encoding_is_exact_for_the_tiny_tokenizer(tiny_tokenizer, sample_spaces):
    strings = sample_spaces.space(5).strings()
    assert _rows(tokenize_values(tiny_tokenizer, strings, chunk=len(strings) // 2)) == _alone(tiny_tokenizer, strings)


def test_tokenizers_whose_pieces_are_not_independent_are_encoded_string_by_string(bpe_tokenizer, monkeypatch):
    # a Metaspace that prepends "▁" only at the start of the text: joined, the second value would lose it
    tokenizer = make_bpe_tokenizer()
    tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    strings = ["0.5", "12.25", "-3", "7"]
    joined = tokenizer.encode("</s>".join(strings), add_special_tokens=False)
    assert joined != [t for row in _alone(tokenizer, strings) for t in row][:-1]  # the check has work to do
    assert _rows(tokenize_values(tokenizer, strings)) == _alone(tokenizer, strings)
    # once a batch has failed, the next batches are not joined
    calls = []
    joined = trie_module._encode_joined
    monkeypatch.setattr(trie_module, "_encode_joined", lambda *args: calls.append(1) or joined(*args))
    assert _rows(tokenize_values(tokenizer, strings, chunk=2)) == _alone(tokenizer, strings)  # two batches
    assert len(calls) == 1
    # special tokens encoded as text: the joined text holds no EOS at all
    tokenizer = make_bpe_tokenizer()
    tokenizer.backend_tokenizer.encode_special_tokens = True
    assert _rows(tokenize_values(tokenizer, strings)) == _alone(tokenizer, strings)
    # a value holding the EOS text itself
    strings = ["0.5", "1</s>2", "3"]
    assert _rows(tokenize_values(bpe_tokenizer, strings)) == _alone(bpe_tokenizer, strings)


def _spy(monkeypatch, name: str) -> list:
    """Record the results of the trie module's function `name`."""
    results, function = [], getattr(trie_module, name)
    monkeypatch.setattr(trie_module, name, lambda *args: results.append(function(*args)) or results[-1])
    return results


@pytest.mark.parametrize(("pipeline", "by_character"), [("qwen3", True), ("llama3", False), ("gemma3", False)])
def test_one_token_per_character_is_taken_only_where_it_is_exact(pipeline, by_character, sample_spaces, monkeypatch):
    tokenizer = make_bpe_tokenizer()  # its merges join digits: only a pre-tokenizer that splits them keeps them apart
    tokenizer.backend_tokenizer.normalizer, tokenizer.backend_tokenizer.pre_tokenizer = PIPELINES[pipeline]
    strings = np.unique(sample_spaces.values)
    assert len(strings) >= trie_module._BY_CHARACTER_MIN
    results = _spy(monkeypatch, "_encode_by_character")
    assert _rows(tokenize_values(tokenizer, strings)) == _alone(tokenizer, [s.decode() for s in strings.tolist()])
    assert (results[0] is not None) == by_character


def test_one_token_per_character_for_the_tiny_tokenizer(tiny_tokenizer, sample_spaces, monkeypatch):
    strings = [s.decode() for s in np.unique(sample_spaces.values).tolist()]
    results = _spy(monkeypatch, "_encode_by_character")
    assert _rows(tokenize_values(tiny_tokenizer, strings)) == _alone(tiny_tokenizer, strings)  # str input
    assert results[0] is not None


def test_one_token_per_character_is_refused_when_a_character_is_not_one_token(monkeypatch):
    # a Metaspace adds "▁" in front of each text: "7" alone is "▁7" or "▁" "7", never the "7" inside "17"
    tokenizer = make_bpe_tokenizer()
    tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always")
    strings = [f"{k / 100:.2f}" for k in range(-2500, 2500)]
    results = _spy(monkeypatch, "_encode_by_character")
    assert _rows(tokenize_values(tokenizer, strings)) == _alone(tokenizer, strings)
    assert results == [None]


def test_one_token_per_character_checks_pairs_and_triples(tiny_tokenizer, monkeypatch):
    # a tokenizer whose digits are single tokens, except that "42" is one added token: found by the pairs,
    # even though no string of the spread holds it
    tokenizer = copy.deepcopy(tiny_tokenizer)
    tokenizer.add_tokens(["42"])
    strings = [f"{k}.0" for k in range(5000) if "42" not in str(k)]
    strings.insert(1, "1.42")  # not among the strings the check encodes (it spreads them from the first to the last)
    results = _spy(monkeypatch, "_encode_by_character")
    assert _rows(tokenize_values(tokenizer, strings)) == _alone(tokenizer, strings)
    assert results == [None]


def test_one_token_per_character_does_not_ask_about_runs_that_no_string_holds(tiny_tokenizer, monkeypatch):
    # large vocabularies merge runs of punctuation such as "--" and "..", which no number holds
    tokenizer = copy.deepcopy(tiny_tokenizer)
    tokenizer.add_tokens(["--", ".."])
    strings = [f"{k / 100:.2f}" for k in range(-2500, 2500)]
    results = _spy(monkeypatch, "_encode_by_character")
    assert _rows(tokenize_values(tokenizer, strings)) == _alone(tokenizer, strings)
    assert results[0] is not None


def test_runs_of_two_and_three_characters(sample_spaces):
    values = sample_spaces.values[::7]
    expected = {
        s[i : i + n] for s in (v.decode() for v in values.tolist()) for n in (2, 3) for i in range(len(s) - n + 1)
    }
    runs = trie_module._runs_of_two_and_three(values, np.array([ord(c) for c in "-.0123456789"]))
    assert len(runs) == len(set(runs)) and set(runs) == expected
    assert trie_module._runs_of_two_and_three(np.array([b"7", b"8"]), np.array([ord("7"), ord("8")])) == []


def test_tries_built_in_parts_equal_tries_built_at_once(tiny_tokenizer, sample_spaces, monkeypatch):
    whole = trie_set_for_spaces(tiny_tokenizer, sample_spaces)
    monkeypatch.setattr(trie_module, "_BUILT_TOGETHER", 3000)  # several parts, cut between prompts
    parts = trie_set_for_spaces(tiny_tokenizer, sample_spaces)
    assert (
        len(
            trie_module.build_trie_parts(
                tokenize_values(tiny_tokenizer, sample_spaces.values), sample_spaces.probs, sample_spaces.offsets
            )
        )
        > 3
    )
    for name in ("node_offsets", "node_parent", "node_token", "child_start", "child_count", "value_leaf"):
        np.testing.assert_array_equal(getattr(parts, name), getattr(whole, name))
    np.testing.assert_allclose(parts.node_mass, whole.node_mass, rtol=1e-12)
    # and each prompt's trie is the one built from its values alone
    tokenized = tokenize_values(tiny_tokenizer, sample_spaces.values)
    for i in (0, 7, len(sample_spaces) - 1):
        rows = slice(sample_spaces.offsets[i], sample_spaces.offsets[i + 1])
        alone, together = build_trie(tokenized[rows], sample_spaces.probs[rows]), whole.trie(i)
        np.testing.assert_array_equal(alone.node_parent, together.node_parent)
        np.testing.assert_array_equal(alone.child_start, together.child_start)
        np.testing.assert_array_equal(alone.value_leaf, together.value_leaf)


def test_rows_are_ordered_by_group_then_tokens_with_many_keys(rng):
    # token ids up to 150000 (18 bits) and rows of 9 tokens: three 64-bit keys
    tokens = rng.integers(0, 150_000, size=(3000, 9)).astype(np.int32)
    tokens[:, 2] = rng.integers(0, 3, size=3000)  # many rows share their first tokens
    tokens[:, 0] = rng.integers(0, 2, size=3000)
    tokens[rng.random((3000, 9)) < 0.1] = -1
    groups = np.sort(rng.integers(0, 5, size=3000))
    order = trie_module._lexicographic_order(tokens, groups)
    expected = sorted(range(3000), key=lambda r: (groups[r], *tokens[r].tolist()))
    assert [(groups[r], *tokens[r].tolist()) for r in order] == [(groups[r], *tokens[r].tolist()) for r in expected]


def test_one_token_per_character_is_refused_for_a_byte_outside_the_table(tiny_tokenizer, monkeypatch):
    strings = [f"{k / 10:.1f}" for k in range(5000)]
    strings[3] = "1\x002"  # a NUL inside a string, where the NULs of an "S" array only pad
    results = _spy(monkeypatch, "_encode_by_character")
    assert _rows(tokenize_values(tiny_tokenizer, strings)) == _alone(tiny_tokenizer, strings)
    assert results == [None]
