import numpy as np
import pytest
import torch
import torch.nn.functional as F

from calibft.training.objectives import (
    completion_cross_entropy,
    completion_logits,
    make_batch,
    soft_target_kl,
)


def soft_target_loss(*args, **kwargs) -> torch.Tensor:
    """The soft-target objective of a batch: `soft_target_kl` averaged over its examples, as training takes it."""
    return soft_target_kl(*args, **kwargs).mean()


def test_soft_loss_equals_a_kl_computed_by_hand():
    """Two examples on a 5-token vocabulary; example 0 has two steps, example 1 one."""
    logits = torch.tensor([[1.0, 2.0, 0.0, -1.0, 0.5], [0.0, 0.0, 3.0, 0.0, 0.0], [2.0, -2.0, 1.0, 0.0, 0.0]])
    step_example = torch.tensor([0, 0, 1])
    child_step = torch.tensor([0, 0, 1, 2, 2, 2])
    child_token = torch.tensor([1, 3, 2, 0, 1, 4])
    child_q = torch.tensor([0.75, 0.25, 1.0, 0.5, 0.3, 0.2])

    def kl(z, tokens, q):
        log_pi = z - np.log(np.exp(z).sum())
        return sum(qi * (np.log(qi) - log_pi[t]) for t, qi in zip(tokens, q, strict=True))

    z = logits.numpy().astype(np.float64)
    by_hand = np.mean(
        [np.mean([kl(z[0], [1, 3], [0.75, 0.25]), kl(z[1], [2], [1.0])]), kl(z[2], [0, 1, 4], [0.5, 0.3, 0.2])]
    )
    loss = soft_target_loss(logits, step_example, child_step, child_token, child_q)
    assert loss.item() == pytest.approx(by_hand, rel=1e-6)
    hot = soft_target_loss(logits, step_example, child_step, child_token, child_q, temperature=2.0)
    assert hot.item() != pytest.approx(by_hand)


def test_soft_loss_is_zero_when_the_model_matches_q_everywhere():
    q = torch.tensor([0.6, 0.3, 0.1])
    logits = torch.full((2, 6), -1e9)
    logits[0, [0, 2, 5]] = q.log()
    logits[1, 4] = 0.0
    loss = soft_target_loss(
        logits,
        torch.tensor([0, 0]),
        torch.tensor([0, 0, 0, 1]),
        torch.tensor([0, 2, 5, 4]),
        torch.cat([q, torch.ones(1)]),
    )
    assert loss.item() == pytest.approx(0.0, abs=1e-6)


def test_soft_loss_penalizes_mass_outside_the_children():
    logits = torch.zeros(1, 4)
    spread = soft_target_loss(logits, torch.tensor([0]), torch.tensor([0]), torch.tensor([1]), torch.tensor([1.0]))
    assert spread.item() == pytest.approx(np.log(4))


def test_hard_loss_is_token_mean_cross_entropy():
    logits = torch.randn(5, 7, generator=torch.Generator().manual_seed(0))
    target = torch.tensor([1, 2, 3, 0, 6])
    expected = -torch.log_softmax(logits, -1)[torch.arange(5), target].mean()
    assert completion_cross_entropy(logits, target).item() == pytest.approx(expected.item(), rel=1e-6)


class _Echo(torch.nn.Module):
    """A stand-in LM whose logits at position t one-hot the input token at t: shows which positions are read."""

    def forward(self, input_ids, attention_mask, position_ids, logits_to_keep, use_cache):
        logits = torch.nn.functional.one_hot(input_ids, 50).float()[:, -logits_to_keep:]
        return type("Out", (), {"logits": logits})()


def test_batch_layout_reads_the_logits_before_each_completion_token():
    prompts = [[11, 12, 13], [21]]
    completions = np.array([[31, 32, 9], [41, 9, -1]])
    batch = make_batch(prompts, completions, np.array([3, 2]), pad_id=0)
    assert batch.input_ids.tolist() == [[11, 12, 13, 31, 32, 9], [0, 0, 21, 41, 9, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 0]]
    assert batch.position_ids[1].tolist()[2:5] == [0, 1, 2]
    assert batch.step_target.tolist() == [31, 32, 9, 41, 9]
    # the logits for step t come from the token just before it: the last prompt token, then the completion
    inputs_seen = completion_logits(_Echo(), batch).argmax(-1).tolist()
    assert inputs_seen == [13, 31, 32, 21, 41]


def test_sequences_longer_than_the_maximum_are_refused():
    with pytest.raises(ValueError, match=r"takes 6 tokens > training\.max_seq_len = 5"):
        make_batch([[1, 2, 3]], np.array([[4, 5, 9]]), np.array([3]), pad_id=0, max_len=5)


# the `numerics` and `hard_loss_reduction` switches

BF16 = torch.bfloat16
# Four completion steps of two examples (three and one) on a 40-token vocabulary, with targets that bf16 does not
# hold exactly.
STEP_EXAMPLE = torch.tensor([0, 0, 0, 1])
CHILDREN = [([3, 17], [0.3, 0.7]), ([5], [1.0]), ([8, 30], [0.45, 0.55]), ([0, 9, 21], [0.1, 0.25, 0.65])]


def _bf16_logits(seed: int = 1) -> torch.Tensor:
    """Logits near 20, where bf16 keeps 4 fractional bits, that nearly match the targets: small KLs, whose bf16
    values are fine enough to show a difference in any step of the arithmetic."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(len(CHILDREN), 40, generator=generator) * 2 + 10
    for step, (tokens, probs) in enumerate(CHILDREN):
        noise = 0.3 * torch.randn(len(tokens), generator=generator)
        logits[step, tokens] = torch.tensor(probs).log() + 20 + noise
    return logits.to(BF16)


def _children() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    steps = [torch.full((len(t),), s) for s, (t, _) in enumerate(CHILDREN)]
    tokens = [torch.tensor(t) for t, _ in CHILDREN]
    q = [torch.tensor(p, dtype=torch.float64) for _, p in CHILDREN]  # the tries hold float64 targets
    return torch.cat(steps), torch.cat(tokens), torch.cat(q)


def _release_soft_loss(logits: torch.Tensor, tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The authors' calibrate_sft/losses.py, op by op: per step the targets made a tensor of the logits' dtype,
    clamped, renormalized by their sum, KL against log_softmax(z / tau), summed; steps stacked and averaged per
    example; examples stacked and averaged."""
    per_step = []
    for z, (tokens, probs) in zip(logits, CHILDREN, strict=True):
        target = torch.as_tensor(list(probs), dtype=z.dtype)
        target = torch.clamp(target, min=1e-8)
        target = target / target.sum()
        selected = F.log_softmax(z / tau, dim=-1).index_select(-1, torch.tensor(tokens))
        per_step.append(torch.sum(target * (torch.log(target) - selected)))
    per_example = [torch.stack(per_step[:3]).mean(), torch.stack(per_step[3:]).mean()]
    return torch.stack(per_example), torch.stack(per_example).mean()


# Bit for bit on any CPU: both sides take the same bf16 ops, and each of their sums (2 or 3 bf16 values, in float32)
# is exact in float32, so no kernel's order of addition can move a bit; the seeds 0 to 299 all agree under torch's
# default and AVX2 kernels. Seed 2, once left out without a word, agrees as the others do.
@pytest.mark.parametrize("tau", [1.0, 0.7])
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_soft_kl_in_the_logits_dtype_is_the_release_computation(seed, tau):
    logits = _bf16_logits(seed)
    per_example, loss = _release_soft_loss(logits, tau)
    assert per_example.dtype == BF16
    mine = soft_target_kl(logits, STEP_EXAMPLE, *_children(), tau, numerics="logits_dtype")
    assert mine.dtype == BF16
    assert mine.tolist() == per_example.tolist()
    assert soft_target_loss(logits, STEP_EXAMPLE, *_children(), tau, numerics="logits_dtype").item() == loss.item()
    # float32 arithmetic on the same bf16 logits lands elsewhere: bf16 rounding moves these KLs by > 5e-4
    fp32 = soft_target_kl(logits, STEP_EXAMPLE, *_children(), tau, numerics="fp32")
    assert fp32.dtype == torch.float32
    assert (fp32 - per_example.float()).abs().max() > 5e-4
    assert fp32.tolist() == pytest.approx(per_example.float().tolist(), abs=0.02)  # the same KL otherwise


def test_soft_kl_numerics_agree_on_float32_logits():
    """On the CPU the models give float32 logits: both values compute the same thing there."""
    logits = _bf16_logits().float()
    fp32 = soft_target_kl(logits, STEP_EXAMPLE, *_children(), numerics="fp32")
    same = soft_target_kl(logits, STEP_EXAMPLE, *_children(), numerics="logits_dtype")
    assert same.dtype == torch.float32
    assert same.tolist() == pytest.approx(fp32.tolist(), rel=1e-6)
    with pytest.raises(ValueError, match="numerics"):
        soft_target_kl(logits, STEP_EXAMPLE, *_children(), numerics="bf16")


def _ragged_hard_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two completions of 1 and 3 tokens: step logits, targets and the example of each step."""
    logits = torch.randn(4, 7, generator=torch.Generator().manual_seed(2)) * 3
    return logits, torch.tensor([4, 1, 6, 2]), torch.tensor([0, 1, 1, 1])


def test_hard_loss_pools_tokens_or_averages_sequences():
    logits, target, example = _ragged_hard_case()
    z = logits.double().numpy()
    ce = [np.log(np.exp(z[i]).sum()) - z[i, t] for i, t in enumerate(target.tolist())]
    pooled, per_sequence = np.mean(ce), np.mean([ce[0], np.mean(ce[1:])])
    assert abs(pooled - per_sequence) > 0.1  # the case separates the two reductions
    tokens = completion_cross_entropy(logits, target, example, reduction="tokens")
    assert tokens.item() == pytest.approx(pooled, rel=1e-6)
    assert completion_cross_entropy(logits, target).item() == pytest.approx(pooled, rel=1e-6)  # the default
    sequences = completion_cross_entropy(logits, target, example, reduction="sequences")
    assert sequences.item() == pytest.approx(per_sequence, rel=1e-6)
    with pytest.raises(ValueError, match="step_example"):
        completion_cross_entropy(logits, target, reduction="sequences")
    with pytest.raises(ValueError, match="reduction"):
        completion_cross_entropy(logits, target, example, reduction="mean")


def test_hard_loss_in_the_logits_dtype_is_the_release_computation():
    """The authors' hard_label_sft/losses.py: `F.cross_entropy` over the padded [batch, length] bf16 logits,
    prompt and padding labelled -100."""
    logits, target, example = _ragged_hard_case()
    logits = (logits + 30).to(BF16)  # large logits: bf16 keeps few of their fractional bits
    padded = torch.zeros(2, 3, 7, dtype=BF16)
    labels = torch.full((2, 3), -100)
    padded[0, 0], labels[0, 0] = logits[0], target[0]
    padded[1], labels[1] = logits[1:], target[1:]
    release = F.cross_entropy(padded.view(-1, 7), labels.view(-1), ignore_index=-100)
    mine = completion_cross_entropy(logits, target, example, "tokens", "logits_dtype")
    assert mine.dtype == BF16 and mine.item() == release.item()
    fp32 = completion_cross_entropy(logits, target, example, "tokens", "fp32")
    assert abs(fp32.item() - release.item()) > 1e-3

    per_token = F.cross_entropy(logits, target, reduction="none")  # bf16 values, means accumulated in float32
    by_sequence = torch.stack([per_token[:1].mean(), per_token[1:].mean()]).mean()
    sequences = completion_cross_entropy(logits, target, example, "sequences", "logits_dtype")
    assert sequences.dtype == BF16 and sequences.item() == by_sequence.item()
