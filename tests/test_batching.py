import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from calibft.data.grid import prompts
from calibft.data.output_space import OutputSpace, SpaceSet
from calibft.training.batching import balanced_order, batch_values, batches, epoch_items, shard, steps_per_epoch

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


# The training draws of the authors' release itself, recorded by tests/fixtures/release_draws/make_fixture.py with
# its own train loops (seed 11, 4 items a batch, 2 ranks, 2 epochs; hard targets 2 per prompt and epoch)
RELEASE_DRAWS = json.loads((Path(__file__).parent / "fixtures" / "release_draws" / "release_draws.json").read_text())


def _release_spaces() -> tuple[SpaceSet, list[str]]:
    """The fixture's prompts as a SpaceSet (the release's values and float64 probabilities), and their families."""
    recorded = RELEASE_DRAWS["inputs"]["prompts"]
    spaces = [OutputSpace(np.array(p["values"], dtype=bytes), np.array(p["probabilities"])) for p in recorded]
    return SpaceSet.from_spaces([p["distribution_id"] for p in recorded], spaces), [p["family_id"] for p in recorded]


@pytest.mark.parametrize("objective", ["soft", "hard"])
def test_release_draws_are_the_releases_own_example_for_example(objective):
    """Under `training_draw_seeds: release` every rank's batches, in every epoch, train on the answers the
    release's own train loops drew: the same items in the same order, and the same value for each."""
    inputs, recorded = RELEASE_DRAWS["inputs"], RELEASE_DRAWS[objective]
    data, families = _release_spaces()
    seed, size, world = inputs["seed"], inputs["batch_size"], inputs["world_size"]
    repeats = inputs[f"{objective}_samples_per_prompt_per_epoch"]
    drawn = {}
    for epoch in range(inputs["epochs"]):
        items = epoch_items(families, repeats, seed, epoch)
        assert items.tolist() == recorded["epochs"][epoch]["order"]
        for rank in range(world):
            local = shard(items, rank, world)
            assert local.tolist() == recorded["epochs"][epoch]["ranks"][rank]["items"]
            for batch, batch_items in enumerate(batches(local, size)):
                values = batch_values(data, batch_items, "release", seed, epoch, batch, rank, size, world)
                for offset, (item, value) in enumerate(zip(batch_items, values, strict=True)):
                    drawn[epoch, batch, rank, offset] = (int(item), int(value))
    expected = {
        (r["epoch"], r["batch"], r["rank"], r["offset"]): (r["prompt_index"], r["value_index"])
        for r in recorded["draws"]
    }
    assert drawn == expected
    assert len(expected) == len(recorded["draws"]) > 40


def test_per_batch_draws_are_another_draw_of_the_same_distribution():
    """`per_batch` (one generator per batch) draws other answers than the release, from the same targets; both
    depend only on where the batch is, so a resumed run draws the same."""
    data, families = _release_spaces()
    items = batches(shard(epoch_items(families, 2, 11, 0), 0, 2), 4)[1]
    release = batch_values(data, items, "release", 11, 0, 1, 0, 4, 2)
    per_batch = batch_values(data, items, "per_batch", 11, 0, 1, 0, 4, 2)
    assert per_batch.tolist() == data.sample_values(items, np.random.default_rng([11, 0, 1, 0])).tolist()
    assert release.tolist() == batch_values(data, items, "release", 11, 0, 1, 0, 4, 2).tolist()
    assert release.tolist() != per_batch.tolist()
    with pytest.raises(ValueError, match="draw_seeds must be one of release, per_batch"):
        batch_values(data, items, "per_example", 11, 0, 1, 0, 4, 2)
