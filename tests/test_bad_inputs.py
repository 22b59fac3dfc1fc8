"""Bad inputs nobody had tried: each is fed to the function or command that reads it, and the error must name the
file, what is wrong and the fix, and leave what was already computed as it was. docs/reliability.md lists them
with their messages."""

from __future__ import annotations

import builtins
import copy
import errno
import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import calibft.core.io
from calibft.core.io import load_npz, read_jsonl, save_npz, write_json, write_jsonl
from calibft.data.grid import prompts, read_prompts
from calibft.data.output_space import SpaceSet, spaces_for_prompts
from calibft.pipeline.config import read_config

REPO = Path(__file__).resolve().parents[1]
REMAKE = r"if the workflow made it, delete it and rerun the rule that makes it \(snakemake --cores 1 "


def unchanged(path: Path, before: bytes) -> None:
    """The bad file is reported, never deleted or rewritten by the loader."""
    assert path.read_bytes() == before


@pytest.fixture(scope="module")
def space_file(tmp_path_factory) -> Path:
    chosen = prompts("ood")[:2]
    spaces = SpaceSet.from_spaces([p.id for p in chosen], spaces_for_prompts(chosen, 2, 16), decimals=2, max_bins=16)
    path = tmp_path_factory.mktemp("spaces") / "ood_d2_b16.npz"
    spaces.save(path)
    return path


# --- .npz of an output space or a trie ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "damage,reason",
    [
        (lambda b: b[: len(b) // 2], "File is not a zip file"),  # cut short: an interrupted copy
        (lambda b: b[:200] + b"\0" * 64 + b[264:], "Bad CRC-32|Bad magic|Error -3|not a readable"),  # bytes flipped
        (lambda b: b"", "it is empty"),
        (lambda b: b"<html>not found</html>", "not a zip archive"),  # a download that returned a web page
    ],
    ids=["truncated", "corrupted", "empty", "not-npz"],
)
@pytest.mark.parametrize("loader", ["space", "trie"])
def test_a_damaged_npz_names_the_file_and_the_rule_to_rerun(space_file, tmp_path, damage, reason, loader):
    from calibft.data.trie import TrieSet

    path = tmp_path / ("space.npz" if loader == "space" else "tries.npz")
    path.write_bytes(damage(space_file.read_bytes()))
    before = path.read_bytes()
    load = SpaceSet.load if loader == "space" else TrieSet.load
    with pytest.raises(ValueError, match=rf"{path} is not a readable \.npz file .*({reason}).*{REMAKE}{path}\)"):
        load(path)
    unchanged(path, before)


def test_an_npz_without_the_arrays_of_a_trie_set_names_them(space_file, tmp_path):
    from calibft.data.trie import TrieSet

    path = tmp_path / "tries.npz"
    path.write_bytes(space_file.read_bytes())  # an output space where a trie set belongs
    with pytest.raises(ValueError, match=rf"{path} lacks the arrays node_offsets, value_offsets, .*{REMAKE}"):
        TrieSet.load(path)
    arrays, _ = load_npz(space_file, required=("ids", "probs"))  # the good file still loads
    assert set(arrays) == {"ids", "offsets", "values", "probs"}


# --- JSON Lines: prompt and fixture files, gzip-compressed samples -----------------------------------------------


def test_a_prompts_line_that_is_not_json_names_the_file_and_the_line(tmp_path):
    path = tmp_path / "prompts" / "ood.jsonl"
    path.parent.mkdir()
    good = json.dumps({"id": "chi-000", "family": "chi", "params": {"df": 1.0}, "prompt": "..."})
    path.write_text(good + "\n" + good[:30] + "\n")
    with pytest.raises(ValueError, match=rf"{path}, line 2: not JSON \(.*\); {REMAKE}{path}\); if you wrote it, fix"):
        read_prompts(str(path))
    assert path.read_text().startswith(good)


def test_an_empty_prompts_file_is_refused_before_any_output_space(tmp_path):
    path = tmp_path / "ood.jsonl"
    path.write_text("\n")
    with pytest.raises(ValueError, match=rf"{path} holds no prompts; {REMAKE}"):
        read_prompts(str(path))


def test_a_prompts_line_of_another_shape_names_the_fields(tmp_path):
    path = tmp_path / "ood.jsonl"
    path.write_text(json.dumps({"id": "x", "family": "chi", "params": {}, "text": "..."}) + "\n")
    expected = "expected exactly the fields family, id, params, prompt"
    with pytest.raises(ValueError, match=rf"{path}: prompt 1 .* {expected}"):
        read_prompts(str(path))


def test_a_fixture_line_that_is_not_json_names_the_file_and_the_line(tmp_path):
    from calibft.evals.tinybench.runner import load_items

    path = tmp_path / "arc.jsonl"
    path.write_text('{"question": "q", "answer": 1}\n[1, 2]\n')
    with pytest.raises(ValueError, match=rf"{path}, line 2: a JSON list, not an object; .*fix or replace it"):
        load_items(path)


@pytest.mark.parametrize(
    "damage,reason",
    [(lambda b: b[: len(b) // 2], "Compressed file ended"), (lambda b: b"plain text\n", "Not a gzipped file")],
    ids=["cut-mid-gzip", "not-gzip"],
)
def test_a_truncated_samples_gz_names_the_file_and_how_far_it_read(tmp_path, damage, reason):
    path = tmp_path / "samples.jsonl.gz"
    write_jsonl(path, [{"prompt": i, "output": "x" * 40} for i in range(2000)])
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ValueError, match=rf"{path} is not a complete gzip file \(after line \d+: {reason}.*{REMAKE}"):
        read_jsonl(path)
    with gzip.open(path, "rb") as f, pytest.raises((EOFError, OSError)):
        f.read()  # the file is still there as it was, for a look


# --- the configuration ----------------------------------------------------------------------------------------


def test_a_model_without_a_tokenizer_fails_schema_validation_naming_the_key_and_the_choices():
    from calibft.pipeline.config import validate_config

    config = read_config(REPO / "config.yaml")
    model = next(iter(config["models"]))
    del config["models"][model]["tokenizer"]
    expected = (
        rf"my.yaml: models\.{model}\.tokenizer is missing \('tokenizer' is a required property\); "
        rf"add models\.{model}\.tokenizer: a key of `tokenizers`"
    )
    with pytest.raises(ValueError, match=rf"{expected} \(known: {', '.join(config['tokenizers'])}\)"):
        validate_config(copy.deepcopy(config), str(REPO / "schemas" / "config.schema.yaml"), "my.yaml")


def test_an_exact_tolerance_out_of_range_fails_schema_validation_naming_the_key():
    from calibft.pipeline.config import validate_config

    config = read_config(REPO / "config.yaml")
    config["evaluation"]["exact"]["tolerance"]["w1_norm"] = 1.5
    with pytest.raises(ValueError, match=r"my\.yaml: evaluation\.exact\.tolerance\.w1_norm"):
        validate_config(copy.deepcopy(config), str(REPO / "schemas" / "config.schema.yaml"), "my.yaml")


@pytest.mark.workflow
def test_the_workflow_stops_on_a_model_without_a_tokenizer_before_any_job(tmp_path):
    entry = dict(next(iter(read_config(REPO / "config.yaml")["models"].values())))
    del entry["tokenizer"]
    entry["family"] = "My-family"  # of no model_families entry, which would give it a tokenizer
    extra = tmp_path / "mine.yaml"
    extra.write_text(yaml.safe_dump({"models": {"my_model": entry}}))
    snakemake = Path(sys.executable).parent / "snakemake"
    result = subprocess.run(
        [str(snakemake), "--dry-run", "--quiet", "--configfile", str(extra)], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode != 0
    missing = "models.my_model.tokenizer is missing ('tokenizer' is a required property)"
    assert f"{extra} and config.yaml: {missing}; add models.my_model.tokenizer" in (result.stderr + result.stdout)
    assert "Building DAG" not in result.stderr + result.stdout  # stopped while reading the config


# --- an adapter trained on another base model ---------------------------------------------------------------


def test_an_adapter_of_another_base_model_is_refused_naming_both(tmp_path):
    from calibft.demo.tiny_model import build_tiny_model
    from calibft.lm.models import attach_lora, load_for_inference, load_model

    base = build_tiny_model(tmp_path / "base", train_steps=0)
    lora = yaml.safe_load((REPO / "config.yaml").read_text())["training"]["lora"]
    adapter = tmp_path / "adapters" / "soft"
    attach_lora(load_model(str(base), "fp32", "cpu"), lora).save_pretrained(adapter)
    other = build_tiny_model(tmp_path / "other", train_steps=0)
    before = {p.name: p.read_bytes() for p in adapter.iterdir()}
    with pytest.raises(
        ValueError,
        match=rf"the adapter {adapter} was trained on '{base}', not on the configured model '{other}' .*"
        rf"evaluate it with the model it was trained on, or delete {adapter} and retrain it",
    ):
        load_for_inference(str(other), "fp32", adapter)
    assert {p.name: p.read_bytes() for p in adapter.iterdir()} == before
    assert load_for_inference(str(base), "fp32", adapter) is not None  # its own base model loads it


def test_a_hub_id_and_its_snapshot_folder_are_the_same_base_model(tmp_path):
    from calibft.lm.models import check_adapter_base

    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "Qwen/Qwen3-0.6B"}))
    check_adapter_base(tmp_path, "resources/hf/models/Qwen/Qwen3-0.6B")
    refused = r"trained on 'Qwen/Qwen3-0\.6B', not on the configured model 'Qwen/Qwen3-1\.7B'"
    with pytest.raises(ValueError, match=refused):
        check_adapter_base(tmp_path, "Qwen/Qwen3-1.7B")


# --- calibft gpirt --scores -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scores,problem",
    [
        ([0.5] * 99, "expected 100 item scores, got 99"),
        ([0.5] * 99 + [1.5], "item scores must lie in \\[0, 1\\]; item 99 is 1.5"),
        ([-0.1] + [0.5] * 99, "item 0 is -0.1"),
        ("[" + ", ".join(["0.5"] * 99 + ["NaN"]) + "]", "item 99 is nan"),
        ([0.5] * 99 + ["0.5"], "must hold a JSON list of numbers \\(an item is '0.5'\\)"),
        ({"scores": [0.5] * 100}, "must hold a JSON list of numbers \\(got a JSON dict\\)"),
    ],
    ids=["99-items", "above-1", "below-0", "nan", "a-string", "a-dict"],
)
def test_gpirt_scores_name_the_file_the_item_and_the_fix(capsys, tmp_path, scores, problem):
    from calibft.cli import main

    path = tmp_path / "scores.json"
    path.write_text(scores if isinstance(scores, str) else json.dumps(scores))
    params = tmp_path / "untouched.pkl"  # the scores are checked first: the parameters are never opened
    code = main(["gpirt", "--params", str(params), "--task", "arc", "--scores", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and str(path) in err and len(err.splitlines()) == 1
    assert re.search(problem, err), err
    assert "write the 100 item scores of the task's anchors, in dataset row order, each in [0, 1]" in err


# --- an evaluator snapshot missing a file ---------------------------------------------------------------------


def _snapshot(folder: Path, files: dict[str, str]) -> None:
    records = folder / ".cache" / "huggingface" / "download"
    records.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
        (records / f"{name}.metadata").write_text("0" * 40 + "\netag\n0\n")


def test_an_evaluator_snapshot_missing_a_file_names_it_and_the_fetch(tmp_path):
    from calibft.lm.models import load_classifier, load_tokenizer

    folder = tmp_path / "resources" / "hf" / "classifier"
    _snapshot(folder, {"config.json": "{}", "model.safetensors": "", "tokenizer.json": "{}"})
    (folder / "model.safetensors").unlink()
    (folder / "tokenizer.json").unlink()
    message = (
        rf"{folder} is missing model.safetensors, tokenizer.json, which its download holds: the snapshot is "
        rf"incomplete\. Delete {folder} and fetch it again \(snakemake --cores 1 {folder}\)"
    )
    with pytest.raises(FileNotFoundError, match=message):
        load_classifier(folder, "fp32")
    with pytest.raises(FileNotFoundError, match=message):
        load_tokenizer(folder)
    assert (folder / "config.json").read_text() == "{}"


def test_a_classifier_folder_without_config_names_the_folder_and_the_fix(tmp_path):
    from calibft.lm.models import load_classifier

    with pytest.raises(FileNotFoundError, match=rf"cannot load a classifier from '{tmp_path}' .*delete it and fetch"):
        load_classifier(tmp_path, "fp32")


# --- a full disk ----------------------------------------------------------------------------------------------


def _disk_fills_up(monkeypatch, after: int = 0) -> None:
    """Every file calibft.core.io opens for writing takes `after` bytes, then the disk is full."""
    real_open = builtins.open

    class Full:
        def __init__(self, f):
            self._f, self._left = f, after

        def write(self, data):
            if len(data) > self._left:
                raise OSError(errno.ENOSPC, "No space left on device")
            self._left -= len(data)
            return self._f.write(data)

        def __getattr__(self, name):
            return getattr(self._f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._f.close()

    def opener(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        return Full(f) if any(m in mode for m in "wax") else f

    monkeypatch.setattr(calibft.core.io, "open", opener, raising=False)


@pytest.mark.parametrize("kind", ["json", "jsonl.gz", "npz"])
def test_a_full_disk_keeps_the_previous_output_and_says_where(monkeypatch, tmp_path, kind):
    path = tmp_path / "results" / f"metrics.{kind}"
    write = {
        "json": lambda: write_json(path, {"kl": list(range(2000))}),
        "jsonl.gz": lambda: write_jsonl(path, [{"kl": i} for i in range(2000)]),
        "npz": lambda: save_npz(path, {"probs": np.arange(5000.0)}, {"decimals": 2}),
    }[kind]
    write()
    before = path.read_bytes()
    _disk_fills_up(monkeypatch, after=100)
    with pytest.raises(OSError, match=rf"the disk is full: no space left in {path.parent} while writing {path}") as err:
        write()
    assert err.value.errno == errno.ENOSPC and "Free space there" in str(err.value)
    assert path.read_bytes() == before  # the previous output is intact
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # and no partial file is left


def test_a_full_disk_while_building_a_folder_keeps_the_previous_folder(monkeypatch, tmp_path):
    from calibft.core.io import atomic_folder

    folder = tmp_path / "tables"
    with atomic_folder(folder) as built:
        (built / "a.json").write_text("old")
    _disk_fills_up(monkeypatch)
    with pytest.raises(OSError, match=rf"the disk is full: no space left in {tmp_path} while writing {folder}"):
        with atomic_folder(folder) as built:
            write_json(built / "a.json", {"new": 1})
    assert (folder / "a.json").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["tables"]


# --- the reference CSV of `calibft reference` -------------------------------------------------------------------


@pytest.mark.parametrize(
    "edit,problem",
    [
        (lambda row: row + ",extra", "10 fields where the header has 9"),
        (lambda row: ",".join(row.split(",")[:4]), "4 fields where the header has 9"),
        (lambda row: row.replace(",False", "").rsplit(",", 2)[0] + ",0.5x,0.005,False", "value '0.5x' is not a number"),
    ],
    ids=["extra-field", "short-row", "not-a-number"],
)
def test_a_malformed_reference_row_names_the_file_and_the_line(edit, problem):
    from calibft.artifacts.reference import read_csv

    lines = (REPO / "reference" / "paper.csv").read_text().splitlines()
    lines[5] = edit(lines[5])
    with pytest.raises(ValueError, match=rf"mine\.csv, line 6: {problem}; fix that line, or write the file again"):
        list(read_csv("\n".join(lines) + "\n", "mine.csv"))


def test_a_reference_csv_without_its_header_names_the_missing_columns():
    from calibft.artifacts.reference import read_csv

    with pytest.raises(ValueError, match=r"mine\.csv, line 1: the header lacks the columns .*tolerance, bold; fix"):
        list(read_csv("artifact,panel,block,row,column,printed,value\nx,,,r,c,1,1\n", "mine.csv"))
