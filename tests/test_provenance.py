import hashlib
import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

import calibft.core.io
from calibft.core.protocol import resolve
from calibft.core.provenance import FILENAME, git_state, provenance, write_provenance
from calibft.evals.job import ModelJob
from calibft.evals.noveltybench.job import ScoringJob
from calibft.training.job import TrainJob

REPO = Path(__file__).resolve().parents[1]
PAPER = yaml.safe_load((REPO / "config.yaml").read_text())
RECIPE, TRAINING = PAPER["recipes"]["soft"], PAPER["training"]


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    """A randomly initialised two-layer Llama with a word-level tokenizer, saved as a Hugging Face folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("tiny") / "model"
    vocab = {token: i for i, token in enumerate(["<unk>", "</s>", *"0123456789"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>", unk_token="<unk>").save_pretrained(folder)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


def _job(model: str, tmp_path: Path, **kw) -> ModelJob:
    return ModelJob(
        model=model,
        model_key="tiny",
        tokenizer=model,
        chat={},
        condition="base",
        seed=7,
        precision="fp32",
        sampling={"samples_per_prompt": 2, "max_new_tokens": 4, "temperature": 1.0, "top_p": 1.0, "batch_size": 2},
        out_dir=str(tmp_path / "out"),
        protocol=resolve({"preset": "as_written"}),
        **kw,
    )


def test_provenance_of_a_job_with_a_local_tiny_model(tiny_folder, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"r": 4}')
    (adapter / "adapter_model.safetensors").write_bytes(b"\0" * 128)
    items = tmp_path / "items.jsonl"
    items.write_text('{"q": 1}\n')
    locks = tmp_path / "locks"
    (locks / "datasets").mkdir(parents=True)
    (locks / "datasets" / "tinyBenchmarks__tinyMMLU.json").write_text(json.dumps({"commit": "a" * 40}))
    job = _job(str(tiny_folder), tmp_path, adapter=str(adapter))
    model, tokenizer = AutoModelForCausalLM.from_pretrained(tiny_folder), AutoTokenizer.from_pretrained(tiny_folder)
    generation = {"temperature": 1.0, "top_p": 1.0, "top_k": None, "do_sample": True}

    record = provenance(
        job,
        generation=generation,
        model=model,
        tokenizer=tokenizer,
        inputs={"items": items},
        seeds={"open_ended": 1234},
        lock_dir=locks,
        extra={"note": Path("x"), "set": {2, 1}},
    )

    assert json.loads(json.dumps(record)) == record  # plain JSON
    assert record["protocol"] == resolve({"preset": "as_written"}) == job.protocol
    assert record["generation"] == generation and record["seeds"] == {"job": 7, "open_ended": 1234}
    assert record["job"]["model_key"] == "tiny" and record["job_type"] == "calibft.evals.job.ModelJob"
    local = record["models"]["model"]
    assert local["path"] == str(tiny_folder.resolve()) and local["kind"] == "folder"
    names = [name for name, _, _ in local["files"]]
    assert "config.json" in names and "model.safetensors" in names
    assert "config.json" in local["sha256"] and "tokenizer.json" in local["sha256"]
    assert "model.safetensors" not in local["sha256"]  # weights are listed, never hashed
    assert record["models"]["tokenizer"]["sha256"] == local["sha256"]
    assert set(record["models"]["adapter"]["sha256"]) == {"adapter_config.json"}
    assert record["datasets"]["locks"] == {"datasets/tinyBenchmarks__tinyMMLU.json": {"commit": "a" * 40}}
    assert record["datasets"]["inputs"]["items"]["sha256"] == hashlib.sha256(items.read_bytes()).hexdigest()
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert record["pipeline"]["commit"] == head.strip() and isinstance(record["pipeline"]["dirty"], bool)
    packages = record["packages"]
    assert packages["python"] and packages["transformers"] and packages["torch"] and packages["calibft"] == "0.1.0"
    assert set(packages) >= {"peft", "accelerate", "numpy", "scipy", "datasets", "tokenizers"}
    assert "NPY_DISABLE_CPU_FEATURES" in record["cpu"]["env"]
    assert record["host"] and record["time_utc"].endswith("+00:00")
    assert record["extra"] == {"note": "x", "set": [1, 2]}


def test_hub_ids_record_the_commit_that_was_loaded(tmp_path, monkeypatch):
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    (cache / "models--org--cached" / "refs").mkdir(parents=True)
    (cache / "models--org--cached" / "refs" / "main").write_text("c" * 40 + "\n")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)  # no folder named like the ids here

    record = provenance(_job("org/cached", tmp_path), lock_dir=None)
    assert record["models"]["model"] == {
        "source": "org/cached",
        "hub_id": "org/cached",
        "commit": "c" * 40,
        "commit_from": "huggingface cache refs/main",
    }
    loaded = SimpleNamespace(config=SimpleNamespace(_commit_hash="d" * 40), name_or_path="org/cached")
    record = provenance(_job("org/cached", tmp_path), model=loaded, revisions={"tokenizer": "e" * 40})
    assert (
        record["models"]["model"]["commit"] == "d" * 40 and record["models"]["model"]["commit_from"] == "loaded object"
    )
    assert (
        record["models"]["tokenizer"]["commit"] == "e" * 40 and record["models"]["tokenizer"]["commit_from"] == "caller"
    )
    assert provenance(_job("org/unknown", tmp_path))["models"]["model"]["commit"] is None


def test_any_job_dataclass(tmp_path):
    scoring = ScoringJob(
        model_key="tiny",
        condition="base",
        split="curated",
        generations=str(tmp_path / "g.jsonl.gz"),
        classifier="org/classifier",
        classifier_tokenizer="org/classifier",
        reward_model="org/reward",
        precision="fp32",
        out_dir=str(tmp_path),
    )
    record = provenance(scoring, lock_dir=None)
    assert record["seeds"] == {"job": None} and record["generation"] is None
    assert set(record["models"]) == {"classifier", "classifier_tokenizer", "reward_model"}
    assert record["protocol"] == scoring.protocol

    train = TrainJob(
        model="org/base",
        tokenizer="org/base",
        chat={},
        recipe=RECIPE,
        training=TRAINING,
        seed=3,
        train_data="t",
        probe_tries="p",
        out_dir=str(tmp_path),
        checkpoint_dir=str(tmp_path / "c"),
    )
    assert provenance(train)["seeds"] == {"job": 3}

    @dataclass(frozen=True)
    class Bare:  # no protocol, seed or models
        out_dir: str
        options: dict = field(default_factory=dict)

    record = provenance(Bare(str(tmp_path)))
    assert record["protocol"] is None and record["models"] == {} and record["seeds"] == {"job": None}


def test_git_state_outside_a_checkout_is_none(tmp_path):
    (tmp_path / "calibft").mkdir()
    assert git_state(tmp_path / "calibft") is None
    assert git_state()["root"] == str(REPO)


def test_write_provenance_is_atomic(tmp_path, monkeypatch):
    job = _job("org/model", tmp_path)
    path = write_provenance(tmp_path / "out", job, generation={"temperature": 1.0})
    assert path == tmp_path / "out" / FILENAME
    before = path.read_text()
    assert json.loads(before)["generation"] == {"temperature": 1.0}

    def broken_dump(obj, f, **kw):
        f.write('{"partial": ')
        raise OSError("disk full")

    monkeypatch.setattr(calibft.core.io.json, "dump", broken_dump)
    with pytest.raises(OSError, match="disk full"):
        write_provenance(tmp_path / "out", job)
    assert path.read_text() == before  # the earlier file is untouched
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [FILENAME]  # no temporary file left
    with pytest.raises(OSError, match="disk full"):
        write_provenance(tmp_path / "fresh", job)
    assert list((tmp_path / "fresh").iterdir()) == []
