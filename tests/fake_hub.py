"""A fake Hugging Face Hub for offline tests: a real HTTP server on 127.0.0.1 answering the requests that
huggingface_hub (2.4) makes for `HfApi.auth_check`, `HfApi.model_info` and `HfApi.dataset_info` (with
`files_metadata=True`), with the status codes and `X-Error-Code` headers its `hf_raise_for_status` turns into
`GatedRepoError`, `RepositoryNotFoundError` and `RevisionNotFoundError`.

Repositories are data, keyed by id (a dataset's id prefixed `datasets/`, as in the Hub's URLs):

    {"openai/gpt-oss-20b": {"gated": False, "revisions": {"main": "<40 hex>"}, "files": {"config.json": 1234}},
     "datasets/allenai/paloma": {"gated": True, "files": {"ptb/test/test_ptb.jsonl.gz": 5678}}}

`revisions` defaults to {"main": a commit derived from the id}; a commit of `revisions` resolves as itself. A gated
repository's `auth-check` answers 403 (X-Error-Code: GatedRepo) unless the request carries `ACCESS_TOKEN`; its
info answers anyone, as the Hub does for a gated repository's metadata. A request with `INVALID_TOKEN` gets 401
"Invalid credentials in Authorization header", as the Hub answers a token it does not know.

In-process: `with serve(repos) as hub: point_at(monkeypatch, hub.url, home=tmp_path / "hf", token=...)`, or the
`fake_hub` fixture. A subprocess: `subprocess.run(cmd, env=hub_env(hub.url, home=tmp_path / "hf", token=...))`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

import pytest

ACCESS_TOKEN = "hf_test_access"  # the token of an account that accepted every gated repository's terms
INVALID_TOKEN = "hf_test_invalid"  # a token the Hub does not know (revoked, mistyped): every request is refused
LFS_THRESHOLD = 10_000_000  # files from this size are listed as LFS files, as the Hub lists weights

_INFO = re.compile(r"^/api/(?P<kind>models|datasets)/(?P<repo>.+?)(?:/revision/(?P<revision>[^/]+))?$")
_AUTH_CHECK = re.compile(r"^/api/(?P<kind>models|datasets)/(?P<repo>.+)/auth-check$")


@dataclass(frozen=True)
class Request:
    """A request the fake Hub answered: its method, path (query left off), query and Authorization header."""

    method: str
    path: str
    query: str
    authorization: str | None


@dataclass
class FakeHub:
    """A running fake Hub: its URL (for HF_ENDPOINT), its repositories and the requests it answered."""

    url: str
    repos: Mapping[str, Mapping[str, Any]]
    requests: list[Request] = field(default_factory=list)


def commit_of(repo: str, revision: str = "main") -> str:
    """The commit a repository's revision resolves to when its data gives none: 40 hex digits from both names."""
    return hashlib.sha1(f"{repo}@{revision}".encode(), usedforsecurity=False).hexdigest()


def _revisions(key: str, repo: Mapping[str, Any]) -> dict[str, str]:
    return dict(repo.get("revisions") or {"main": commit_of(key)})


def _sibling(key: str, name: str, size: int) -> dict[str, Any]:
    """A file as the Hub lists it with `blobs=true`: `rfilename`, `size`, `blobId`, and `lfs` for large files."""
    blob = hashlib.sha1(f"{key}/{name}".encode(), usedforsecurity=False).hexdigest()
    sibling: dict[str, Any] = {"rfilename": name, "size": size, "blobId": blob}
    if size >= LFS_THRESHOLD:
        sha256 = hashlib.sha256(f"{key}/{name}".encode()).hexdigest()
        sibling["lfs"] = {"size": size, "sha256": sha256, "pointerSize": 134}
    return sibling


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    """A request handler answering from `hub.repos` and recording each request in `hub.requests`."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet: pytest shows failures, not access logs
            pass

        def do_HEAD(self) -> None:  # preflight's reachability probe: any answer will do
            self._record()
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            url = self._record()
            if self.headers.get("Authorization") == f"Bearer {INVALID_TOKEN}":
                self._send(401, {"error": "Invalid credentials in Authorization header"}, error_code=None)
            elif match := _AUTH_CHECK.match(url.path):
                self._auth_check(_key(match["kind"], unquote(match["repo"])))
            elif match := _INFO.match(url.path):
                revision = unquote(match["revision"]) if match["revision"] else "main"
                self._info(_key(match["kind"], unquote(match["repo"])), revision, "blobs=true" in url.query.lower())
            else:
                self._send(404, {"error": f"no such endpoint in the fake Hub: {url.path}"})

        def _record(self) -> SplitResult:
            url = urlsplit(self.path)
            hub.requests.append(Request(self.command, url.path, url.query, self.headers.get("Authorization")))
            return url

        def _auth_check(self, key: str) -> None:
            repo = hub.repos.get(key)
            if repo is None:
                self._send(404, {"error": "Repository not found"}, "RepoNotFound")
            elif repo.get("gated") and self.headers.get("Authorization") != f"Bearer {ACCESS_TOKEN}":
                message = f"Access to {key} is restricted. You must have access to it and be authenticated."
                self._send(403, {"error": message}, "GatedRepo")
            else:
                self._send(200, {})

        def _info(self, key: str, revision: str, blobs: bool) -> None:
            repo = hub.repos.get(key)
            if repo is None:
                self._send(404, {"error": "Repository not found"}, "RepoNotFound")
                return
            revisions = _revisions(key, repo)
            commit = revisions.get(revision) or (revision if revision in revisions.values() else None)
            if commit is None:
                self._send(404, {"error": f"Invalid rev id: {revision}"}, "RevisionNotFound")
                return
            files = repo.get("files", {}).items()
            siblings = [_sibling(key, n, s) if blobs else {"rfilename": n} for n, s in files]
            repo_id = key.removeprefix("datasets/")
            gated = "auto" if repo.get("gated") else False
            self._send(200, {"id": repo_id, "sha": commit, "private": False, "gated": gated, "siblings": siblings})

        def _send(self, status: int, body: dict, error_code: str | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if error_code is not None:
                self.send_header("X-Error-Code", error_code)
            if status >= 400:
                self.send_header("X-Error-Message", body.get("error", ""))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _key(kind: str, repo: str) -> str:
    return repo if kind == "models" else f"datasets/{repo}"


@contextlib.contextmanager
def serve(repos: Mapping[str, Mapping[str, Any]]) -> Iterator[FakeHub]:
    """A fake Hub serving `repos` on a free port of 127.0.0.1 while the block runs (a daemon thread)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    hub = FakeHub(f"http://127.0.0.1:{server.server_address[1]}", repos)
    server.RequestHandlerClass = _handler(hub)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def closed_port_url() -> str:
    """The URL of a port of 127.0.0.1 that nothing listens on (just bound and closed): a Hub that cannot be reached."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# Variables that would make huggingface_hub skip the fake Hub or pick up a token of the machine's user.
_CLEARED = (
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_TOKEN_PATH",
    "HF_OIDC_RESOURCE",
    "HF_HUB_DISABLE_IMPLICIT_TOKEN",
)


def hub_env(
    url: str, home: str | os.PathLike, token: str | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a subprocess that talks to the fake Hub at `url`: `base` (default os.environ) with
    HF_ENDPOINT set, HF_HOME at `home` (so no stored token is found), HF_TOKEN set to `token` or unset, offline
    mode unset, and 127.0.0.1 kept out of any proxy."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in _CLEARED}
    env.update(HF_ENDPOINT=url, HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1")
    env["NO_PROXY"] = env["no_proxy"] = ",".join(filter(None, [env.get("NO_PROXY"), "127.0.0.1", "localhost"]))
    if token is not None:
        env["HF_TOKEN"] = token
    return env


def point_at(monkeypatch: pytest.MonkeyPatch, url: str, home: str | os.PathLike, token: str | None = None) -> None:
    """Point this process's huggingface_hub at the fake Hub at `url` until the test ends: the environment of
    `hub_env`, and the module constants huggingface_hub read from it at import (HfApi() takes its endpoint from
    `constants.ENDPOINT` when it is built, get_token its file from `constants.HF_TOKEN_PATH`)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import close_session

    env = hub_env(url, home, token)
    for name in _CLEARED:
        monkeypatch.delenv(name, raising=False)
    for name in ("HF_ENDPOINT", "HF_HOME", "HF_HUB_DISABLE_TELEMETRY", "NO_PROXY", "no_proxy", "HF_TOKEN"):
        if name in env:
            monkeypatch.setenv(name, env[name])
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_IMPLICIT_TOKEN", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(Path(home) / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(Path(home) / "stored_tokens"))
    close_session()  # the shared HTTP client read the proxy settings when it was made: the next one reads these


@pytest.fixture
def fake_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Callable[..., FakeHub]]:
    """`fake_hub(repos, token=None)`: a running fake Hub of `repos`, this process's huggingface_hub pointed at it
    (HF_HOME under tmp_path); each call serves a new one, all stopped when the test ends."""
    with contextlib.ExitStack() as stack:

        def start(repos: Mapping[str, Mapping[str, Any]], token: str | None = None) -> FakeHub:
            hub = stack.enter_context(serve(repos))
            point_at(monkeypatch, hub.url, tmp_path / "hf_home", token)
            return hub

        yield start
