"""Shared pytest configuration for the backend-wizard test suite."""

import inspect
import os
import shutil
import tempfile
from typing import Any

import pytest

# The compiled-template cache (wizard/render/template_cache.py) of the runs the tests make, in-process
# or as subprocesses: a folder of this session's own, removed at its end, never the user's cache.
_CACHE_DIR = "BACKEND_WIZARD_CACHE_DIR"
_own_cache: list[str] = []

# ---------------------------------------------------------------------------------------------
# Markers (also listed in pyproject.toml; registering them here keeps `--strict-markers` working
# when pytest runs without that file's settings).
# ---------------------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--update-snapshots`: rewrite tests/snapshots/*.txt from this run (tests/test_snapshots.py)."""
    parser.addoption(
        "--update-snapshots",
        action="store_true",
        default=False,
        help="rewrite the wording snapshots in tests/snapshots/ from this run instead of comparing",
    )


@pytest.fixture
def update_snapshots(request: pytest.FixtureRequest) -> bool:
    """Whether this run rewrites the wording snapshots (`--update-snapshots`)."""
    return bool(request.config.getoption("--update-snapshots"))


_REAL_REQUIREMENT_INSTALLED: list[Any] = []


def _as_if_nothing_installed() -> None:
    """The summary's "install first" lines read alike on every machine: as where nothing is installed.

    The wizard says them only for what is missing where it runs (wizard.installed.requirement_installed).
    Set for the whole session (in pytest_configure), not per test: results computed once by a module
    or session fixture, or cached by tests/helpers.py's walk, must not depend on which test ran first.
    """
    import wizard.installed

    _REAL_REQUIREMENT_INSTALLED.append(wizard.installed.requirement_installed)
    wizard.installed.requirement_installed = lambda modules, commands: False  # type: ignore[assignment]


@pytest.fixture(autouse=True)
def _requirements_installed_here(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test marked `installed_here` checks the install lines with this machine's own packages."""
    if request.node.get_closest_marker("installed_here") is not None and _REAL_REQUIREMENT_INSTALLED:
        import wizard.installed

        monkeypatch.setattr(wizard.installed, "requirement_installed", _REAL_REQUIREMENT_INSTALLED[0])


def pytest_configure(config: pytest.Config) -> None:
    """Register the suite's custom markers."""
    config.addinivalue_line("markers", "installed_here: the summary's install lines follow this machine's packages")
    _as_if_nothing_installed()
    config.addinivalue_line("markers", "launch: starts a real multi-process accelerate launch on the CPU (slow)")
    config.addinivalue_line("markers", "tools: needs the real accelerate / deepspeed / axolotl packages")
    config.addinivalue_line("markers", "xdist_group(name): run on the same pytest-xdist worker as its group")
    # Groups go to the workers in the order pytest_collection_modifyitems leaves them (below), not
    # xdist's own order by number of tests, which put the real launches, the longest group by far
    # (about half of one worker's time), among the last: the other worker then sat idle for minutes.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    # No test reaches the network: a `model` answer that reads as a Hub id (org/name) is looked up
    # in the cache only. tests/test_hub_model.py runs its fetches against a local stand-in.
    os.environ["HF_HUB_OFFLINE"] = "1"
    if _CACHE_DIR not in os.environ:
        _own_cache.append(tempfile.mkdtemp(prefix="backend-wizard-test-cache-"))
        os.environ[_CACHE_DIR] = _own_cache[0]


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the template cache folder this session made."""
    for folder in _own_cache:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(_CACHE_DIR, None)


# ---------------------------------------------------------------------------------------------
# Real-tools harness: tests call the plain functions in tests/realtools.py; it needs no fixtures.
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Running on several CPUs (pytest-xdist, `-n 2 --dist loadgroup`): a module's tests stay on one
# worker, so its module-scoped fixtures (decisions over every path) are computed once; every
# multi-process launch shares one group, so no two launches compete for the CPUs or a port.
# ---------------------------------------------------------------------------------------------


# tryfirst: xdist's own hook reads the xdist_group markers to build its groups, so ours must run
# before it (without this every test is scheduled alone and module fixtures are rebuilt per worker).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each test the group it runs in under ``--dist loadgroup`` (no effect without xdist).

    The groups are then ordered for two workers: the real launches first, then the others from the
    most tests to the fewest (xdist's own order, see pytest_configure), so the long groups start
    early and the last ones to finish are short.
    """
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        group = "launch" if item.get_closest_marker("launch") else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))
        groups.setdefault(group, []).append(item)
    ordered = sorted(groups, key=lambda name: (name != "launch", -len(groups[name])))
    # Launches without DeepSpeed first: DeepSpeed's CPU ops may still be building when the run
    # starts (.ci/run builds them beside the install), and a launch that needs them waits for it.
    groups.get("launch", []).sort(key=_uses_deepspeed)
    items[:] = [item for name in ordered for item in groups[name]]


def _uses_deepspeed(item: pytest.Item) -> bool:
    """Whether a test's source names DeepSpeed (its launch may need DeepSpeed's CPU ops built)."""
    function = getattr(item, "function", None)
    try:
        return function is not None and "deepspeed" in inspect.getsource(function).lower()
    except (OSError, TypeError):
        return True
