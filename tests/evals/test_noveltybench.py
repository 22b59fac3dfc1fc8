import copy

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
from transformers import (
    LlamaConfig,
    LlamaForSequenceClassification,
    PreTrainedTokenizerFast,
)

from calibft.demo.tiny_evaluators import TinyEvaluatorSettings
from calibft.demo.tiny_evaluators import similarity_classifier as tiny_similarity_classifier
from calibft.demo.tiny_model import reproducible
from calibft.evals.bootstrap import percentile_interval
from calibft.evals.noveltybench.metrics import (
    THRESHOLDS,
    bootstrap_seed,
    distinct,
    gains,
    lexically_equivalent,
    partition,
    prompt_draws,
    rating,
    ratings,
    score_prompt,
    split_summary,
    summarize_prompts,
    utility,
)
from calibft.evals.noveltybench.runner import (
    classifier_inputs,
    reward_ids,
    reward_scores,
    similarity_classifier,
    similarity_probability,
)

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a poem about the sea and the sky at night",
    "write a story about a dragon who likes tea",
    "here is a short poem about autumn leaves falling",
    "tell me a joke about cats and dogs please",
]


def _word_tokenizer(specials: list[str], **kwargs) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]" if "[UNK]" in specials else "<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(CORPUS, trainers.WordLevelTrainer(special_tokens=specials, show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **kwargs)


# ---- ratings ---------------------------------------------------------------------------------------------


def test_thresholds():
    assert len(THRESHOLDS) == 9 and np.all(np.diff(THRESHOLDS) > 0)
    assert THRESHOLDS[0] == -7.71875 and THRESHOLDS[-1] == -2.046875


@pytest.mark.parametrize("k", range(9))
def test_rating_at_and_around_each_threshold(k):
    t = THRESHOLDS[k]
    assert rating(t) == 1 + k  # a threshold equal to the reward is not strictly below it
    assert rating(np.nextafter(t, np.inf)) == 2 + k
    assert rating(np.nextafter(t, -np.inf)) == 1 + k
    assert rating(t - 0.01) == 1 + k and rating(t + 0.01) == 2 + k


def test_ratings_vectorized_and_extremes():
    rewards = np.array([-100.0, -7.0, -5.0, -4.0, 0.0, 30.0])
    np.testing.assert_array_equal(ratings(rewards), [1, 2, 6, 8, 10, 10])
    assert [rating(r) for r in rewards] == ratings(rewards).tolist()


# ---- lexical rule and greedy partition --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("Paris", "  paris ", True),
        ("the cat", "a dog", False),
        ("a b c", "a b d", True),  # m = 3, overlap 2: 4 >= 3
        ("a b c d", "a x y z", False),  # m = 4, overlap 1: 2 < 4
        ("a b c d", "a b y z", True),  # m = 4, overlap 2: 4 >= 4
        ("a a a a", "a", False),  # sets: overlap 1, m = 4
        ("Blue", "blue whale", True),  # m = 2, overlap 1: 2 >= 2
        ("", "", True),
        ("one two three four five", "one two three four five", True),
        ("one two three four five six", "one two three four five six", None),  # 6 tokens: classifier decides
        ("one", "one two three four five six", None),
    ],
)
def test_lexically_equivalent(a, b, expected):
    assert lexically_equivalent(a, b) is expected


def _pair_classifier(equivalent_pairs: set[frozenset[str]], calls: list[tuple[str, str]]):
    def classify(a: str, b: str) -> bool:
        calls.append((a, b))
        return frozenset((a, b)) in equivalent_pairs

    return classify


X = "x x x x x x"
Y = "y y y y y y"
Z = "z z z z z z"


def test_partition_compares_with_first_members_only():
    # X ~ Y and Y ~ Z, but X !~ Z: Z is compared with X (the first member of its class), not with Y.
    calls: list[tuple[str, str]] = []
    classify = _pair_classifier({frozenset((X, Y)), frozenset((Y, Z))}, calls)
    assert partition([X, Y, Z], classify) == [0, 0, 1]
    assert calls == [(X, Y), (X, Z)]  # (first member, new response)


def test_partition_is_order_dependent():
    classify = _pair_classifier({frozenset((X, Y)), frozenset((Y, Z))}, [])
    assert partition([Y, X, Z], classify) == [0, 0, 0]
    assert partition([X, Z, Y], classify) == [0, 1, 0]  # Y joins the first equivalent class in creation order


def test_partition_mixes_lexical_and_classifier():
    calls: list[tuple[str, str]] = []
    classify = _pair_classifier({frozenset((X, Z))}, calls)
    responses = ["Paris", X, "paris", Y, "Lyon", Z, "the city of Lyon"]
    assert partition(responses, classify) == [0, 1, 0, 2, 3, 1, 4]
    # Short pairs are settled lexically; the classifier only sees pairs with more than 5 tokens on a side.
    assert all(max(len(a.split()), len(b.split())) > 5 for a, b in calls)
    assert (X, Y) in calls and (X, Z) in calls and ("Paris", "paris") not in calls


def test_partition_lexical_overrides_classifier():
    always = lambda a, b: True
    assert partition(["cat", "dog", "cat"], always) == [0, 1, 0]
    assert partition([X, "dog"], always) == [0, 0]  # 6 tokens on one side: the classifier decides


# ---- utility ---------------------------------------------------------------------------------------------


def test_utility_hand_case():
    expected = 10 / sum(0.8**i for i in range(10))
    assert expected == pytest.approx(2.2406, abs=5e-5)
    assert utility([0] * 10, [10] + [0] * 9) == pytest.approx(expected)
    assert utility([0] * 10, [10] * 10) == pytest.approx(expected)  # repeats of one class score 0


def test_utility_all_distinct_is_weighted_mean():
    r = np.arange(1, 11, dtype=float)
    w = 0.8 ** np.arange(10)
    assert utility(list(range(10)), r) == pytest.approx(float(w @ r / w.sum()))
    assert utility(list(range(10)), [7] * 10) == pytest.approx(7.0)


def test_gains_and_distinct():
    class_ids = [0, 1, 0, 2, 1]
    np.testing.assert_array_equal(gains(class_ids, [5, 6, 7, 8, 9]), [5, 6, 0, 8, 0])
    assert distinct(class_ids) == 3
    with pytest.raises(ValueError):
        gains([0, 1], [1.0])


def test_score_prompt():
    responses = ["Paris", "paris", "Lyon"]
    out = score_prompt(responses, [0.0, 0.0, -6.1], lambda a, b: False)
    assert out["class_ids"] == [0, 0, 1] and out["ratings"] == [10, 10, 3] and out["distinct"] == 2
    assert out["utility"] == pytest.approx((10 + 0 + 0.64 * 3) / (1 + 0.8 + 0.64))


def test_summarize_prompts():
    rows = [
        {"split": "curated", "utility": 2.0, "distinct": 4},
        {"split": "wildchat", "utility": 5.0, "distinct": 1},
        {"split": "wildchat", "utility": 8.0, "distinct": 7},
    ]
    s = summarize_prompts(rows)
    assert s["splits"]["curated"] == {"n_prompts": 1, "utility": 2.0, "distinct": 4.0}
    assert s["splits"]["wildchat"] == {"n_prompts": 2, "utility": 6.5, "distinct": 4.0}
    assert s["pooled"] == {"n_prompts": 3, "utility": pytest.approx(5.0), "distinct": 4.0}  # by prompt, not split
    with pytest.raises(ValueError):
        summarize_prompts([])


def test_prompt_draws_resample_the_prompts_by_hand():
    rows = [{"utility": u, "distinct": d} for u, d in [(1.0, 2), (3.0, 4), (8.0, 9)]]
    draws = prompt_draws(rows, seed=5, replicates=30)
    picks = np.random.default_rng(5).integers(0, 3, size=(30, 3))  # the same resamples
    assert draws["utility"] == pytest.approx(np.array([1.0, 3.0, 8.0])[picks].mean(axis=1))
    assert draws["distinct"] == pytest.approx(np.array([2.0, 4.0, 9.0])[picks].mean(axis=1))
    same = prompt_draws([{"utility": 0.5, "distinct": 3}] * 4, seed=1, replicates=10)
    assert same["utility"] == pytest.approx(np.full(10, 0.5)) and same["distinct"] == pytest.approx(np.full(10, 3.0))


def test_a_split_summary_has_seeded_intervals_that_hold_its_means():
    rng = np.random.default_rng(0)
    rows = [
        {"split": "curated", "utility": u, "distinct": d}
        for u, d in zip(rng.random(40), rng.integers(1, 11, 40), strict=True)
    ]
    summary = split_summary(rows, "curated", replicates=300)
    intervals = summary["intervals"]
    assert intervals == split_summary(rows, "curated", replicates=300)["intervals"]
    assert intervals["seed"] == bootstrap_seed("curated") != bootstrap_seed("wildchat")
    assert intervals["units"] == {"curated": 40} and intervals["resampled"] == "prompts"
    for key in ("utility", "distinct"):
        low, high = intervals[key]
        assert low < summary[key] < high
        assert intervals[key] == percentile_interval(prompt_draws(rows, bootstrap_seed("curated"), 300)[key])
    assert "intervals" not in split_summary(rows, "curated", replicates=0)


# ---- similarity classifier -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deberta():
    """A tiny random DeBERTa-v2 pair classifier and its tokenizer, as the demo builds them."""
    with reproducible(2, num_threads=1):
        model, tokenizer = tiny_similarity_classifier(TinyEvaluatorSettings(kind="similarity_classifier", seed=2))
    return model.eval(), tokenizer


def test_classifier_inputs_layout_and_truncation(deberta):
    _, tokenizer = deberta
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    a, b = "the quick brown fox", "a poem about the sea"
    ids_a, ids_b = tokenizer.encode(a, add_special_tokens=False), tokenizer.encode(b, add_special_tokens=False)
    assert cls not in ids_a + ids_b and sep not in ids_a + ids_b and len(ids_a) >= 2
    assert classifier_inputs(tokenizer, a, b) == [cls, *ids_a, sep, *ids_b, sep]

    words = " ".join(CORPUS).split()
    long_a, long_b = " ".join(words * 4), " ".join(reversed(words * 5))
    full_a = tokenizer.encode(long_a, add_special_tokens=False)
    full_b = tokenizer.encode(long_b, add_special_tokens=False)
    assert len(full_a) > 128 and len(full_b) > 128
    ids = classifier_inputs(tokenizer, long_a, long_b)
    assert len(ids) == 1 + 128 + 1 + 128 + 1
    assert ids == [cls, *full_a[:128], sep, *full_b[:128], sep]
    assert classifier_inputs(tokenizer, long_a, b, max_side=3) == [cls, *full_a[:3], sep, *ids_b[:3], sep]


def test_similarity_classifier_matches_direct_computation(deberta):
    model, tokenizer = deberta
    pairs = [(CORPUS[0], CORPUS[1]), (CORPUS[2], CORPUS[2]), (CORPUS[3], "cats dogs"), ("", CORPUS[4])]
    probs = []
    for a, b in pairs:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([classifier_inputs(tokenizer, a, b)])).logits
        p = torch.softmax(logits, -1)[0, 1].item()
        assert similarity_probability(model, tokenizer, a, b) == pytest.approx(p, abs=1e-6)
        assert similarity_classifier(model, tokenizer, threshold=p - 1e-4)(a, b) is True
        assert similarity_classifier(model, tokenizer, threshold=p + 1e-4)(a, b) is False
        probs.append(p)
    assert max(probs) - min(probs) > 1e-3  # the random model tells the pairs apart: the checks above are not vacuous
    classify = similarity_classifier(model, tokenizer)
    assert [classify(a, b) for a, b in pairs] == [p > 0.102 for p in probs]


# ---- reward model ----------------------------------------------------------------------------------------

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'user' %}<|user|> {% else %}<|assistant|> {% endif %}{{ m['content'] }} <|end|> "
    "{% endfor %}"
)


@pytest.fixture(scope="module")
def reward_model():
    tokenizer = _word_tokenizer(
        ["<pad>", "<unk>", "<bos>", "<|user|>", "<|assistant|>", "<|end|>"],
        pad_token="<pad>",
        unk_token="<unk>",
        bos_token="<bos>",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id,
        num_labels=1,
        initializer_range=0.3,
    )
    torch.manual_seed(0)
    return LlamaForSequenceClassification(config).eval(), tokenizer


def _conversations() -> list[list[dict[str, str]]]:
    answers = ["fox", CORPUS[1], CORPUS[2] + " " + CORPUS[3], "tea", CORPUS[4], "the sky at night"]
    return [
        [{"role": "user", "content": CORPUS[i % 3]}, {"role": "assistant", "content": a}] for i, a in enumerate(answers)
    ]


def test_reward_scores_match_unbatched_forward(reward_model):
    model, tokenizer = reward_model
    conversations = _conversations()
    tokenizer.padding_side = "right"
    scores = reward_scores(model, tokenizer, conversations, batch_size=1)
    for conversation, score in zip(conversations, scores, strict=True):
        ids = tokenizer.apply_chat_template(conversation, tokenize=False)
        ids = tokenizer(ids, add_special_tokens=False)["input_ids"]
        assert ids[0] == tokenizer.bos_token_id and ids.count(tokenizer.bos_token_id) == 1
        with torch.no_grad():
            direct = model(input_ids=torch.tensor([ids])).logits[0, 0].item()
        assert score == pytest.approx(direct, abs=1e-5)
    assert np.ptp(scores) > 1e-2


@pytest.mark.parametrize("side", ["right", "left"])
def test_reward_scores_independent_of_batching_and_padding(reward_model, side):
    model, tokenizer = reward_model
    conversations = _conversations()
    tokenizer.padding_side = "right"
    alone = reward_scores(model, tokenizer, conversations, batch_size=1)
    tokenizer.padding_side = side
    try:
        for batch_size in (3, 4, len(conversations)):
            np.testing.assert_allclose(reward_scores(model, tokenizer, conversations, batch_size), alone, atol=1e-5)
    finally:
        tokenizer.padding_side = "right"


def test_reward_scores_refuse_a_trailing_pad_token(reward_model):
    model, tokenizer = reward_model
    conversation = [{"role": "user", "content": "fox"}, {"role": "assistant", "content": "dog"}]
    end_pad = tokenizer.chat_template + "<pad>"
    tokenizer.chat_template = end_pad
    try:
        with pytest.raises(ValueError, match="pad token"):
            reward_scores(model, tokenizer, [conversation], batch_size=2)
    finally:
        tokenizer.chat_template = CHAT_TEMPLATE


# the `noveltybench_reward_bos` switch


@pytest.fixture
def bos_adding_reward_model(reward_model):
    """The reward model's tokenizer made to open every encoding with BOS when asked for special tokens, as
    Gemma-2's does (its template writes one too)."""
    model, tokenizer = reward_model
    adding = copy.deepcopy(tokenizer)
    adding.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", tokenizer.bos_token_id)]
    )
    assert adding("fox")["input_ids"][0] == adding.bos_token_id
    return model, adding


def test_reward_ids_single_or_doubled_bos(bos_adding_reward_model):
    _, tokenizer = bos_adding_reward_model
    conversation = _conversations()[1]
    bos = tokenizer.bos_token_id
    # NoveltyBench (src/score.py) tokenizes inside the template
    upstream = tokenizer.apply_chat_template(conversation, tokenize=True, return_dict=True)["input_ids"]
    single = reward_ids(tokenizer, conversation, "single")
    assert single == list(upstream) and single.count(bos) == 1 and single[0] == bos
    # the release: the rendered text through the tokenizer with its special tokens
    release = tokenizer(tokenizer.apply_chat_template(conversation, tokenize=False))["input_ids"]
    doubled = reward_ids(tokenizer, conversation, "doubled")
    assert doubled == release == [bos, *single]
    assert reward_ids(tokenizer, conversation) == single  # the default
    with pytest.raises(ValueError, match="bos"):
        reward_ids(tokenizer, conversation, "triple")


def test_reward_scores_read_the_bos_they_are_given(bos_adding_reward_model):
    model, tokenizer = bos_adding_reward_model
    tokenizer.padding_side = "right"
    conversations = _conversations()
    single = reward_scores(model, tokenizer, conversations, batch_size=4, bos="single")
    doubled = reward_scores(model, tokenizer, conversations, batch_size=4, bos="doubled")
    assert np.abs(single - doubled).min() > 1e-4  # the extra BOS moves every score
    for conversation, score in zip(conversations, doubled, strict=True):
        ids = [tokenizer.bos_token_id, *reward_ids(tokenizer, conversation)]
        with torch.no_grad():
            direct = model(input_ids=torch.tensor([ids])).logits[0, 0].item()
        assert score == pytest.approx(direct, abs=1e-5)
