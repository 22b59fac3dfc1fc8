"""`make gpu-check`'s CPU mode (benchmarks/gpu_check.py without CUDA): every part (benchmarks/gpu/) runs at toy
sizes and its report holds figures that make sense, so that the script a person takes to a GPU has run end to end."""

import json
import math

import pytest
import torch

from benchmarks import gpu_check
from benchmarks.gpu.consistency import TOLERANCE
from benchmarks.gpu.exact import space_label
from benchmarks.gpu.models import MODELS


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[dict, str]:
    """The CPU mode's gpu_check.json and gpu_check.md, on any machine: CUDA is hidden from the script. The mode
    sets torch's threads to one; the worker's next tests get theirs back."""
    out = tmp_path_factory.mktemp("gpu_check")
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.cuda, "is_available", lambda: False)
        try:
            returned = gpu_check.main(["--out", str(out)])
        finally:
            torch.set_num_threads(threads)
    written = json.loads((out / "gpu_check.json").read_text())
    assert written == json.loads(json.dumps(returned))
    return written, (out / "gpu_check.md").read_text()


def test_the_cpu_mode_says_what_its_figures_are(report):
    data, text = report
    assert data["mode"] == "cpu-tiny"
    assert data["note"] == gpu_check.CPU_TINY_NOTE
    assert gpu_check.CPU_TINY_NOTE in text
    assert (data["device"], data["dtype"], data["tiny"], data["layers"]) == ("cpu", "float32", True, 1)
    for key in ("torch", "transformers", "peft", "accelerate", "date"):
        assert data[key]
    assert [m["model"] for m in data["models"]] == list(MODELS)


def test_every_model_samples_walks_the_trie_and_trains(report):
    data, _ = report
    for model in data["models"]:
        sampling, exact, training = model["sampling"], model["exact"], model["training"]
        assert sampling["engine_answers_per_s"] > 0 and sampling["plain_answers_per_s"] > 0
        assert exact["space"] == space_label("d2_b1001")
        assert exact["seconds_per_prompt"] > 0 and exact["forwarded_tokens_per_prompt"] > 0
        # the values' probabilities, float64 sums of float32 terms, cannot exceed 1 beyond rounding
        assert all(0 < total <= 1 + 1e-9 for total in exact["probability_on_space"])
        for objective in ("soft", "hard"):
            assert training[f"{objective}_losses_finite"]
            assert all(math.isfinite(loss) for loss in training[f"{objective}_losses"])
            assert training[f"{objective}_ms_per_step"] > 0
        # calibft.pipeline.memory's estimate of each batch: the weights and what the batch adds (LoRA's state in
        # training)
        weights = model["weights_bytes"] / 1e9
        estimated = model["estimated_peak_gb"]
        assert set(estimated) == {"engine_peak_gb", "exact_peak_gb", "soft_peak_gb", "hard_peak_gb"}
        assert all(value > weights for value in estimated.values())


def test_bf16_logits_are_within_their_tolerance_of_float32_and_a_seed_repeats(report):
    data, _ = report
    (comparison,) = data["consistency"]["comparisons"]
    assert (comparison["tested"], comparison["against"]) == ("cpu bfloat16", "cpu float32")
    assert comparison["tolerance"] == TOLERANCE["bfloat16"][0]
    assert 0 < comparison["logits_relative_rms_difference"] <= comparison["tolerance"]
    assert comparison["within_tolerance"]
    # the engine promises the same answers for the same seed on one device; across dtypes only a fraction agree
    assert comparison["repeat_identical_answers"] == 1.0
    assert 0 <= comparison["identical_answers"] <= comparison["identical_first_tokens"] <= 1


def test_the_markdown_has_a_row_per_model_and_one_per_comparison(report):
    data, text = report
    for name in MODELS:  # the figures, then the peaks against their estimates
        assert sum(line.startswith(f"| {name} |") for line in text.splitlines()) == 2
    assert sum(line.startswith("| cpu bfloat16 | cpu float32 |") for line in text.splitlines()) == 1
    assert data["exact_space"] in text
