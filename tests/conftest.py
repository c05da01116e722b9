"""Shared pytest configuration for the backend-wizard test suite."""

import pytest

# ---------------------------------------------------------------------------------------------
# Markers (also listed in pyproject.toml; registering them here keeps `--strict-markers` working
# when pytest runs without that file's settings).
# ---------------------------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    """Register the suite's custom markers."""
    config.addinivalue_line("markers", "launch: starts a real multi-process accelerate launch on the CPU (slow)")
    config.addinivalue_line("markers", "tools: needs the real accelerate / deepspeed / axolotl packages")


# ---------------------------------------------------------------------------------------------
# Real-tools harness: tests call the plain functions in tests/realtools.py; it needs no fixtures.
# ---------------------------------------------------------------------------------------------
