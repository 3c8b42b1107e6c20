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
