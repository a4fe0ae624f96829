"""A local stand-in for the Hugging Face Hub: a real HTTP server on 127.0.0.1.

It answers the routes `huggingface_hub.HfApi` (2.x) calls for `list_models`
(`GET /api/models`) and `model_info` (`GET /api/models/{repo}` and
`.../revision/{rev}`, `blobs=true` for sizes and LFS checksums), and the file
route `GET/HEAD /{repo}/resolve/{rev}/{path}` with the headers download
clients read (Content-Length, ETag, X-Repo-Commit, Accept-Ranges, and 206 +
Content-Range for Range requests). Errors carry `X-Error-Code` like the Hub's.

Faults on demand: `drop_after[path] = n` cuts the connection after n bytes of
that file (`drop_times` times), `wrong_sha` announces a false checksum, a
repo with `token` set answers 401 without `Authorization: Bearer <token>`, a
`gated` repo shows its files but answers 403 (`GatedRepo`) to downloads
without its token, and `throttle[path] = n` sends that file at n bytes a
second (so a test can act while a download is under way).

`fake_hub` is the pytest fixture: import it into a test module or conftest.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

import tiny_gguf

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class FakeRepo:
    files: dict[str, bytes]
    downloads: int = 0
    likes: int = 0
    token: str | None = None  # required bearer token, for private repos
    gguf: dict[str, object] | None = None  # the Hub's GGUF summary (total params, architecture...)
    gated: bool = False  # downloads need `token`; listing does not


@dataclass
class FakeHub:
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    drop_after: dict[str, int] = field(default_factory=dict)  # file path -> bytes sent before dropping
    drop_times: int = 1  # how many downloads of such a file are cut
    wrong_sha: set[str] = field(default_factory=set)
    throttle: dict[str, int] = field(default_factory=dict)  # file path -> bytes per second
    requests: list[tuple[str, str, dict[str, str]]] = field(
        default_factory=list
    )  # method, path, headers (lowercase names)
    searches: list[dict[str, list[str]]] = field(default_factory=list)  # the query of each `GET /api/models`
    url: str = ""
    _drops: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add_repo(self, repo_id: str, files: dict[str, bytes], **kwargs: object) -> FakeRepo:
        repo = FakeRepo(files=files, **kwargs)  # type: ignore[arg-type]
        self.repos[repo_id] = repo
        return repo

    def file_requests(self, path: str) -> list[dict[str, str]]:
        """Headers of every GET of a file whose URL ends with `path`."""
        return [h for m, p, h in self.requests if m == "GET" and "/resolve/" in p and p.endswith(path)]

    def should_drop(self, path: str) -> int | None:
        with self._lock:
            if path in self.drop_after and self._drops.get(path, 0) < self.drop_times:
                self._drops[path] = self._drops.get(path, 0) + 1
                return self.drop_after[path]
        return None


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _model_json(repo_id: str, repo: FakeRepo, hub: FakeHub, *, blobs: bool, expand: list[str]) -> dict:
    out: dict[str, object] = {"_id": repo_id, "id": repo_id}
    full = {
        "author": repo_id.split("/", maxsplit=1)[0],
        "sha": COMMIT,
        "lastModified": "2025-01-02T03:04:05.000Z",
        "private": repo.token is not None,
        "downloads": repo.downloads,
        "likes": repo.likes,
        "tags": ["gguf"] if any(p.endswith(".gguf") for p in repo.files) else [],
        "library_name": "gguf",
    }
    if repo.gguf is not None:
        full["gguf"] = repo.gguf
    siblings = []
    for path, data in sorted(repo.files.items()):
        sibling: dict[str, object] = {"rfilename": path}
        if blobs:
            sibling["size"] = len(data)
            sibling["blobId"] = hashlib.sha1(data).hexdigest()
            sha = "0" * 64 if path in hub.wrong_sha else _sha(data)
            sibling["lfs"] = {"size": len(data), "sha256": sha, "pointerSize": 134}
        siblings.append(sibling)
    full["siblings"] = siblings
    if expand:
        out.update({k: full[k] for k in expand if k in full})
    else:
        out.update(full)
    return out


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # keep test output clean
        pass

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, value: object, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(value).encode(), {"Content-Type": "application/json", **(headers or {})})

    def _repo_error(self, repo_id: str) -> None:
        self._json(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})

    def _authorized(self, repo: FakeRepo) -> bool:
        return repo.token is None or repo.gated or self._has_token(repo)

    def _has_token(self, repo: FakeRepo) -> bool:
        return self.headers.get("Authorization") == f"Bearer {repo.token}"

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        hub = self.hub
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        query = parse_qs(parts.query)
        hub.requests.append((self.command, path, {k.lower(): v for k, v in self.headers.items()}))

        if path == "/api/models":
            return self._list(query)
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+?)(?:/revision/([^/]+))?", path)
        if m:
            repo = hub.repos.get(m.group(1))
            if repo is None or not self._authorized(repo):
                return self._repo_error(m.group(1))
            if m.group(2) not in (None, "main", COMMIT):
                return self._json(404, {"error": "Invalid rev id"}, {"X-Error-Code": "RevisionNotFound"})
            blobs = query.get("blobs", ["false"])[0].lower() == "true"
            return self._json(200, _model_json(m.group(1), repo, hub, blobs=blobs, expand=query.get("expand", [])))
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if m:
            return self._file(m.group(1), m.group(2), m.group(3))
        return self._json(404, {"error": "Not found"})

    def _list(self, query: dict[str, list[str]]) -> None:
        self.hub.searches.append(query)
        search = query.get("search", [""])[0].lower()
        filters = query.get("filter", [])
        found = []
        for repo_id, repo in self.hub.repos.items():
            if repo.token is not None or search not in repo_id.lower():
                continue
            if "gguf" in filters and not any(p.endswith(".gguf") for p in repo.files):
                continue
            found.append((repo_id, repo))
        if query.get("sort", [""])[0] == "downloads":
            found.sort(key=lambda item: -item[1].downloads)
        limit = int(query.get("limit", ["1000"])[0])
        expand = query.get("expand", [])
        return self._json(200, [_model_json(i, r, self.hub, blobs=False, expand=expand) for i, r in found[:limit]])

    def _file(self, repo_id: str, revision: str, path: str) -> None:
        repo = self.hub.repos.get(repo_id)
        if repo is None or not self._authorized(repo):
            return self._repo_error(repo_id)
        if repo.gated and not self._has_token(repo):
            error = f"Access to model {repo_id} is restricted. You must have access to it and be authenticated."
            return self._json(403, {"error": error}, {"X-Error-Code": "GatedRepo"})
        if revision not in ("main", COMMIT):
            return self._json(404, {"error": "Invalid rev id"}, {"X-Error-Code": "RevisionNotFound"})
        data = repo.files.get(path)
        if data is None:
            return self._json(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
        headers = {
            "ETag": f'"{_sha(data)}"',
            "X-Repo-Commit": COMMIT,
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        start = 0
        status = 200
        m = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
        if m:
            start = int(m.group(1))
            if start >= len(data):
                return self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"})
            status = 206
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        body = data[start:]
        rate = self.hub.throttle.get(path)
        if rate and self.command != "HEAD":
            return self._send_slowly(status, body, headers, rate)
        cut = None if self.command == "HEAD" else self.hub.should_drop(path)
        if cut is None:
            return self._send(status, body, headers)
        # announce the whole body, send part of it, then drop the connection
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: max(0, cut - start)])
        self.wfile.flush()
        self.close_connection = True

    def _send_slowly(self, status: int, body: bytes, headers: dict[str, str], rate: int) -> None:
        """Send `body` at about `rate` bytes a second, in small pieces; stop when the client goes."""
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        piece = max(256, rate // 20)
        try:
            for i in range(0, len(body), piece):
                self.wfile.write(body[i : i + piece])
                self.wfile.flush()
                time.sleep(piece / rate)
        except OSError:  # the client hung up
            self.close_connection = True


@contextmanager
def serve(hub: FakeHub) -> Iterator[FakeHub]:
    """Run `hub` on a random port of 127.0.0.1 until the block ends."""
    handler = type("Handler", (_Handler,), {"hub": hub})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="session")
def hub_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Contents of the fake Hub's model files, generated once per session."""
    out = tmp_path_factory.mktemp("hub")
    files = {
        "f32": tiny_gguf.write_tiny_llama(out / "f32.gguf"),
        "q8_0": tiny_gguf.write_tiny_llama(out / "q8_0.gguf", weight_type="q8_0"),
        "f16": tiny_gguf.write_tiny_llama(out / "f16.gguf", weight_type="f16"),
        "tools": tiny_gguf.write_tiny_llama(out / "tools.gguf", template="tools", weight_type="q8_0"),
        "mmproj": tiny_gguf.write_tiny_mmproj(out / "mmproj.gguf"),
        "lora": tiny_gguf.write_tiny_lora(out / "lora.gguf"),
        "lora_wide": tiny_gguf.write_tiny_lora(out / "lora-wide.gguf", n_embd=128),
    }
    data = {k: p.read_bytes() for k, p in files.items()}
    for i, shard in enumerate(tiny_gguf.write_tiny_llama_split(out / "split.gguf", weight_type="q8_0"), 1):
        data[f"shard{i}"] = shard.read_bytes()
    data["truncated"] = data["f32"][: len(data["f32"]) // 2]
    return data


def standard_repos(hub: FakeHub, files: dict[str, bytes]) -> None:
    """The repositories every test sees."""
    summary = {"total": 139584, "architecture": "llama", "context_length": 512}
    hub.add_repo(
        "tiny/TinyLlama-GGUF",
        {
            "README.md": b"# TinyLlama GGUF\n",
            "TinyLlama-F16.gguf": files["f16"],
            "TinyLlama-Q4_K_M.gguf": files["f32"],
            "TinyLlama-Q8_0.gguf": files["q8_0"],
        },
        downloads=5000,
        likes=42,
        gguf=summary,
    )
    hub.add_repo("tiny/TinyTools-GGUF", {"tinytools.Q8_0.gguf": files["tools"]}, downloads=700, likes=3)
    hub.add_repo(
        "tiny/Split-GGUF",
        {
            "README.md": b"split\n",
            **{f"Q8_0/Tiny-Split-Q8_0-{i:05d}-of-00003.gguf": files[f"shard{i}"] for i in (1, 2, 3)},
            "Tiny-Split-F16.gguf": files["f16"],
        },
        downloads=60,
    )
    hub.add_repo(
        "tiny/Vision-GGUF",
        {
            "TinyVision-Q8_0.gguf": files["q8_0"],
            "mmproj-TinyVision-F16.gguf": files["mmproj"],
            "mmproj-TinyVision-F32.gguf": files["mmproj"],
        },
        downloads=90,
    )
    hub.add_repo(
        "tiny/NoGGUF",
        {
            "README.md": b"no gguf\n",
            "config.json": b"{}",
            "model.safetensors": b"\0" * 64,
        },
        downloads=10_000,
    )
    hub.add_repo("tiny/Broken-GGUF", {"Broken-Q4_K_M.gguf": files["truncated"]}, downloads=1)
    hub.add_repo("tiny/TinyLlama-SQL-LoRA-GGUF", {"TinyLlama-SQL-LoRA-F32.gguf": files["lora"]}, downloads=1)
    hub.add_repo("tiny/Wide-LoRA-GGUF", {"Wide-LoRA-F32.gguf": files["lora_wide"]}, downloads=1)
    hub.add_repo("private/Secret-GGUF", {"Secret-Q4_0.gguf": files["q8_0"]}, token="hf_secret")


@pytest.fixture
def fake_hub(hub_files: dict[str, bytes], spark_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """A running fake Hub with `standard_repos`, and SPARK_HF_ENDPOINT pointing at it."""
    hub = FakeHub()
    standard_repos(hub, hub_files)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with serve(hub):
        monkeypatch.setenv("SPARK_HF_ENDPOINT", hub.url)
        yield hub
