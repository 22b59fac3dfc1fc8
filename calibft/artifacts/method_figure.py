"""The method figure (paper fig:method), drawn from one real prompt.

Left: the prompt's target law and its canonical output space P_Y (calibft.data.output_space). Middle: the token
trie of that space for a real tokenizer (calibft.data.trie), every edge labelled with its token and q(v | prefix),
with one sampled path y ~ P_Y drawn bold. Right: what each objective supervises along that path: the soft
target is the whole distribution q(. | prefix) at every prefix, the hard target only the sampled token.
A coarse space (one decimal, a dozen bins) keeps the trie legible; the construction is the training one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display on cluster nodes

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.gridspec import GridSpec

from calibft.data.families import FAMILIES
from calibft.data.grid import Prompt, prompts, select
from calibft.data.output_space import OutputSpace, build_output_space
from calibft.data.trie import Trie, trie_of_space
from calibft.lm.models import load_tokenizer

MAX_VALUES = 24  # beyond this the trie is unreadable at figure size
PATH_COLOR, TARGET_COLOR = "tab:red", "tab:blue"


def token_text(tokenizer, token: int) -> str:
    """How a token prints on an edge: its decoded text, or the EOS marker."""
    if token == tokenizer.eos_token_id:
        return "<eos>"
    return tokenizer.decode([token]).replace(" ", "␣") or f"#{token}"


def trie_layout(trie: Trie) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of every node: x its depth, y the mean of its leaves' rows (leaves one row apart, in trie order)."""
    depth = np.zeros(trie.num_nodes)
    for node in range(1, trie.num_nodes):  # parents come before children
        depth[node] = depth[trie.node_parent[node]] + 1
    y = np.zeros(trie.num_nodes)
    leaves = trie.child_count == 0
    # nodes are numbered depth by depth with each node's children contiguous and in order, so a depth-first
    # walk visits the leaves in order; the trie is small here, so plain recursion is fine
    order: list[int] = []

    def visit(node: int) -> None:
        if leaves[node]:
            order.append(node)
        for child in range(trie.child_start[node], trie.child_start[node] + trie.child_count[node]):
            visit(child)

    visit(0)
    y[order] = np.arange(len(order))[::-1]
    for node in range(trie.num_nodes - 1, -1, -1):  # children before parents
        if not leaves[node]:
            kids = slice(trie.child_start[node], trie.child_start[node] + trie.child_count[node])
            y[node] = y[kids].mean()
    return depth, y


def _draw_law(ax, prompt: Prompt, space: OutputSpace) -> None:
    family = FAMILIES[prompt.family]
    law = family.law(prompt.params)
    values = space.values.astype(float)
    lo, hi = values.min(), values.max()
    if family.integer:
        grid = np.arange(np.floor(lo), np.ceil(hi) + 1)
        ax.vlines(grid, 0, law.pmf(grid), color="0.3", lw=2)
    else:
        grid = np.linspace(lo - 0.1 * (hi - lo), hi + 0.1 * (hi - lo), 400)
        ax.plot(grid, law.pdf(grid), color="0.3")
        ax.fill_between(grid, law.pdf(grid), color="0.85")
    ax.set_title(f"(a) target law: {family.display}", fontsize=10, loc="left")
    ax.set_yticks([])
    ax.spines[["top", "right", "left"]].set_visible(False)


def _draw_space(ax, space: OutputSpace, sampled: int) -> None:
    strings = space.strings()
    colors = [PATH_COLOR if i == sampled else TARGET_COLOR for i in range(len(strings))]
    ax.bar(np.arange(len(strings)), space.probs, color=colors)
    ax.set_xticks(np.arange(len(strings)), strings, rotation=90, fontsize=8, family="monospace")
    ax.set_ylabel("$P_Y(y)$")
    ax.set_title(f"(b) canonical output space Y ({len(strings)} strings)", fontsize=10, loc="left")
    ax.spines[["top", "right"]].set_visible(False)


def _draw_trie(ax, trie: Trie, tokenizer, path: np.ndarray) -> None:
    x, y = trie_layout(trie)
    on_path = set(path.tolist())
    for node in range(1, trie.num_nodes):
        parent = trie.node_parent[node]
        bold = node in on_path and parent in on_path
        color, width = (PATH_COLOR, 2.2) if bold else ("0.6", 0.8)
        ax.plot([x[parent], x[node]], [y[parent], y[node]], color=color, lw=width)
        q = trie.node_mass[node] / trie.node_mass[parent]
        label = f"{token_text(tokenizer, int(trie.node_token[node]))}  {q:.2f}"
        ax.text(
            (x[parent] + x[node]) / 2,
            (y[parent] + y[node]) / 2,
            label,
            fontsize=7,
            ha="center",
            va="center",
            family="monospace",
            color=PATH_COLOR if bold else "0.15",
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.6},
        )
    ax.scatter(x, y, s=12, color=["black" if n in on_path else "0.5" for n in range(trie.num_nodes)], zorder=3)
    ax.set_title("(c) token trie: each edge is a token and q(v | prefix)", fontsize=10, loc="left")
    ax.set_xticks(np.arange(int(x.max()) + 1))
    ax.set_xlabel("prefix length (tokens)")
    ax.set_yticks([])
    ax.spines[["top", "right", "left"]].set_visible(False)


def _draw_objectives(ax_soft, ax_hard, trie: Trie, tokenizer, path: np.ndarray) -> None:
    # the soft target at the prefix of the sampled path with the most children
    prefixes = path[:-1]
    prefix = int(prefixes[np.argmax(trie.child_count[prefixes])])
    step = int(np.flatnonzero(prefixes == prefix)[0])
    kids = np.arange(trie.child_start[prefix], trie.child_start[prefix] + trie.child_count[prefix])
    q = trie.node_mass[kids] / trie.node_mass[prefix]
    labels = [token_text(tokenizer, int(t)) for t in trie.node_token[kids]]
    chosen = int(path[step + 1])
    ax_soft.bar(labels, q, color=[PATH_COLOR if k == chosen else TARGET_COLOR for k in kids])
    ax_soft.set_title(f"(d) soft target at step {step + 1}: KL to q(· | prefix)", fontsize=10, loc="left")
    ax_soft.set_ylim(0, 1)
    ax_soft.spines[["top", "right"]].set_visible(False)

    sampled = [token_text(tokenizer, int(t)) for t in trie.node_token[path[1:]]]
    ax_hard.bar(sampled, np.ones(len(sampled)), color=PATH_COLOR)
    for i, token in enumerate(sampled):
        ax_hard.text(i, 0.5, token, ha="center", va="center", color="white", family="monospace", fontsize=9)
    ax_hard.set_title("(e) hard target: cross-entropy on y's tokens", fontsize=10, loc="left")
    ax_hard.set_xticks(np.arange(len(sampled)), [f"t={i + 1}" for i in range(len(sampled))], fontsize=8)
    ax_hard.set_yticks([])
    ax_hard.spines[["top", "right", "left"]].set_visible(False)


def method_figure(prompt: Prompt, tokenizer, decimals: int, max_bins: int, seed: int):
    """The figure for `prompt` with its space at (decimals, max_bins), one path drawn with `seed`."""
    space = build_output_space(prompt.family, prompt.params, decimals, max_bins)
    if len(space.values) > MAX_VALUES:
        raise ValueError(
            f"the method figure draws every string of the space; {prompt.id} has {len(space.values)} at "
            f"decimals={decimals}, max_bins={max_bins}: choose max_bins <= {MAX_VALUES}"
        )
    trie = trie_of_space(tokenizer, space)
    sampled = int(np.random.default_rng(seed).choice(len(space.probs), p=space.probs))
    path = trie.ancestors(int(trie.value_leaf[sampled]))

    figure = plt.figure(figsize=(15, 6.5))
    grid = GridSpec(2, 3, figure=figure, width_ratios=[1.0, 1.8, 1.0], hspace=0.55, wspace=0.25)
    _draw_law(figure.add_subplot(grid[0, 0]), prompt, space)
    _draw_space(figure.add_subplot(grid[1, 0]), space, sampled)
    _draw_trie(figure.add_subplot(grid[:, 1]), trie, tokenizer, path)
    _draw_objectives(figure.add_subplot(grid[0, 2]), figure.add_subplot(grid[1, 2]), trie, tokenizer, path)
    figure.suptitle(
        f"{prompt.prompt}\nsampled y = {space.strings()[sampled]!s}", fontsize=9, x=0.5, y=1.02, family="monospace"
    )
    return figure


def render_method_figure(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]):
    """The registry's renderer (calibft.artifacts.registry): the configured prompt, with the tokenizer of
    `settings["tokenizer"]`."""
    method = settings["method"]
    prompt = select(prompts("train"), [method["prompt"]])[0]
    tokenizer = load_tokenizer(settings["tokenizer"])
    return method_figure(prompt, tokenizer, method["decimals"], method["max_bins"], seed=method["seed"])
