import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from calibft.evals.structured.ssot import (
    GPT_OSS_STRUCTURED_PROMPT,
    STRUCTURED_PROMPT,
    STYLES,
    ReleaseStyle,
    extract_answer,
    read_prompts,
    system_message,
)
from calibft.pipeline.assets import SSOT_PROMPTS, Asset

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "profiles" / "demo" / "fixtures" / "ssot" / "ssot_prompts.py"
# The release's file at the pinned commit, byte for byte (tests/fixtures/release_ssot/README.md); `.txt`, so that
# no tool takes it for this repository's code
RELEASE_FILE = ROOT / "tests" / "fixtures" / "release_ssot" / "ssot_prompts.py.txt"
RELEASE_PATH = "src/random_steering/inference/ssot_prompts.py"
NAMES = {"_PIF_SYSTEM_PROMPT", "_DAG_SYSTEM_PROMPT", "_GPT_OSS_PIF_DEVELOPER_PROMPT", "_GPT_OSS_DAG_DEVELOPER_PROMPT"}


def _release_blob() -> bytes:
    return RELEASE_FILE.read_bytes()


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prompts.py"
    path.write_text(text, encoding="utf-8")
    return path


# --- the prompt file ------------------------------------------------------------------------------------------


def test_fixture_has_the_release_names_in_the_projects_words():
    prompts = read_prompts(FIXTURE)
    assert set(prompts) == NAMES
    for name, text in prompts.items():
        assert text == text.strip() and text, name  # `.strip()` applied
    for name in ("_PIF_SYSTEM_PROMPT", "_DAG_SYSTEM_PROMPT"):
        assert all(tag in prompts[name] for tag in ("<random_string>", "<thinking>", "<answer>")), name
    for name in ("_GPT_OSS_PIF_DEVELOPER_PROMPT", "_GPT_OSS_DAG_DEVELOPER_PROMPT"):
        assert "<answer>" not in prompts[name] and "analysis" in prompts[name], name


def test_asset_points_at_the_pinned_release_file():
    assert isinstance(SSOT_PROMPTS, Asset)
    assert SSOT_PROMPTS.url.endswith(f"/a09d46dc5f6a87c39b85b8ec524c7904284bc2ab/{RELEASE_PATH}")
    assert SSOT_PROMPTS.url.startswith("https://raw.githubusercontent.com/chandar-lab/calibration-finetuning/")


def test_asset_sha256_is_the_release_blobs():
    assert hashlib.sha256(_release_blob()).hexdigest() == SSOT_PROMPTS.sha256


def test_reads_the_release_file(tmp_path):
    path = tmp_path / SSOT_PROMPTS.filename
    path.write_bytes(_release_blob())
    prompts = read_prompts(path)  # imports from __future__/typing and build_system_prompt are skipped
    assert set(prompts) == NAMES
    assert "<answer>" in prompts[STRUCTURED_PROMPT] and "<answer>" not in prompts[GPT_OSS_STRUCTURED_PROMPT]


# Runs the release's file, in a child interpreter of its own (-I: no site, no user paths): the test's check of the
# reading, never the library's way (which reads it with `ast`). The file was checked against the pin first.
RUN_RELEASE = """
import json, runpy, sys
module = runpy.run_path(sys.argv[1])
prompts = {name: value for name, value in module.items() if isinstance(value, str) and not name.startswith("__")}
build = module["build_system_prompt"]
chosen = {family: build("pif_numeric", model_family=family) for family in ("gpt_oss", None)}
print(json.dumps({"prompts": prompts, "pif_numeric": {str(k): v for k, v in chosen.items()}}))
"""


def test_the_reading_is_the_release_modules_own_values(tmp_path):
    """read_prompts gives the strings that the release's module holds once run, and STYLES names the prompt that
    its build_system_prompt picks for structured sampling (`pif_numeric`), for GPT-OSS and for every other family."""
    assert hashlib.sha256(_release_blob()).hexdigest() == SSOT_PROMPTS.sha256  # only the pinned bytes are run
    path = tmp_path / SSOT_PROMPTS.filename
    path.write_bytes(_release_blob())
    child = subprocess.run([sys.executable, "-I", "-c", RUN_RELEASE, str(path)], capture_output=True, text=True)
    assert child.returncode == 0, child.stderr
    released = json.loads(child.stdout)
    prompts = read_prompts(path)
    assert prompts == released["prompts"]
    assert released["pif_numeric"] == {
        "gpt_oss": prompts[STYLES["gpt_oss"].prompt],
        "None": prompts[STYLES["default"].prompt],
    }


def test_literal_forms(tmp_path):
    path = _write(
        tmp_path,
        '"""Docstring."""\n'
        "from __future__ import annotations\n"
        "from typing import Any\n"
        "A = 'one'\n"
        "B = ('two '\n     'parts')\n"
        'C: str = """\n  three\n""".strip()\n'
        "D = '  four  '.lstrip()\n"
        "E = '  five  '.rstrip().strip()\n"
        "def helper(mode: Any) -> str:\n    return open('marker', 'w')\n",
    )
    assert read_prompts(path) == {"A": "one", "B": "two parts", "C": "three", "D": "four  ", "E": "five"}


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("X = f\"{open('MARKER', 'w').write('x')}\"\n", r"'X' is an f-string"),
        ("X = open('MARKER', 'w').write('x')\n", r"'X' is a Call expression"),
        ("X = 'a'.strip('a')\n", r"'X' is a Call expression"),
        ("X = 'a'.replace('a', 'b')\n", r"'X' is a Call expression"),
        ("import os\nX = 'a'\n", r"an import"),
        ("from os import system\nX = 'a'\n", r"an import"),
        ("from . import x\nX = 'a'\n", r"an import"),
        ("X = 3\n", r"'X' is a int constant"),
        ("X = b'bytes'\n", r"'X' is a bytes constant"),
        ("X = None\n", r"'X' is a NoneType constant"),
        ("X = 'a' + 'b'\n", r"'X' is a BinOp expression"),
        ("Y = 'a'\nX = Y\n", r"'X' is a Name expression"),
        ("X = Y = 'a'\n", r"an assignment to X, Y"),
        ("X, Y = 'a', 'b'\n", r"an assignment to \(X, Y\)"),
        ("X = 'a'\nX = 'b'\n", r"'X' is assigned a second time"),
        ("X = 'a'\ndef X():\n    pass\n", r"redefines a prompt"),
        ("X: str\n", r"annotated without a value"),
        ("X = 'a'\nopen('MARKER', 'w').write('x')\n", r"a Expr statement"),
        ("X = 'a'\nraise SystemExit(3)\n", r"a Raise statement"),
        ("X = 'a'\nif True:\n    X = 'b'\n", r"a If statement"),
        ("class X:\n    pass\n", r"a ClassDef statement"),
        ("'just a docstring'\n", r"assigns no strings"),
        ("X = 'unterminated\n", r"not valid Python"),
    ],
)
def test_anything_else_raises_and_nothing_runs(tmp_path, monkeypatch, source, message):
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, source)
    with pytest.raises(ValueError, match=message) as info:
        read_prompts(path)
    assert re.search(r"prompts\.py(:\d+)?", str(info.value))
    assert not (tmp_path / "MARKER").exists()


def test_errors_name_the_line(tmp_path):
    path = _write(tmp_path, "A = 'ok'\n\nB = f'{A}'\n")
    with pytest.raises(ValueError, match=r"prompts\.py:3: 'B' is an f-string"):
        read_prompts(path)


# --- which prompt, for which model ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "prompt", "role", "gpt_oss"),
    [
        ("default", "_PIF_SYSTEM_PROMPT", "system", False),  # Qwen3, Gemma-3, Llama-3.2
        ("gpt_oss", "_GPT_OSS_PIF_DEVELOPER_PROMPT", "developer", True),
    ],
)
def test_styles(kind, prompt, role, gpt_oss):
    assert STYLES[kind] == ReleaseStyle(prompt=prompt, role=role, gpt_oss_output=gpt_oss)
    prompts = read_prompts(FIXTURE)
    assert system_message(prompts, STYLES[kind].prompt) == prompts[prompt]


def test_unknown_prompt_and_role():
    with pytest.raises(ValueError, match=r"no SSOT prompt '_NOPE'.*_DAG_SYSTEM_PROMPT"):
        system_message(read_prompts(FIXTURE), "_NOPE")
    with pytest.raises(ValueError, match="role must be one of"):
        ReleaseStyle(prompt=STRUCTURED_PROMPT, role="user", gpt_oss_output=False)


# --- extraction -------------------------------------------------------------------------------------------------

# (output, answer of every family but GPT-OSS, answer for GPT-OSS): the verdicts of the release's
# extract_ssot_answer (strict) for Qwen3/Gemma/Llama and for GPT-OSS checkpoints, its "" for "no answer" as None
# (cross-checked by running it in a separate process; its code is not part of this repository).
CASES = [
    ("<random_string>x</random_string><thinking>t</thinking><answer>0.42</answer>", "0.42", "0.42"),
    ("<ANSWER>0.42</ANSWER>", "0.42", "0.42"),
    ("<Answer>0.42</aNsWeR>", "0.42", "0.42"),
    ("<answer>   0.42 \n</answer>", "0.42", "0.42"),
    ("<answer>\n 7 \n</answer>", "7", "7"),
    ("<answer>1</answer> then <answer>2</answer>", "1", "1"),
    ("<answer>1<answer>2</answer>", "1<answer>2", "1<answer>2"),
    ("<thinking><answer>3</answer></thinking><answer>4</answer>", "3", "3"),
    ("</answer>5<answer>6</answer>", "6", "6"),
    ("<answer>0.42", None, None),  # unclosed
    ("<answer>0.42</answer", None, None),
    ("<answer >0.42</answer>", None, None),
    ("< answer>0.42</answer>", None, None),
    ("<answer></answer>", "", ""),
    ("<answer> </answer>", "", ""),
    ("", None, None),
    ("   ", None, None),
    ("0.42", None, "0.42"),  # GPT-OSS: a bare final answer
    ("  0.77  ", None, "0.77"),
    ("no tags at all: 0.42", None, "no tags at all: 0.42"),
    ("analysis seed 0.9", None, "analysis seed 0.9"),
    ("Assistant: 0.9", None, None),
    ("0.9\n1.0", None, None),
    ("x < 1", None, None),
    ("<random_string>a</random_string>\nFinal choice", None, None),
    (
        "analysisNeed seed.assistantfinal<random_string>abc</random_string>"
        "<thinking>...</thinking>assistantanswer>Raccoon</answer>",
        None,
        "Raccoon",
    ),
    ("analysisSeed xyz; pick.assistantfinal0.5436", None, "0.5436"),
    ("analysisSeed xyz; pick.assistantfinal 0.5436\nmore", None, "0.5436"),
    ("analysisSeed.assistantfinal\n0.5436", None, "0.5436"),
    ("analysisSeed.assistantFINAL<answer>0.1</answer>", "0.1", "0.1"),
    ("assistantcommentary <answer>0.2</answer>", "0.2", "0.2"),
    ("analysis....assistantanswer 0.3", None, "0.3"),
    ("analysis....assistantanswer0.3 assistantfinal 0.4", None, "0.3 assistantfinal 0.4"),
    ("analysisSeed.assistantfinal", None, None),
    ("analysisSeed.assistantfinal   ", None, ""),
    ("analysis<answer>0.1</answer>assistantfinal0.53", "0.1", "0.1"),
]


@pytest.mark.parametrize(("text", "default", "gpt_oss"), CASES)
def test_extract_answer(text, default, gpt_oss):
    assert extract_answer(text) == default
    assert extract_answer(text, gpt_oss=False) == default
    assert extract_answer(text, gpt_oss=True) == gpt_oss
