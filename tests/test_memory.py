"""GPU memory of the paper's jobs (calibft.pipeline.memory): the tracker on hand-counted tensors, the per-GPU arithmetic
on hand-computed cases, the committed measurements against a fresh one, and every job of config.yaml inside its GPUs."""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from pathlib import Path

import pytest
import torch

from calibft import cli
from calibft.lm import meta_models
from calibft.lm.models import fsdp_units
from calibft.pipeline import memory
from calibft.pipeline.config import read_config

ROOT = Path(__file__).resolve().parents[1]
CONFIG = read_config(ROOT / "config.yaml")


def test_the_tracker_counts_each_storage_once_while_a_tensor_holds_it():
    weights = torch.empty(10_000, device="meta")  # made before: not counted
    with memory.PeakTracker() as tracker:
        a = weights[:1000] * 2  # 4,000 bytes
        view = a[10:]  # no new storage
        b = a + 1  # 4,000 more
        assert (tracker.live, tracker.peak) == (8000, 8000)
        del a  # the view still holds a's storage
        assert tracker.live == 8000
        del view, b
        assert tracker.live == 0
        c = torch.empty(500, dtype=torch.float64, device="meta") + 0  # 4,000
        assert (tracker.live, tracker.peak) == (4000, 8000)
        del c


def _measured(peak: int, head: int) -> tuple[list[memory.Batch], memory.Measured]:
    train = memory.Batch("train_soft", "train_soft", rows=8, prompt=100)
    sampling = memory.Batch("structured", "decode", rows=10, prompt=50, new=5)
    measured = memory.Measured(
        weights=400 * 10**9,
        lora=40 * 10**9,
        root=10 * 10**9,
        layer=5 * 10**9,
        peaks={train: peak, sampling: peak},
        heads={sampling: head},
    )
    return [train, sampling], measured


def test_a_training_rank_holds_its_shards_the_gathered_units_and_the_activations():
    batches, measured = _measured(peak=100 * 10**9, head=30 * 10**9)
    entry = {"resources": {"gpus": 4, "gpu_model": "a100"}, "eval_resources": {"gpus": 2, "gpu_model": "h200"}}
    train, sampling = memory.job_memory("m", entry, batches, measured)
    # shards of weights and gradients 100 + 100, AdamW's LoRA states 2 x 40 / 4, root and two layers gathered
    # with their gradients 2 x 10 + 4 x 5, the activations 100
    assert train.weights_gb == 100
    assert train.batch_gb == 100 + 100 + 20 + 20 + 20
    assert train.estimate_gb == pytest.approx(360 * 1.1 + 2.0)
    assert (train.requested_gb, train.gpus) == (80.0, 4)
    # two GPUs share the weights and the layers' part of the peak; the last holds the logits (the head's part)
    assert sampling.weights_gb == 200
    assert sampling.batch_gb == 70 / 2 + 30
    assert sampling.estimate_gb == pytest.approx(265 * 1.1 + 2.0)
    assert sampling.requested_gb == 141.0


def test_headroom_is_what_the_estimate_leaves_of_the_gpu():
    batches, measured = _measured(peak=0, head=0)
    entry = {"resources": {"gpus": 4, "gpu_model": "a100"}, "eval_resources": {"gpus": 1, "gpu_model": "a100"}}
    light = memory.Measured(
        weights=int((72 - 2.0) / 1.1 * 10**9) - 1, lora=0, root=0, layer=0, peaks=measured.peaks, heads=measured.heads
    )
    fits = memory.job_memory("m", entry, batches[1:], light)[0]
    assert fits.headroom >= memory.HEADROOM and fits.fits
    heavy = memory.Measured(
        weights=int((72 - 2.0) / 1.1 * 10**9) + 10**8,
        lora=0,
        root=0,
        layer=0,
        peaks=measured.peaks,
        heads=measured.heads,
    )
    assert not memory.job_memory("m", entry, batches[1:], heavy)[0].fits


def test_a_meta_model_reads_no_mask_and_attends_as_sdpa(tiny_tokenizer):
    """The meta models attend with `META_SDPA`: on the meta device a padded batch runs (no mask's values are read),
    and on the CPU it gives sdpa's logits, with padding and without (where sdpa skips the all-ones mask)."""
    from transformers import Qwen3ForCausalLM

    from calibft.demo.tiny_model import TinyModelSettings, tiny_config

    config = tiny_config(TinyModelSettings(), tiny_tokenizer)
    on_meta = meta_models.meta_model(config.to_dict())
    assert on_meta.config._attn_implementation == meta_models.META_SDPA
    ids = torch.zeros(2, 12, dtype=torch.long, device="meta")
    assert on_meta(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.shape == (2, 12, len(tiny_tokenizer))
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).eval()
    ids = torch.randint(5, 50, (2, 12))
    padded = torch.ones_like(ids)
    padded[1, 8:] = 0
    for mask in (torch.ones_like(ids), padded):
        logits = {}
        for attention in ("sdpa", meta_models.META_SDPA):
            model.set_attn_implementation(attention)
            with torch.inference_mode():
                logits[attention] = model(input_ids=ids, attention_mask=mask).logits[mask.bool()]
        # float32 both ways; a skipped mask only changes which kernel sums the same terms, in another order
        torch.testing.assert_close(logits[meta_models.META_SDPA], logits["sdpa"], rtol=1e-5, atol=1e-5)


@functools.cache
def _paper_rows() -> tuple[memory.JobMemory, ...]:
    rows, _, left_out = memory.plan_memory(CONFIG, measure_missing=False)
    assert not left_out
    return tuple(rows)


def test_every_gpu_job_of_the_paper_fits_its_gpus_with_headroom():
    rows = _paper_rows()
    assert {row.model for row in rows} == {*CONFIG["models"], "evaluators"}
    tight = [f"{r.model} {r.job}: {r.estimate_gb:.1f} of {r.requested_gb:.0f} GB" for r in rows if not r.fits]
    assert not tight, f"jobs with less than {memory.HEADROOM:.0%} of their GPU memory free: {tight}"


def test_docs_cluster_holds_the_table_of_the_recorded_measurements():
    docs = (ROOT / "docs" / "cluster.md").read_text()
    assert memory.table(list(_paper_rows())) in docs, "regenerate it: calibft memory, pasted into docs/cluster.md"


@pytest.mark.slow
def test_the_recorded_measurements_are_what_measuring_again_gives():
    """The committed record is genuine: Llama-3.2-1B (the shallowest of the twelve) measured afresh on the meta
    device gives the same bytes, every batch of the paper's plan included."""
    recorded_digest, recorded = memory.read_record()["llama3_2_1b_it"]
    _, fresh, _ = memory.plan_memory(CONFIG, ["llama3_2_1b_it"], record={})
    digest, measured = fresh["llama3_2_1b_it"]
    assert digest == recorded_digest
    assert measured == recorded


@pytest.fixture(scope="module")
def training_inputs():
    return memory.training_inputs(CONFIG)


@pytest.mark.parametrize("model_key", sorted(CONFIG["models"]))
def test_every_gpu_job_runs_on_each_checkpoint_at_full_width(model_key, training_inputs):
    """Each recorded checkpoint, cut to one decoder layer at its full width, runs every batch of the paper's plan
    (LoRA attached for training), and what it holds is the recorded full-depth measurement's per layer: the
    decoder layers are alike, so the full model is the cut one plus its other layers, and each batch adds no
    more than it does at full depth."""
    checkpoint = meta_models.checkpoint_config(model_key, CONFIG["models"][model_key]["hf_id"])
    batches = memory.gpu_batches(CONFIG)
    cut = memory.measure(checkpoint, batches, CONFIG["training"]["lora"], training_inputs, layers=1)
    _, full = memory.read_record()[model_key]
    depth = checkpoint.get("text_config", checkpoint)["num_hidden_layers"]
    assert set(cut.peaks) == set(batches)
    assert all(cut.peaks[batch] > 0 for batch in batches)
    assert full.weights == cut.weights + (depth - 1) * cut.layer
    assert full.lora == depth * cut.lora  # LoRA adapts the decoder layers only
    assert (full.root, full.layer) == (cut.root, cut.layer)
    assert all(cut.peaks[batch] <= full.peaks[batch] for batch in batches)


@pytest.mark.parametrize("model_key", sorted(CONFIG["models"]))
def test_the_fsdp_units_are_those_accelerate_wraps(model_key, fsdp_env):
    """The root unit and the largest layer unit that the estimate counts are those of the units that
    launch/fsdp.yaml's TRANSFORMER_BASED_WRAP makes of the LoRA model `train.py` hands to `accelerator.prepare`,
    each checkpoint at full width (two decoder layers)."""
    from calibft.lm.models import attach_lora
    from tests.fsdp_policy import wrap_policy, wrapped_modules

    checkpoint = meta_models.checkpoint_config(model_key, CONFIG["models"][model_key]["hf_id"])
    root, layer = fsdp_units(meta_models.meta_model(checkpoint, 2))
    model = attach_lora(meta_models.meta_model(checkpoint, 2), CONFIG["training"]["lora"])
    units = wrapped_modules(model, wrap_policy(model, fsdp_env))
    frozen = {name: p for name, p in model.named_parameters() if not p.requires_grad}
    inside = {id(p) for unit in units.values() for p in unit.parameters()}
    assert root == sum(p.numel() * p.element_size() for p in frozen.values() if id(p) not in inside)
    sizes = [
        sum(p.numel() * p.element_size() for p in unit.parameters() if not p.requires_grad) for unit in units.values()
    ]
    assert layer == max(sizes)


@pytest.mark.parametrize("kernels_installed", [False, True])
def test_gpt_oss_loads_its_experts_in_bf16_on_an_a100_without_the_kernels_package(kernels_installed):
    """What transformers' own MXFP4 quantizer does with GPT-OSS-20B's recorded quantization_config on an A100
    (compute capability 8.0, Triton installed with CUDA torch): without the `kernels` package, which the pinned
    environment does not install, it dequantizes the experts to bf16, as `meta_models.as_loaded` builds the model;
    with it, they would stay in MXFP4."""
    from unittest import mock

    from transformers import AutoConfig
    from transformers.quantizers import AutoHfQuantizer, quantizer_mxfp4

    assert importlib.util.find_spec("kernels") is None
    assert not re.search(r"^kernels\b", (ROOT / "constraints.txt").read_text(), re.M)
    config = AutoConfig.from_pretrained(meta_models.CHECKPOINTS / "gpt_oss_20b")
    quantizer = AutoHfQuantizer.from_config(config.quantization_config, pre_quantized=True)
    with (
        mock.patch.object(quantizer_mxfp4, "get_current_accelerator", return_value=torch.device("cuda")),
        mock.patch.object(torch.xpu, "is_available", return_value=False),
        mock.patch.object(torch.cuda, "is_available", return_value=True),
        mock.patch.object(torch.cuda, "get_device_capability", return_value=(8, 0)),
        mock.patch.object(quantizer_mxfp4, "is_triton_available", return_value=True),
        mock.patch.object(quantizer_mxfp4, "is_kernels_available", return_value=kernels_installed),
    ):
        quantizer.validate_environment()
    assert quantizer.quantization_config.dequantize is not kernels_installed
    recorded = json.loads((meta_models.CHECKPOINTS / "gpt_oss_20b" / "config.json").read_text())
    experts = meta_models.meta_model(recorded, 1)
    gate_up = experts.model.layers[0].mlp.experts.gate_up_proj
    assert gate_up.dtype == torch.bfloat16 and gate_up.shape == (32, 2880, 2 * 2880)


def test_the_evaluators_are_built_at_their_published_sizes():
    """reference/evaluators/ (sources.yaml there): the reward model is Gemma-2-27B, keras-hub's 27,227,128,320
    parameters, with a score head of one output; the classifier DeBERTa-v3-large, its 128,100 x 1,024 embeddings
    and 24 layers, with a head of two."""
    configs = memory.evaluator_configs(CONFIG)
    reward = meta_models.meta_model(configs["reward_model"], classifier=True)
    assert type(reward).__name__ == "Gemma2ForSequenceClassification"
    assert sum(p.numel() for p in reward.parameters()) == 27_227_128_320 + 4_608
    classifier = meta_models.meta_model(configs["classifier"], classifier=True, dtype="float32")
    assert classifier.deberta.embeddings.word_embeddings.weight.shape == (128_100, 1_024)
    assert len(classifier.deberta.encoder.layer) == 24 and classifier.classifier.out_features == 2


def test_noveltybench_scoring_holds_both_evaluators_and_the_larger_batch():
    row = next(row for row in _paper_rows() if row.job == "noveltybench_scoring")
    weights = (27_227_132_928 * 2 + 435_063_810 * 4) / memory.GB  # bf16 reward model, fp32 classifier
    assert (row.model, row.gpus, row.requested_gb) == ("evaluators", 1, 80.0)
    assert row.weights_gb == pytest.approx(weights, rel=1e-12)
    # 4 chats of at most 1,552 tokens through 46 layers: more than a layer's attention scores, under 10 GB
    assert 4 * 32 * 1_552**2 * 2 / memory.GB < row.batch_gb < 10


def test_a_model_without_a_measurement_of_its_batches_is_named_with_the_command_to_make_it():
    config = json.loads(json.dumps(CONFIG))
    config["evaluation"]["mcq"]["sampling"]["batch_size"] += 1
    with pytest.raises(ValueError, match=r"qwen3_0p6b.*calibft memory --record"):
        memory.plan_memory(config, ["qwen3_0p6b"], measure_missing=False)


def test_the_cli_prints_the_table_for_the_models_asked(capsys):
    assert cli.main(["memory", "--config", str(ROOT / "config.yaml"), "--models", "qwen3_0p6b"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| model | job |") and "| qwen3_0p6b | train_soft | 4 |" in out
    assert "gemma3" not in out


def test_the_cli_names_an_unknown_model(capsys):
    assert cli.main(["memory", "--config", str(ROOT / "config.yaml"), "--models", "qwen9"]) != 0
    assert "qwen9: not among the models" in capsys.readouterr().err
