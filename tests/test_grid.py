import hashlib
import json
from collections import Counter
from decimal import Decimal, localcontext
from pathlib import Path

import numpy as np
import pytest

from calibft.data.grid import GEOMSPACE, TRAIN_AXES, evaluated_ids, evenly_spaced, prompts, render_prompt, select

AUTHORS = json.loads((Path(__file__).parent / "fixtures" / "authors_artifact.json").read_text())


def texts_digest(texts: list[str]) -> str:
    """The authors' artifact's digest of a split: sha256 of the prompt texts joined by newlines."""
    return hashlib.sha256("\n".join(texts).encode()).hexdigest()


@pytest.mark.parametrize("split", ["train", "unseen", "ood"])
def test_prompt_texts_are_byte_identical_to_the_authors_artifact(split):
    expected = AUTHORS["prompts"][split]
    split_prompts = prompts(split)
    assert len(split_prompts) == expected["count"]
    assert split_prompts[0].prompt == expected["first"] and split_prompts[-1].prompt == expected["last"]
    assert texts_digest([p.prompt for p in split_prompts]) == expected["sha256"]


@pytest.mark.parametrize("axis", list(GEOMSPACE))
def test_geometric_axes_lie_within_three_ulps_of_the_exact_sequence(axis):
    """start * (stop / start) ** (i / (num - 1)) in 40-digit decimal arithmetic; the ends are exact."""
    start, stop, num = axis
    with localcontext() as context:
        context.prec = 40
        ratio = Decimal(stop) / Decimal(start)
        exact = np.array([float(Decimal(start) * ratio ** (Decimal(i) / (num - 1))) for i in range(num)])
    values = np.array(GEOMSPACE[axis])
    assert len(values) == num and values[0] == start and values[-1] == stop
    assert np.all(np.abs(values - exact) <= 3 * np.spacing(exact)), values - exact


def test_training_grid_counts_per_family():
    counts = Counter(p.family for p in prompts("train"))
    assert sum(counts.values()) == 1988
    assert list(counts) == list(TRAIN_AXES)
    assert counts["triangular"] == 125 and counts["hypergeometric"] == 45 and counts["student_t"] == 12


def test_evaluation_sets_cover_the_right_families():
    unseen, ood = prompts("unseen"), prompts("ood")
    assert [p.family for p in unseen] == list(TRAIN_AXES)
    held_out = ("bernoulli", "poisson", "weibull", "maxwell", "chi", "truncnorm")
    assert Counter(p.family for p in ood) == dict.fromkeys(held_out, 3)


def test_float_artifacts_and_banker_rounding_are_kept():
    train = {p.id: p for p in prompts("train")}
    assert "b=-1.5999999999999996" in " ".join(p.prompt for p in train.values())
    # hypergeometric K = round(M * fraction) with banker's rounding: 30 * 0.35 = 10.5 -> 10
    assert train["hypergeometric-001"].params == {"M": 30.0, "K": 10.0, "N": 5.0}
    assert render_prompt("exponential", {"lambda": 7}) == (
        "Generate exactly ONE random number from a Exponential distribution with parameters lambda=7.0. "
        "Output ONLY the number."
    )


def test_ids_are_unique_stable_and_selectable():
    train = prompts("train")
    assert len({p.id for p in train}) == len(train)
    assert train[0].id == "uniform-000" and train[-1].id == "inverse_gaussian-120"
    assert [p.id for p in select(train, ["gaussian-003", "uniform-000"])] == ["gaussian-003", "uniform-000"]
    with pytest.raises(KeyError, match="gaussian-999"):
        select(train, ["gaussian-999"])
    with pytest.raises(ValueError, match="unknown split 'test'"):
        prompts("test")


def test_a_smoke_evaluation_takes_evenly_spaced_prompts_and_those_a_figure_draws():
    ood = [p.id for p in prompts("ood")]
    assert evaluated_ids("ood", None, ["poisson-001"]) is None  # every prompt
    assert evaluated_ids("ood", 2, []) == [ood[0], ood[-1]]
    chosen = evaluated_ids("ood", 2, ["weibull-001", "not-in-this-split"])
    assert chosen == [i for i in ood if i in {ood[0], ood[-1], "weibull-001"}]
    assert evaluated_ids("unseen", 3, ["weibull-001"]) == [p.id for p in evenly_spaced(prompts("unseen"), 3)]
