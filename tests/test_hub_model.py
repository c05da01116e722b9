"""A Hub id as the model: the local Hugging Face cache first, else the Hub (a local stand-in here).

No test reaches the network: the cache is laid out in tmp_path, and the Hub is
tests/hub_standin.py on 127.0.0.1, selected with HF_ENDPOINT. The runs that fetch are real
subprocesses, so huggingface_hub reads its variables (HF_ENDPOINT, HF_HUB_OFFLINE) as a user's
run does, at import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hub_standin import COMMIT, Repo, serve
from test_checkpoint_count import TINY, TINY_COUNT, tiny_tensors, write_shard

from helpers import REPO
from realtools import require_tool
from wizard.engine.hub_id import HubId, parse_hub_id
from wizard.hub_cache import cached_snapshot, hub_cache_dir

PYTHIA = json.loads((REPO / "tests" / "assets" / "configs" / "EleutherAI--pythia-12b.json").read_text(encoding="utf-8"))
SNAPSHOT = "0123456789abcdef0123456789abcdef01234567"


def lay_out_cache(home: Path, repo_id: str, files: dict[str, bytes], ref: str = "main") -> Path:
    """A model in a Hugging Face cache under HF_HOME=home, as huggingface_hub lays it out."""
    repo = home / "hub" / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / ref).write_text(SNAPSHOT, encoding="utf-8")
    snapshot = repo / "snapshots" / SNAPSHOT
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for name, data in files.items():
        blob = repo / "blobs" / f"blob-{len(list((repo / 'blobs').iterdir()))}"
        blob.write_bytes(data)
        (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
    return snapshot


def shard_bytes(tmp_path: Path, tensors: dict[str, Any]) -> bytes:
    path = tmp_path / "shard.safetensors"
    write_shard(path, tensors)
    return path.read_bytes()


def run(
    home: Path, *argv: str, endpoint: str | None = None, offline: bool = False, token: str | None = None
) -> tuple[int, str, str]:
    """backend-wizard ARGV in a fresh process with HF_HOME=home (and the Hub at `endpoint`, HF_TOKEN=`token`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    env |= {"PYTHONPATH": str(REPO), "HF_HOME": str(home), "HF_HUB_DISABLE_TELEMETRY": "1", "NO_COLOR": "1"}
    if endpoint is not None:
        env["HF_ENDPOINT"] = endpoint
    if token is not None:
        env["HF_TOKEN"] = token
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "wizard", *argv], capture_output=True, text=True, timeout=120, env=env, cwd=home
    )
    return proc.returncode, proc.stdout, proc.stderr


def estimate(home: Path, model: str, **kwargs: Any) -> tuple[int, Any, str]:
    code, out, err = run(home, "estimate", "--model", model, "--gpu-memory-gb", "80", "--output", "json", **kwargs)
    return code, (json.loads(out) if code == 0 else out), err


def refused(home: Path, model: str, **kwargs: Any) -> tuple[int, str, str]:
    """The same estimate, as text (an error is then one line on stderr)."""
    return run(home, "estimate", "--model", model, "--gpu-memory-gb", "80", **kwargs)


# --- ids and the cache (no huggingface_hub) ------------------------------------------------------


def test_hub_ids_and_what_is_not_one() -> None:
    assert parse_hub_id("meta-llama/Llama-3.1-8B") == HubId("meta-llama/Llama-3.1-8B")
    assert parse_hub_id("org/name@v1.0") == HubId("org/name", "v1.0")
    for text in ("./org/name", "/org/name", "org/name/x", "org--x/y", "org/config.json", "7B", "org/", "org/name@"):
        assert parse_hub_id(text) is None, text


def test_the_cache_folder_follows_huggingface_hub_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hub_cache_dir() == tmp_path / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub_cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    assert hub_cache_dir() == tmp_path / "cache"


def test_a_snapshot_is_found_by_branch_or_commit(tmp_path: Path) -> None:
    snapshot = lay_out_cache(tmp_path, "acme/tiny", {"config.json": b"{}"}, ref="v2")
    cache = tmp_path / "hub"
    assert cached_snapshot(HubId("acme/tiny", "v2"), cache) == snapshot
    assert cached_snapshot(HubId("acme/tiny", SNAPSHOT), cache) == snapshot
    assert cached_snapshot(HubId("acme/tiny"), cache) is None  # no refs/main
    assert cached_snapshot(HubId("acme/other"), cache) is None


def test_a_cached_model_works_offline_from_its_config(tmp_path: Path) -> None:
    lay_out_cache(tmp_path, "EleutherAI/pythia-12b", {"config.json": json.dumps(PYTHIA).encode()})
    code, out, err = estimate(tmp_path, "EleutherAI/pythia-12b", offline=True)
    assert code == 0, err
    assert out["params"] == 11_846_072_320


def test_a_cached_model_with_its_shards_is_counted_from_their_headers(tmp_path: Path) -> None:
    files = {"config.json": json.dumps(TINY).encode(), "model.safetensors": shard_bytes(tmp_path, tiny_tensors())}
    lay_out_cache(tmp_path, "acme/tiny", files)
    code, out, err = estimate(tmp_path, "acme/tiny", offline=True)
    assert code == 0, err
    assert out["params"] == TINY_COUNT
    assert (out["model"]["source"], out["model"]["counted_from"]) == ("hub-cache", "safetensors headers")
    assert out["model"]["revision"] == SNAPSHOT


def test_a_local_folder_of_the_same_name_wins(tmp_path: Path) -> None:
    (tmp_path / "acme" / "tiny").mkdir(parents=True)
    (tmp_path / "acme" / "tiny" / "config.json").write_text(json.dumps(PYTHIA), encoding="utf-8")
    code, out, err = estimate(tmp_path, "acme/tiny", offline=True)  # cwd is tmp_path: a folder there
    assert code == 0 and out["params"] == 11_846_072_320, err


def test_offline_and_not_cached_is_one_line_with_the_fix(tmp_path: Path) -> None:
    code, out, err = refused(tmp_path, "acme/absent", offline=True)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "'acme/absent'" in err and "HF_HUB_OFFLINE" in err and "hf download acme/absent" in err
    assert err.startswith("error: --model: ")  # the option used, not --set


def test_an_unreadable_id_of_a_catalog_model_offers_the_catalog_name(tmp_path: Path) -> None:
    """Offline, a Hub id whose name the bundled catalog holds is answered with that name; others are not."""
    code, _, err = refused(tmp_path, "meta-llama/Llama-3.2-1B", offline=True)
    assert code == 2 and err.count("\n") == 1
    assert "or pass llama-3.2-1b (the bundled catalog's copy of its config.json)" in err
    code, _, err = refused(tmp_path, "acme/absent", offline=True)
    assert code == 2 and "bundled catalog" not in err
    # The name offered works where the id could not.
    code, data, err = estimate(tmp_path, "llama-3.2-1b", offline=True)
    assert code == 0 and data["params"] == 1_235_814_400, err


def test_the_answers_file_names_itself_in_the_error(tmp_path: Path) -> None:
    answers = tmp_path / "answers.yaml"
    answers.write_text("hardware: nvidia\ngpu_memory_gb: 80\nmodel: acme/absent\n", encoding="utf-8")
    code, _, err = run(tmp_path, "--answers", str(answers), "--defaults", "--dry-run", offline=True)
    assert code == 2 and "answers file: model: 'acme/absent'" in err and "Traceback" not in err


# --- the Hub (a local stand-in) --------------------------------------------------------------------


@pytest.fixture
def hub(tmp_path: Path) -> Any:
    require_tool("huggingface_hub")
    repos = {
        "acme/tiny": Repo(
            {"config.json": json.dumps(TINY).encode(), "model.safetensors": shard_bytes(tmp_path, tiny_tensors())}
        ),
        "acme/config-only": Repo({"config.json": json.dumps(PYTHIA).encode()}),
        "acme/gated": Repo({"config.json": b"{}"}, gated=403),
        "acme/gated-401": Repo({"config.json": b"{}"}, gated=401),
        "acme/licensed": Repo({"config.json": json.dumps(TINY).encode()}, token="hf_standin_token"),
    }
    with serve(repos) as standin:
        yield standin


def test_the_hub_gives_config_and_the_exact_count_from_headers(tmp_path: Path, hub: Any) -> None:
    home = tmp_path / "home"
    home.mkdir()
    code, out, err = estimate(home, "acme/tiny", endpoint=hub.url)
    assert code == 0, err
    assert out["params"] == TINY_COUNT
    assert out["model"] == {
        "name": "acme/tiny",
        "source": "hub",
        "counted_from": "safetensors headers",
        "exact_params": TINY_COUNT,
        "hub_id": "acme/tiny",
        "revision": COMMIT,
    }
    # Headers only: every request for the shard asked for a range, none for the whole file.
    shard = [r for r in hub.requests if "model.safetensors" in r and r.startswith("GET")]
    assert shard and all(" bytes=" in r for r in shard), hub.requests
    # config.json landed in the cache: the next run works offline.
    assert (home / "hub" / "models--acme--tiny" / "snapshots" / COMMIT / "config.json").is_file()
    code, out, err = estimate(home, "acme/tiny", offline=True)
    assert code == 0 and out["params"] == TINY_COUNT, err
    assert (out["model"]["source"], out["model"]["counted_from"]) == ("hub-cache", "config.json")


def test_a_model_without_safetensors_is_counted_from_its_config(tmp_path: Path, hub: Any) -> None:
    code, out, err = estimate(tmp_path, "acme/config-only", endpoint=hub.url)
    assert code == 0 and out["params"] == 11_846_072_320, err


@pytest.mark.parametrize("repo", ["acme/gated", "acme/gated-401"])
def test_a_gated_model_says_log_in_and_accept_the_licence(tmp_path: Path, hub: Any, repo: str) -> None:
    code, out, err = refused(tmp_path, repo, endpoint=hub.url)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert f"'{repo}' is gated" in err
    assert "hf auth login" in err and "7B" in err
    # The licence is accepted on the Hub the run asked, the stand-in here (HF_ENDPOINT), not huggingface.co.
    assert f"{hub.url}/{repo}" in err and "huggingface.co" not in err


def test_a_token_from_hf_token_reaches_the_hub_and_opens_a_licensed_model(tmp_path: Path, hub: Any) -> None:
    code, _, err = refused(tmp_path, "acme/licensed", endpoint=hub.url)
    assert code == 2 and "'acme/licensed' is gated" in err and "HF_TOKEN" in err
    assert not any(hub.authorizations)  # no token here, none sent
    code, out, err = estimate(tmp_path, "acme/licensed", endpoint=hub.url, token="hf_standin_token")
    assert code == 0 and out["params"] == TINY_COUNT, err
    assert "Bearer hf_standin_token" in hub.authorizations


def test_a_revision_is_fetched_at_that_commit_and_kept_under_it(tmp_path: Path, hub: Any) -> None:
    code, out, err = estimate(tmp_path, f"acme/tiny@{COMMIT}", endpoint=hub.url)
    assert code == 0 and out["params"] == TINY_COUNT, err
    assert (out["model"]["hub_id"], out["model"]["revision"]) == ("acme/tiny", COMMIT)
    assert any(f"/acme/tiny/resolve/{COMMIT}/config.json" in r for r in hub.requests), hub.requests
    assert not any("/resolve/main/" in r for r in hub.requests), hub.requests
    assert (tmp_path / "hub" / "models--acme--tiny" / "snapshots" / COMMIT / "config.json").is_file()


def test_a_missing_model_says_so_with_what_was_tried(tmp_path: Path, hub: Any) -> None:
    code, out, err = refused(tmp_path, "acme/nope", endpoint=hub.url)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "'acme/nope'" in err and "Hugging Face cache" in err and hub.url in err and "check the id" in err


def test_a_missing_revision_is_named(tmp_path: Path, hub: Any) -> None:
    code, _, err = refused(tmp_path, "acme/tiny@nosuch", endpoint=hub.url)
    assert code == 2 and "nosuch" in err and "Traceback" not in err


def test_an_unreachable_hub_is_one_line(tmp_path: Path) -> None:
    require_tool("huggingface_hub")
    code, _, err = refused(tmp_path, "acme/tiny", endpoint="http://127.0.0.1:9")  # the discard port: refused
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "could not be fetched from http://127.0.0.1:9" in err and "HF_ENDPOINT" in err


def test_without_huggingface_hub_the_error_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from wizard.errors import ModelUnavailableError
    from wizard.hub_model import load_hub_model

    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # as if it were not installed
    with pytest.raises(ModelUnavailableError) as caught:
        load_hub_model(HubId("acme/tiny"), "acme/tiny")
    assert "pip install 'backend-wizard[hub]'" in caught.value.message
    assert caught.value.message.startswith("model: 'acme/tiny' is not in the Hugging Face cache")
