"""The construction-cost sweep (tab:grid-granularity): what it measures and the table it renders."""

from __future__ import annotations

import pytest

from calibft.artifacts.granularity import grid_granularity_table
from calibft.artifacts.tables import to_csv, to_latex, to_markdown
from calibft.data.granularity import (
    ConstructionCost,
    construction_cost,
    construction_costs,
    read_costs,
    timed_with_peak,
    write_costs,
)
from calibft.data.grid import evenly_spaced, prompts, select
from calibft.data.output_space import build_output_space
from calibft.data.trie import build_trie, tokenize_values


def test_evenly_spaced_keeps_both_ends_and_the_order():
    assert evenly_spaced(list("abcdefghi"), 3) == ["a", "e", "i"]
    assert evenly_spaced(list("abcde"), 2) == ["a", "e"]
    assert evenly_spaced(list("abc"), None) == ["a", "b", "c"]
    assert evenly_spaced(list("abc"), 10) == ["a", "b", "c"]


def test_timed_with_peak_returns_the_result_and_sees_the_allocation():
    result, seconds, peak_mb = timed_with_peak(lambda: bytearray(8 * 2**20))
    assert len(result) == 8 * 2**20 and seconds > 0
    assert 8 <= peak_mb < 9


def test_construction_cost_measures_the_spaces_and_tries_it_builds(tiny_tokenizer):
    chosen = select(prompts("ood"), ["poisson-002", "truncnorm-001"])
    cost = construction_cost(tiny_tokenizer, chosen, 3, 2048)
    spaces = [build_output_space(p.family, p.params, 3, 2048) for p in chosen]
    tries = [build_trie(tokenize_values(tiny_tokenizer, s.values), s.probs) for s in spaces]
    assert cost.prompts == 2 and (cost.decimals, cost.max_bins) == (3, 2048)
    assert cost.mean_values == sum(len(s.values) for s in spaces) / 2
    assert cost.mean_trie_nodes == sum(t.num_nodes for t in tries) / 2
    assert cost.mean_space_s > 0 and cost.mean_trie_s > 0
    assert cost.worst_space_peak_mb > 0 and cost.worst_trie_peak_mb > 0


def test_construction_costs_sweep_decimals_outer_and_refuse_bad_settings(tiny_tokenizer):
    chosen = prompts("unseen")[:1]
    costs = construction_costs(tiny_tokenizer, chosen, [2, 4], [1001, 4096])
    assert [(c.decimals, c.max_bins) for c in costs] == [(2, 1001), (2, 4096), (4, 1001), (4, 4096)]
    with pytest.raises(ValueError, match="decimals"):
        construction_cost(tiny_tokenizer, chosen, 9, 1001)
    with pytest.raises(ValueError, match="at least one prompt"):
        construction_cost(tiny_tokenizer, [], 2, 1001)


def _cost(decimals: int, max_bins: int) -> ConstructionCost:
    return ConstructionCost(decimals, max_bins, 42, 0.01 * decimals, 0.1, 2.5, 3.0, 1000.0, 4000.0)


def test_costs_round_trip_with_their_metadata(tmp_path):
    costs = [_cost(2, 1001), _cost(5, 16384)]
    write_costs(tmp_path / "costs.json", costs, tokenizer="qwen3", splits=["unseen", "ood"])
    read, metadata = read_costs(tmp_path / "costs.json")
    assert read == costs
    assert metadata["tokenizer"] == "qwen3" and metadata["machine"]["cpus"] >= 1


def test_table_shades_the_evaluation_reference_row():
    costs = [_cost(d, b) for d in (2, 5) for b in (1001, 16384)]
    table = grid_granularity_table(costs, (5, 16384), {"tokenizer": "qwen3", "splits": ["unseen", "ood"]})
    assert list(table.shaded) == [False, False, False, True]
    assert list(table.frame["d"]) == [2, 2, 5, 5] and list(table.frame["max bins"]) == [1001, 16384, 1001, 16384]
    tex = to_latex(table)
    assert tex.count("\\rowcolor") == 1
    assert tex.split("\\rowcolor")[1].splitlines()[1].startswith("5 & 16384 & 0.050 & 0.100 & 2.5 & 3.0")
    assert "42 prompts (unseen, ood) with the qwen3 tokenizer" in table.caption
    assert list(table.frame["tokenizer"]) == ["qwen3"] * 4


def test_table_names_the_tokenizer_in_every_file():
    costs = [_cost(5, 1001), _cost(5, 16384)]
    metadata = {
        "tokenizer": "qwen3_packaged",
        "tokenizer_source": "resources/tokenizers/qwen3",
        "vocabulary": 151669,
        "splits": ["unseen", "ood"],
    }
    table = grid_granularity_table(costs, (5, 16384), metadata)
    assert (
        "42 prompts (unseen, ood) with the qwen3_packaged tokenizer (resources/tokenizers/qwen3, 151,669 tokens), "
        "together with" in table.caption
    )
    # the .csv and .md have no caption: the tokenizer is a column of theirs
    csv_lines = to_csv(table).splitlines()
    assert csv_lines[0].endswith(",tokenizer") and all(line.endswith(",qwen3_packaged") for line in csv_lines[1:])
    md_rows = to_markdown(table).splitlines()[2:]
    assert len(md_rows) == 2 and all(row.endswith("| `qwen3_packaged` |") for row in md_rows)
    tex = to_latex(table)
    assert "with the qwen3\\_packaged tokenizer (resources/tokenizers/qwen3, 151,669 tokens)" in tex
    assert tex.split("\\rowcolor")[1].splitlines()[1].rstrip(" \\").endswith("\\texttt{qwen3\\_packaged}")


def test_table_of_costs_that_name_only_the_tokenizer_key():
    table = grid_granularity_table([_cost(5, 16384)], (5, 16384), {"tokenizer": "tiny", "splits": ["ood"]})
    assert "42 prompts (ood) with the tiny tokenizer, together with" in table.caption
    assert list(table.frame["tokenizer"]) == ["tiny"]
