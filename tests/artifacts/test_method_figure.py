"""The method figure: its trie layout, and that it draws a real prompt's space and trie."""

from __future__ import annotations

import numpy as np
import pytest

from calibft.artifacts.figures import save_figure
from calibft.artifacts.method_figure import method_figure, token_text, trie_layout
from calibft.data.grid import prompts, select
from calibft.data.trie import TokenizedValues, build_trie


def test_trie_layout_puts_leaves_one_row_apart_and_parents_at_their_childrens_mean():
    # values "1", "12", "2" as token rows, 0 standing in for EOS
    values = TokenizedValues.from_lists([[1, 0], [1, 2, 0], [2, 0]])
    trie = build_trie(values, np.array([0.5, 0.25, 0.25]))
    depth, y = trie_layout(trie)
    leaves = np.flatnonzero(trie.child_count == 0)
    assert sorted(y[leaves].tolist()) == [0.0, 1.0, 2.0]
    assert depth.tolist() == [0, 1, 1, 2, 2, 2, 3]  # root; "1", "2"; "1<eos>", "12", "2<eos>"; "12<eos>"
    for node in range(trie.num_nodes):
        if trie.child_count[node]:
            kids = slice(trie.child_start[node], trie.child_start[node] + trie.child_count[node])
            assert y[node] == pytest.approx(y[kids].mean())
    # the first value's leaf is drawn on top, in trie order
    assert y[trie.value_leaf[0]] > y[trie.value_leaf[1]] > y[trie.value_leaf[2]]


def test_token_text_marks_eos(tiny_tokenizer):
    assert token_text(tiny_tokenizer, tiny_tokenizer.eos_token_id) == "<eos>"
    assert token_text(tiny_tokenizer, tiny_tokenizer.convert_tokens_to_ids("7")) == "7"


def test_method_figure_draws_a_real_prompt(tiny_tokenizer, tmp_path):
    prompt = select(prompts("train"), ["gaussian-088"])[0]
    figure = method_figure(prompt, tiny_tokenizer, 1, 12, seed=11)
    titles = [ax.get_title(loc="left") for ax in figure.axes]
    assert titles[0].startswith("(a) target law: Gaussian")
    assert titles[1] == "(b) canonical output space Y (12 strings)"
    assert [t[:3] for t in titles[2:]] == ["(c)", "(d)", "(e)"]
    paths = save_figure(figure, "method", tmp_path)
    assert [p.name for p in paths] == ["method.pdf", "method.png"] and paths[1].read_bytes()[:4] == b"\x89PNG"


def test_method_figure_refuses_a_space_too_large_to_draw(tiny_tokenizer):
    prompt = select(prompts("train"), ["gaussian-088"])[0]
    with pytest.raises(ValueError, match="choose max_bins <= 24"):
        method_figure(prompt, tiny_tokenizer, 2, 100, seed=11)
