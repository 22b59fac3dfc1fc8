"""NoveltyBench's partition and scores against the authors' release itself (tests/fixtures/release_noveltybench/).

The fixture was recorded by make_fixture.py beside it with the release's own lexical rule, reward ratings,
classifier input building and partition and score stages (chandar-lab/calibration-finetuning at a09d46dc), on
fixed generations, with stand-ins for the two models: a similarity classifier that answers each pair with a fixed
probability and a reward model that scores each conversation with a fixed float32 reward. This test imports that
script's tokenizers and stand-in reward model, and runs the project's scoring job under the `release` preset on
the same generations, with only the models replaced: the classifier's probability of each pair is the one the
release got (`similarity_probability`), the reward model scores the token ids the release fed it. So the release's
partition, ratings and rewards must come out exactly; utilities and means are compared within a few float64
roundings, as the two sides sum in different orders.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from calibft.core.io import read_jsonl, write_jsonl
from calibft.core.protocol import resolve
from calibft.evals.noveltybench import runner as noveltybench_runner
from calibft.evals.noveltybench.job import ScoringJob
from calibft.evals.noveltybench.metrics import (
    PATIENCE,
    THRESHOLDS,
    gains,
    lexically_equivalent,
    rating,
    summarize_prompts,
)
from calibft.evals.noveltybench.runner import CLASSIFIER_MAX_SIDE, CLASSIFIER_THRESHOLD, classifier_inputs, reward_ids
from tests.fixtures.release_recording import recorded

RELEASE, MAKE_FIXTURE = recorded("release_noveltybench")
PROTOCOL = resolve(None)  # the `release` preset
PROMPTS = RELEASE["inputs"]["prompts"]
RUNS = RELEASE["runs"]
SPLITS = list(RUNS["splits"])
RELEASE_ROWS = {row["id"]: row for split in RUNS["splits"].values() for row in split["scores"]}
# Both sides compute a utility as sum_i 0.8^i g_i / sum_i 0.8^i over 10 generations (the release with Python's
# `**` and left-to-right sums, the project with numpy's power and a dot product) and a mean over at most 5 prompts
# (the release as weighted sums of split means): a few dozen roundings of non-negative terms, each at most 2^-53
# relative, so the two agree to well within 1e-13 relative; a slip in the computation moves them by far more.
RTOL = 1e-13

CLASSIFIER, REWARD_MODEL = "stand-in-similarity-classifier", "stand-in-reward-model"


def _conversation(prompt: str, generation: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": generation}]


def test_the_fixture_was_recorded_from_the_inputs_of_its_script_at_the_projects_settings():
    assert PROMPTS == MAKE_FIXTURE.PROMPTS
    config = RELEASE["config"]
    assert config["classifier_threshold"] == CLASSIFIER_THRESHOLD
    assert config["classifier_max_length"] == CLASSIFIER_MAX_SIDE
    assert config["patience"] == PATIENCE
    assert tuple(THRESHOLDS) == MAKE_FIXTURE.THRESHOLDS
    assert PROTOCOL["noveltybench_reward_bos"] == "doubled"


@pytest.mark.parametrize("case", RELEASE["lexical"], ids=lambda c: f"{c['a']!r}~{c['b']!r}")
def test_the_lexical_rule_is_the_releases(case):
    assert lexically_equivalent(case["a"], case["b"]) is case["equal"]


@pytest.mark.parametrize("case", RELEASE["ratings"], ids=lambda c: repr(c["reward"]))
def test_ratings_are_the_releases(case):
    assert rating(case["reward"]) == case["rating"]


@pytest.mark.parametrize("index", range(len(RELEASE["classifier_inputs"])))
def test_the_classifier_reads_the_releases_ids(index):
    """The ids of a pair, sides cut at 128 tokens. The release also passes token type ids (1 from the second
    side on), the project none: they reach the model only where its config has `type_vocab_size` > 0, which
    DeBERTa-v3's sets to 0 (not checked here: the fixture has no real classifier)."""
    case = RELEASE["classifier_inputs"][index]
    tokenizer = MAKE_FIXTURE.classifier_tokenizer()
    assert classifier_inputs(tokenizer, case["a"], case["b"]) == case["input_ids"]
    first_side = case["token_type_ids"].count(0)
    assert case["input_ids"][first_side - 1] == tokenizer.sep_token_id


@pytest.mark.parametrize("prompt", PROMPTS, ids=lambda p: p["id"])
def test_the_reward_model_reads_the_releases_ids_under_the_release_preset(prompt):
    """`doubled`: the template's BOS and the tokenizer's; `single` (as_written) drops exactly the second."""
    tokenizer = MAKE_FIXTURE.reward_tokenizer()
    recorded = RUNS["reward_inputs"][prompt["id"]]
    conversations = [_conversation(prompt["prompt"], g) for g in prompt["generations"]]
    bos = PROTOCOL["noveltybench_reward_bos"]
    assert [reward_ids(tokenizer, c, bos) for c in conversations] == recorded
    assert all(ids[:2] == [tokenizer.bos_token_id] * 2 for ids in recorded)
    assert [reward_ids(tokenizer, c, "single") for c in conversations] == [ids[1:] for ids in recorded]


# ---- the scoring job on the release's generations, with the release's model outputs ----------------------------


def _similarity_of_recorded_pairs(asked: list[tuple[str, str]]):
    """`similarity_probability` answering the probability the release got for each pair, in that order; a pair
    the release never asked about fails."""
    recorded = {(a, b): p for a, b, p in RUNS["classifier_pairs"]}

    def similarity_probability(model, tokenizer, a: str, b: str) -> float:
        asked.append((a, b))
        return recorded[a, b]

    return similarity_probability


def _reward_of_recorded_ids(ids: list[int]) -> float:
    """The reward the release's model gave these ids; ids it never saw fail."""
    return REWARD_BY_IDS[tuple(ids)]


REWARD_BY_IDS = {
    tuple(ids): reward
    for prompt_id, inputs in RUNS["reward_inputs"].items()
    for ids, reward in zip(inputs, RELEASE_ROWS[prompt_id]["raw_rewards"], strict=True)
}


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> SimpleNamespace:
    """The project's scoring job on each split, its models replaced by the stand-ins: its rows per prompt id, its
    summaries per split, and the pairs it asked the classifier about."""
    tmp = tmp_path_factory.mktemp("release_noveltybench")
    reward_tokenizer = MAKE_FIXTURE.reward_tokenizer()
    models = {
        CLASSIFIER: SimpleNamespace(eval=lambda: None),  # only `similarity_probability` would call it
        REWARD_MODEL: MAKE_FIXTURE.StandInRewardModel(_reward_of_recorded_ids, reward_tokenizer.pad_token_id),
    }
    tokenizers = {CLASSIFIER: MAKE_FIXTURE.classifier_tokenizer(), REWARD_MODEL: reward_tokenizer}
    asked: list[tuple[str, str]] = []
    rows, summaries = {}, {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(noveltybench_runner, "similarity_probability", _similarity_of_recorded_pairs(asked))
        patch.setattr(noveltybench_runner, "load_classifier", lambda name, precision: models[name])
        patch.setattr(noveltybench_runner, "load_tokenizer", lambda name: tokenizers[name])
        for split in SPLITS:
            records = [{**p, "category": None, "finished": [True] * 10} for p in PROMPTS if p["split"] == split]
            write_jsonl(tmp / f"{split}.jsonl.gz", records)
            job = ScoringJob(
                model_key="release", condition="fixture", split=split, generations=str(tmp / f"{split}.jsonl.gz"),
                classifier=CLASSIFIER, classifier_tokenizer=CLASSIFIER, reward_model=REWARD_MODEL, precision="fp32",
                out_dir=str(tmp / split), reward_batch_size=RELEASE["config"]["reward_batch_size"], protocol=PROTOCOL,
            )  # fmt: skip
            noveltybench_runner.score(job)
            rows.update({row["id"]: row for row in read_jsonl(tmp / split / "scores.jsonl")})
            summaries[split] = json.loads((tmp / split / "summary.json").read_text())
            partitions = read_jsonl(tmp / split / "partitions.jsonl")
            assert partitions == [{"id": r["id"], "class_ids": rows[r["id"]]["class_ids"]} for r in records]
    return SimpleNamespace(rows=rows, summaries=summaries, asked=asked)


def test_the_project_asks_the_classifier_about_the_pairs_the_release_asked(scored):
    """The same (first member of a class, candidate) pairs, each in the same order: the classifier is not
    symmetric. The release asks a class's first member about all later candidates at once, the project each
    candidate about the classes in turn, so the order of the questions differs, not the questions."""
    release = [(a, b) for a, b, _ in RUNS["classifier_pairs"]]
    assert sorted(scored.asked) == sorted(release)


@pytest.mark.parametrize("prompt_id", list(RELEASE_ROWS))
def test_partition_rewards_ratings_and_distinct_are_the_releases_exactly(scored, prompt_id):
    release, row = RELEASE_ROWS[prompt_id], scored.rows[prompt_id]
    assert row["class_ids"] == release["partition"]
    assert row["distinct"] == release["distinct"] == release["num_partitions"]
    assert row["rewards"] == release["raw_rewards"]  # the stand-in's float32 rewards, carried exactly
    assert gains(row["class_ids"], row["ratings"]).tolist() == release["generation_scores"]
    firsts = [row["class_ids"].index(c) for c in range(row["distinct"])]
    assert [row["ratings"][i] for i in firsts] == release["partition_scores"]


@pytest.mark.parametrize("prompt_id", list(RELEASE_ROWS))
def test_utility_is_the_releases(scored, prompt_id):
    assert scored.rows[prompt_id]["utility"] == pytest.approx(RELEASE_ROWS[prompt_id]["utility"], rel=RTOL, abs=0)


@pytest.mark.parametrize("split", SPLITS)
def test_split_means_are_the_releases(scored, split):
    release, summary = RUNS["splits"][split]["summary"]["metrics"], scored.summaries[split]
    assert summary["n_prompts"] == release["num_prompts"]
    assert summary["distinct"] == release["mean_distinct"]  # integers summed exactly, then one division
    assert summary["utility"] == pytest.approx(release["mean_utility"], rel=RTOL, abs=0)
    assert release["patience"] == PATIENCE


def test_the_means_over_all_prompts_are_the_releases(scored):
    """The headline pools every prompt of both splits: the release weighs each split's means by its prompts."""
    release = RUNS["summary"]["metrics"]
    pooled = summarize_prompts([scored.rows[row["id"]] for row in PROMPTS])["pooled"]
    assert pooled["n_prompts"] == release["num_prompts"] == len(PROMPTS)
    assert pooled["distinct"] == pytest.approx(release["mean_distinct"], rel=RTOL, abs=0)
    assert pooled["utility"] == pytest.approx(release["mean_utility"], rel=RTOL, abs=0)


def test_the_fixture_covers_the_edges_of_the_partition_and_the_ratings():
    """Ties at the classifier threshold and at every reward threshold, a relation that is not transitive, pairs
    left to the classifier and pairs the lexical rule settles, and prompts with one and with ten classes."""
    probabilities = {p for _, _, p in RUNS["classifier_pairs"]}
    assert CLASSIFIER_THRESHOLD in probabilities and np.nextafter(CLASSIFIER_THRESHOLD, 1) in probabilities
    rewards = {r for row in RELEASE_ROWS.values() for r in row["raw_rewards"]}
    assert set(THRESHOLDS) <= rewards
    assert set(THRESHOLDS) <= {case["reward"] for case in RELEASE["ratings"]}
    assert {row["distinct"] for row in RELEASE_ROWS.values()} >= {1, 10}
    assert {case["equal"] for case in RELEASE["lexical"]} == {True, False, None}
    poem = RELEASE_ROWS["wildchat-poem"]["partition"]
    # the third generation is like the second (in the first class) but not like the first: a class of its own
    assert poem[1] == poem[0] and poem[2] != poem[1]
