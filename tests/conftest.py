"""Shared test configuration: hypothesis profiles and the reference-data location."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# the references in tests/ (tests.exact) import alike under `pytest` and `python -m pytest`
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

DATA = Path(__file__).parent / "data"
TESTFLOAT = DATA / "testfloat"

# CI runs the same examples every time (derandomize), so a failure is reproducible; "dev"
# explores new random examples: pytest --hypothesis-profile=dev
settings.register_profile(
    "ci", derandomize=True, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev", deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("ci")


@pytest.fixture(scope="session", autouse=True)
def _one_blas_thread():
    """One BLAS thread for the whole session: the tests' matrices are small, and threads that
    fight for a busy machine's cores make them many times slower (issue 14)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield


@pytest.fixture(scope="session")
def testfloat_dir() -> Path:
    """Folder of the Berkeley TestFloat vectors copied into the repository."""
    return TESTFLOAT


def pytest_collection_modifyitems(config, items):
    """The modules that hold slow tests first, their slow tests leading each (a stable sort that
    keeps every module's tests together, so a module-scoped fixture is built once per worker),
    so that pytest-xdist's workers start the longest tests at once and fill in around them
    with the many short ones, instead of one worker starting a minutes-long test near the end
    while the other idles (CI's time budget: 20 minutes on 2 cores)."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    first = {}
    for i, item in enumerate(items):  # doctests too: every item has a path, not a module
        first.setdefault(item.path, i)
    items.sort(key=lambda item: (item.path not in slow_files, first[item.path],
                                 item.get_closest_marker("slow") is None))
