import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from calibft.data.grid import prompts
from calibft.training.batching import balanced_order, batches, epoch_items, shard, steps_per_epoch

AUTHORS = json.loads((Path(__file__).parent / "fixtures" / "authors_balanced_order_seed11.json").read_text())
FAMILIES = [p.family for p in prompts("train")]


@pytest.mark.parametrize("epoch", [0, 1, 2])
def test_order_is_the_authors_family_balanced_order(epoch):
    """The released training loop's order for seed 11 (its generator is seeded with seed + epoch)."""
    assert epoch_items(FAMILIES, 1, seed=11, epoch=epoch).tolist() == AUTHORS["epochs"][str(epoch)]


def test_order_follows_its_definition():
    families = ["b"] * 3 + ["a"] * 1 + ["c"] * 2
    order = balanced_order(families, seed=0)
    assert sorted(order) == list(range(6))
    # round 1 emits one item of every family, round 2 of b and c, round 3 of b
    assert sorted(families[i] for i in order[:3]) == ["a", "b", "c"]
    assert sorted(families[i] for i in order[3:5]) == ["b", "c"]
    assert families[order[5]] == "b"
    assert balanced_order(families, seed=0) == order and balanced_order(families, seed=1) != order


def test_every_round_is_family_balanced_on_the_grid():
    items = epoch_items(FAMILIES, 16, seed=11, epoch=0)
    assert Counter(items.tolist()) == dict.fromkeys(range(1988), 16)
    first_round = [FAMILIES[i] for i in items[:24]]
    assert sorted(first_round) == sorted(set(FAMILIES))


def test_shards_have_equal_length_and_cover_every_item():
    items = np.arange(10)
    shards = [shard(items, rank, 4) for rank in range(4)]
    assert [len(s) for s in shards] == [3, 3, 3, 3]
    assert sorted(np.concatenate(shards).tolist()) == [0, 0, 1, 1, *range(2, 10)]
    assert [len(b) for b in batches(shards[0], 2)] == [2, 1]


def test_paper_step_counts():
    assert 3 * steps_per_epoch(1988, 1, world_size=4, batch_size=8) == 189
    assert 2 * steps_per_epoch(1988, 16, world_size=4, batch_size=8) == 1988
    assert steps_per_epoch(1988, 1, 4, 8) == len(batches(shard(epoch_items(FAMILIES, 1, 11, 0), 0, 4), 8))
