import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from calibft.cli import main
from calibft.data.grid import prompts
from calibft.data.output_space import build_output_space


def run(capsys, *argv: str) -> tuple[int, list[dict], str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines()], err


def test_prompts_lists_the_split_in_grid_order(capsys):
    code, records, _ = run(capsys, "prompts", "ood")
    assert code == 0
    assert records == [{"id": p.id, "family": p.family, "params": p.params, "prompt": p.prompt} for p in prompts("ood")]


def test_space_of_selected_ids(capsys):
    code, records, _ = run(capsys, "space", "unseen", "--decimals", "5", "--max-bins", "1001", "--id", "gamma-000")
    assert code == 0 and len(records) == 1 and records[0]["id"] == "gamma-000"
    expected = build_output_space("gamma", {"alpha": 7.0, "beta": 7.0}, 5, 1001)
    assert records[0]["values"] == expected.strings()
    np.testing.assert_array_equal(records[0]["probs"], expected.probs)


def test_trie_lists_every_inner_prefix_with_its_children(capsys, bpe_tokenizer, tmp_path):
    bpe_tokenizer.save_pretrained(tmp_path / "tok")
    args = ["trie", "ood", "--tokenizer", str(tmp_path / "tok"), "--decimals", "2", "--max-bins", "64"]
    code, records, _ = run(capsys, *args, "--id", "chi-001")
    assert code == 0
    assert records[0]["prefix"] == [] and records[0]["mass"] == pytest.approx(1.0)
    for record in records:
        assert sum(child["q"] for child in record["children"]) == pytest.approx(1.0)
        assert record["text"] == bpe_tokenizer.decode(record["prefix"])
    eos_children = [c for r in records for c in r["children"] if c["token"] == bpe_tokenizer.eos_token_id]
    assert len(eos_children) == len(build_output_space("chi", {"df": 5.0}, 2, 64).probs)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["space", "train", "--decimals", "9", "--max-bins", "10"], "decimals must be an integer in 0..8"),
        (["space", "train", "--decimals", "2", "--max-bins", "1"], "max_bins must be an integer of at least 2"),
        (["space", "ood", "--decimals", "2", "--max-bins", "10", "--id", "chi-007"], "unknown prompt id(s) chi-007"),
        (["trie", "ood", "--tokenizer", "/nonexistent/tok", "--decimals", "2", "--max-bins", "9", "--id", "chi-000"],
         "cannot load a tokenizer from '/nonexistent/tok'"),
    ],
)  # fmt: skip
def test_errors_are_clear_and_exit_non_zero(capsys, argv, message):
    code, records, err = run(capsys, *argv)
    assert code == 2 and records == []
    assert message in err


def test_tokenizer_without_eos_is_an_error(capsys, tmp_path):
    from tests.conftest import make_bpe_tokenizer

    make_bpe_tokenizer(eos=None).save_pretrained(tmp_path / "no_eos")
    args = ["trie", "ood", "--tokenizer", str(tmp_path / "no_eos"), "--decimals", "1", "--max-bins", "9"]
    code, _, err = run(capsys, *args, "--id", "chi-000")
    assert code == 2 and "has no EOS token" in err


def test_unknown_split_is_refused_by_the_console_script():
    result = subprocess.run([sys.executable, "-m", "calibft.cli", "prompts", "test"], capture_output=True, text=True)
    assert result.returncode == 2 and "invalid choice: 'test'" in result.stderr


def test_cpu_reports_the_kernels_and_runs_a_command_as_on_a_cpu_without_avx512(capsys):
    code, records, _ = run(capsys, "cpu")
    assert code == 0 and records[0]["numpy_avx512_kernels"] == []  # importing calibft turned them off
    assert records[0]["machine"] and records[0]["torch_capability"]
    emulated = subprocess.run(
        [str(Path(sys.executable).parent / "calibft"), "cpu", "--as-avx2", "calibft", "cpu"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"},
    )
    assert emulated.returncode == 0, emulated.stderr
    assert json.loads(emulated.stdout)["torch_capability"] == "AVX2"
    code, _, err = run(capsys, "cpu", "--as-avx2")
    assert code == 2 and "--as-avx2 needs a command to run" in err


def test_reference_writes_the_committed_numbers(capsys):
    repo = Path(__file__).resolve().parents[1]
    code = main(["reference", str(repo / "reference" / "paper_tables.tex")])
    assert code == 0 and capsys.readouterr().out == (repo / "reference" / "paper.csv").read_text()
