import numpy as np
import pytest
import torch

from calibft.objectives import completion_cross_entropy, completion_logits, make_batch, soft_target_loss


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
