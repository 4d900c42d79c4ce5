"""A Hugging Face hub on loopback, and a local HF cache, for tests of models read by their config.json.

FakeHub serves what huggingface_hub's hf_hub_download asks of config.json (file_download.py): HEAD and
GET /ORG/NAME/resolve/main/config.json with X-Repo-Commit, ETag and Content-Length; a gated model
answers 401 with X-Error-Code GatedRepo, an unknown one 404 with RepoNotFound. It binds 127.0.0.1 on a
free port, serves from a daemon thread, times out each connection after a few seconds and is stopped
by its context manager. write_snapshot lays out a cached config.json as huggingface_hub does.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def bundled_as_published(hub_id: str) -> dict:
    """A bundled config without this project's own keys, as the hub serves it."""
    from trainers.models import bundled_models

    config = json.loads(bundled_models()[hub_id].read_text())
    return {k: v for k, v in config.items() if not k.startswith("_")}


def write_snapshot(
    hub_cache: Path, repo_id: str, config: dict, commit: str = COMMIT, ref: bool = True
) -> Path:
    """config.json of repo_id in hub_cache as huggingface_hub lays it out: the blob named by its hash,
    the snapshot's link to it, refs/main naming the snapshot (ref=False: no refs, as after a download
    by commit)."""
    body = json.dumps(config).encode()
    folder = hub_cache / f"models--{repo_id.replace('/', '--')}"
    blob = folder / "blobs" / hashlib.sha256(body).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(body)
    link = folder / "snapshots" / commit / "config.json"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(Path("..", "..", "blobs", blob.name))
    if ref:
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / "main").write_text(commit)
    return link


class FakeHub:
    """`with FakeHub({"org/name": config}, gated={"org/gated"}) as hub:` hub.url is its endpoint;
    hub.requests lists (method, path) of every request served."""

    def __init__(self, configs: dict[str, dict], gated: set[str] | None = None):
        self.configs = {repo: json.dumps(c).encode() for repo, c in configs.items()}
        self.gated = gated or set()
        self.requests: list[tuple[str, str]] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 5

            def do_HEAD(self):
                self._answer(body=False)

            def do_GET(self):
                self._answer(body=True)

            def _answer(self, body: bool):
                hub.requests.append((self.command, self.path))
                repo, _, rest = self.path.lstrip("/").partition("/resolve/")
                if repo in hub.gated:
                    return self._error(401, "GatedRepo", f"Access to model {repo} is restricted.")
                if repo not in hub.configs:
                    return self._error(404, "RepoNotFound", "Repository not found")
                if rest.split("?")[0] != "main/config.json":
                    return self._error(404, "EntryNotFound", "Entry not found")
                data = hub.configs[repo]
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def _error(self, status: int, code: str, message: str):
                self.send_response(status)
                self.send_header("X-Error-Code", code)
                self.send_header("X-Error-Message", message)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):  # quiet: pytest shows what the test prints
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def closed_port_url() -> str:
    """An endpoint on loopback where nothing listens: a port bound, then released."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
