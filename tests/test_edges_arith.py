"""Arithmetic and reductions at the edges (issue 15): argument errors, the native fast paths
against the general kernel and MPFR, bounded memory, and the vectorised sequential sum against
the element-by-element reference loop."""

from __future__ import annotations

import numpy as np
import pytest

import fpsim


def test_dot_length_mismatch_names_both_lengths():
    with pytest.raises(ValueError, match="length 3 in a and 1 in b"):
        fpsim.dot([1.0, 2.0, 3.0], [2.0], "fp16")
    with pytest.raises(ValueError, match="length 2 in a and 1 in b"):
        fpsim.dot(np.ones((2, 3)), np.ones(3), "fp16", axis=0)
    with pytest.raises(ValueError, match="at least one axis"):
        fpsim.dot(1.0, [1.0, 2.0], "fp16")
    with pytest.raises(TypeError, match="axis must be an int"):
        fpsim.dot([1.0], [1.0], "fp16", axis=0.5)
    # the other axes still broadcast
    assert fpsim.dot(np.ones((2, 3)), np.ones(3), "fp16").tolist() == [3.0, 3.0]


@pytest.mark.parametrize("axis", [1.5, "0", (0, 1.0), True])
def test_sum_axis_type_errors(axis):
    with pytest.raises(TypeError, match="axis must be None, an int or a tuple of ints"):
        fpsim.sum(np.ones((2, 3)), "fp16", axis=axis)


def test_sum_axis_out_of_range():
    with pytest.raises(ValueError, match="axis 5"):  # NumPy's AxisError is a ValueError
        fpsim.sum(np.ones((2, 3)), "fp16", axis=5)
