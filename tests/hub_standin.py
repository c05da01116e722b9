"""A local stand-in for the Hugging Face Hub: the endpoints huggingface_hub calls for a model's files.

`hf_hub_download` and `HfApi.get_safetensors_metadata` ask `HEAD` and `GET` of
`{endpoint}/{repo_id}/resolve/{revision}/{filename}` (the latter with a `Range` header for the
first bytes of a shard). Success carries `X-Repo-Commit` and `ETag`; failures carry the
`X-Error-Code` huggingface_hub's `hf_raise_for_status` reads (GatedRepo, RepoNotFound,
EntryNotFound, RevisionNotFound). Selected with HF_ENDPOINT; it listens on 127.0.0.1 only.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "c0ffee" + "0" * 34


@dataclass
class Repo:
    """One model repository: its files at `main`, and how the Hub answers for it."""

    files: dict[str, bytes] = field(default_factory=dict)
    gated: int = 0  # 401 or 403: the status a gated model answers without an accepted licence
    # A private or gated model the stand-in serves to this token only ("Authorization: Bearer
    # TOKEN", as huggingface_hub sends HF_TOKEN); any other request gets the gated answer.
    token: str = ""


@dataclass
class StandIn:
    """The running server: its address, its repositories and the paths it was asked for."""

    url: str
    repos: dict[str, Repo]
    requests: list[str] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)  # each request's Authorization header


_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<file>.+)$")


def _handler(standin: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def _refuse(self, status: int, code: str, body: bool) -> None:
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("Content-Type", "application/json")
            payload = b'{"error": "' + code.encode() + b'"}'
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if body:
                self.wfile.write(payload)

        def _answer(self, body: bool) -> None:
            standin.requests.append(f"{self.command} {self.path} {self.headers.get('Range', '')}".strip())
            standin.authorizations.append(self.headers.get("Authorization", ""))
            match = _RESOLVE.match(self.path.split("?")[0])
            if match is None or match["repo"] not in standin.repos:
                self._refuse(404, "RepoNotFound", body)
                return
            repo = standin.repos[match["repo"]]
            if repo.gated:
                self._refuse(repo.gated, "GatedRepo", body)
                return
            if repo.token and self.headers.get("Authorization") != f"Bearer {repo.token}":
                self._refuse(401, "GatedRepo", body)
                return
            if match["revision"] not in ("main", COMMIT):
                self._refuse(404, "RevisionNotFound", body)
                return
            data = repo.files.get(match["file"])
            if data is None:
                self._refuse(404, "EntryNotFound", body)
                return
            start, end = 0, len(data) - 1
            ranged = re.match(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
            if ranged:
                start = int(ranged[1])
                end = min(int(ranged[2]) if ranged[2] else end, len(data) - 1)
            part = data[start : end + 1]
            self.send_response(206 if ranged else 200)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", '"' + hashlib.sha256(data).hexdigest() + '"')
            self.send_header("Content-Length", str(len(part)))
            if ranged:
                self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
            self.end_headers()
            if body:
                self.wfile.write(part)

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def do_GET(self) -> None:
            self._answer(body=True)

    return Handler


@contextmanager
def serve(repos: dict[str, Repo]) -> Iterator[StandIn]:
    """Run the stand-in on a free port of 127.0.0.1 for the `with` block."""
    standin = StandIn(url="", repos=repos)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(standin))
    standin.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield standin
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
