"""The cache of compiled templates and parsed data files: keyed by content, safe to delete or damage, never in the way.

Each case runs the real command in fresh processes (the cache is what one process leaves the
next), with its own cache folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers import REPO

EXAMPLE = REPO / "examples" / "a100x4-7b-full-accelerate.yaml"


def run(tmp_path: Path, cache: Path | str, *extra: str) -> str:
    """stdout of an answers-file dry run with BACKEND_WIZARD_CACHE_DIR=cache (it must succeed)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "BACKEND_WIZARD_CACHE_DIR": str(cache)}
    argv = ["--answers", str(EXAMPLE), "--dry-run", "--output", "json", "--output-dir", str(tmp_path / "out"), *extra]
    proc = subprocess.run(
        [sys.executable, "-m", "wizard", *argv], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_run_fills_the_cache_and_the_next_one_reads_it_to_the_same_result(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = run(tmp_path, cache)
    entries = sorted(cache.iterdir())
    assert entries and all(p.name.endswith((".jinja-bytecode", ".parsed")) for p in entries)
    # The tree and the data files (GPUs, models, architectures, the checks' key sets), parsed once and kept.
    assert len([p for p in entries if p.name.endswith(".parsed")]) == 5
    assert cache.stat().st_mode & 0o777 == 0o700
    assert run(tmp_path, cache) == first
    assert sorted(cache.iterdir()) == entries  # nothing new: every template came from the cache


def test_a_damaged_or_deleted_cache_only_costs_a_compile(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = run(tmp_path, cache)
    for entry in cache.iterdir():
        entry.write_bytes(entry.read_bytes()[:40])  # cut short, as a killed write could leave it
    assert run(tmp_path, cache) == first
    for entry in cache.iterdir():
        entry.unlink()
    cache.rmdir()
    assert run(tmp_path, cache) == first
    assert run(tmp_path, "") == first  # an empty BACKEND_WIZARD_CACHE_DIR turns the cache off


def test_an_edited_tree_text_gets_its_own_entry(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    tree = tmp_path / "tree.yaml"
    shipped = (REPO / "decision_tree.yaml").read_text(encoding="utf-8")
    marker = "backend-wizard-cache-test"
    # A plain text in the rule's template: the same file name, another content.
    for edit in ("", marker):
        needle = "because: "
        start = shipped.index(needle, shipped.index("id: sharded_fsdp2")) + len(needle) + 1
        tree.write_text(shipped[:start] + edit + shipped[start:], encoding="utf-8")
        out = run(tmp_path, cache, "--tree", str(tree))
        assert (marker in out) == bool(edit), out[:400]


def test_a_folder_others_can_write_is_not_used(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    run(tmp_path, cache)
    assert list(cache.iterdir()) == []


def test_a_tree_that_fails_its_lint_is_not_kept(tmp_path: Path) -> None:
    """Only a tree that passed its lint is stored: a broken --tree fails the same way every run."""
    cache = tmp_path / "cache"
    tree = tmp_path / "tree.yaml"
    shipped = (REPO / "decision_tree.yaml").read_text(encoding="utf-8")
    tree.write_text(shipped.replace("outcome: {backend: single_gpu", "outcome: {backend: no_such_backend", 1))
    env = {**os.environ, "PYTHONPATH": str(REPO), "BACKEND_WIZARD_CACHE_DIR": str(cache)}
    argv = ["--answers", str(EXAMPLE), "--dry-run", "--tree", str(tree), "--output-dir", str(tmp_path / "out")]
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, "-m", "wizard", *argv], capture_output=True, text=True, env=env, timeout=120
        )
        assert proc.returncode == 3 and "no_such_backend" in proc.stderr, proc.stderr
    # The shipped catalogues may be kept; no parsed tree is.
    assert len([p for p in cache.iterdir() if p.name.endswith(".parsed")]) <= 2


def test_every_class_a_parsed_tree_holds_is_in_the_key(tmp_path: Path) -> None:
    """A kept tree is only ever loaded by a wizard whose classes are the ones that pickled it: the
    key hashes the source of each module a pickled tree or catalogue names."""
    import pickle
    import pickletools

    from wizard import app, disk_cache
    from wizard.engine import catalog

    app._LOADED.clear()
    objects = [app.load(), catalog.gpu_catalog(), catalog.models_catalog(), catalog.gpu_sources()]
    modules: set[str] = set()
    for value in objects:
        ops = list(pickletools.genops(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)))
        strings = [arg for _, arg, _ in ops if isinstance(arg, str)]
        modules |= {s for s in strings if s.startswith("wizard.")}
    assert modules, "the tree pickles no wizard class?"
    named = {f"wizard.engine.{name.removesuffix('.py')}" for name in disk_cache._DEFINING}
    assert modules <= named, modules - named
    assert disk_cache.entry_name("a", "text") != disk_cache.entry_name("b", "text")
    assert disk_cache.entry_name("a", "text") != disk_cache.entry_name("a", "text2")
