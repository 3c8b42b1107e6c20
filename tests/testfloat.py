"""Reading Berkeley TestFloat vector files (tests/data/testfloat, format in its README)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

DATA = Path(__file__).parent / "data" / "testfloat"

_HEX = np.full(256, 255, np.uint8)
_HEX[np.frombuffer(b"0123456789", np.uint8)] = np.arange(10)
_HEX[np.frombuffer(b"ABCDEF", np.uint8)] = np.arange(10, 16)
_HEX[np.frombuffer(b"abcdef", np.uint8)] = np.arange(10, 16)


def load(name: str | Path) -> list[np.ndarray]:
    """The hexadecimal columns of a TestFloat file (a name such as "f16_add__rmin", or a path)
    as uint64 arrays. Every line of a file has the same layout, so the text is decoded as a 2-D
    array of characters, without a Python loop over lines."""
    path = Path(name) if isinstance(name, Path) else DATA / f"{name}.txt.gz"
    raw = gzip.decompress(path.read_bytes())
    width = raw.index(b"\n") + 1
    assert len(raw) % width == 0, f"{path.name}: lines are not all of the same width"
    rows = np.frombuffer(raw, np.uint8).reshape(-1, width)
    assert (rows[:, -1] == ord("\n")).all()
    spaces = np.flatnonzero(rows[0, :-1] == ord(" "))
    assert (rows[:, spaces] == ord(" ")).all(), f"{path.name}: fields are not aligned"
    bounds = np.concatenate([[-1], spaces, [width - 1]])
    cols = []
    for start, stop in zip(bounds[:-1] + 1, bounds[1:], strict=True):
        nib = _HEX[rows[:, start:stop]]
        assert (nib < 16).all(), f"{path.name}: a field is not hexadecimal"
        weights = np.uint64(1) << (np.uint64(4) * np.arange(stop - start - 1, -1, -1,
                                                             dtype=np.uint64))
        cols.append((nib.astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64))
    return cols
