"""The Python examples of the README and of docs/autograd.md run and print what they say."""

import doctest
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["README.md", "docs/autograd.md"])
def test_examples_run(name: str) -> None:
    result = doctest.testfile(str(ROOT / name), module_relative=False,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0


def test_ci_runs_exactly_the_readme_test_command() -> None:
    """.ci/run's command is the README's test command (the suite, then the lowest declared
    NumPy and ml_dtypes: tools/lowest_versions.py), character for character."""
    ci = [line for line in (ROOT / ".ci/run").read_text().splitlines()
          if line and not line.startswith(("#", "set ", "cd "))]
    readme = (ROOT / "README.md").read_text()
    assert len(ci) == 1 and "tools/lowest_versions.py" in ci[0]
    assert f"\n    {ci[0]}\n" in readme
