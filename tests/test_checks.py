"""fpsim.checks.as_int: the one count/size validator (issue 20), and that its former copies in
datasets, memory, amp and distributed now raise its errors."""

import re

import numpy as np
import pytest

from fpsim.checks import as_int
from tests.intlike import Count


@pytest.mark.parametrize("value, minimum, expected", [
    (3, 1, 3), (0, 0, 0), (1, 1, 1), (-2, -5, -2), (2**70, 1, 2**70),
    (np.int64(4), 1, 4), (np.int8(0), 0, 0), (np.uint64(2**63), 1, 2**63), (np.int32(7), 7, 7),
    (np.array(3), 1, 3), (np.array(5, np.uint8), 0, 5), (range(9)[4], 1, 4),
])
def test_accepts_python_and_numpy_integers(value, minimum, expected):
    got = as_int("n", value, minimum)
    assert got == expected and type(got) is int


@pytest.mark.parametrize("value, shown", [
    (True, "bool True"), (False, "bool False"), (np.True_, "bool np.True_"),
    (2.0, "float 2.0"), (2.5, "float 2.5"), (np.float32(3.0), "float32 np.float32(3.0)"),
    ("3", "str '3'"), (None, "NoneType None"), (3 + 0j, "complex (3+0j)"),
    (np.array(3.0), "ndarray array(3.)"), (np.array([3]), "ndarray array([3])"),
    (np.array(True), "ndarray array(True)"), ([3], "list [3]"),
    (np.timedelta64(3), "timedelta64 np.timedelta64(3)"),
])
def test_refuses_non_integers_with_a_type_error_naming_argument_and_value(value, shown):
    with pytest.raises(TypeError, match=re.escape(f"batch_size must be an int, got {shown}")):
        as_int("batch_size", value, 1)


@pytest.mark.parametrize("value, minimum", [
    (0, 1), (-1, 0), (np.int64(-3), 0), (4, 5), (np.uint8(0), 1),
])
def test_refuses_values_below_the_minimum_with_a_value_error(value, minimum):
    with pytest.raises(ValueError, match=re.escape(f"epochs must be >= {minimum}, got {value}")):
        as_int("epochs", value, minimum)


def test_whole_floats_accepts_integral_floats_only():
    assert as_int("size", 8.0, 0, whole_floats=True) == 8
    assert as_int("size", 1e9, 0, whole_floats=True) == 10**9
    assert as_int("size", np.float16(4.0), 0, whole_floats=True) == 4
    assert type(as_int("size", 8.0, 0, whole_floats=True)) is int
    assert as_int("size", np.int64(8), 0, whole_floats=True) == 8
    for bad in (2.5, float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError, match="size must be a whole number"):
            as_int("size", bad, 0, whole_floats=True)
    with pytest.raises(ValueError, match=re.escape("size must be >= 0, got -4.0")):
        as_int("size", -4.0, 0, whole_floats=True)
    for bad in (True, np.True_, "8", None, 8 + 0j):
        with pytest.raises(TypeError, match="size must be an int"):
            as_int("size", bad, 0, whole_floats=True)


# ------------------------------------------------------------ the former copies, one rule now
def _callers():
    from fpsim.amp.deepspeed_scaler import DynamicLossScaler
    from fpsim.amp.scaler import GradScaler
    from fpsim.datasets import minibatches
    from fpsim.distributed import ring_volume
    from fpsim.memory import checkpoint_peak_activations

    return {
        "batch_size": lambda v: minibatches(8, v),
        "growth_interval": lambda v: GradScaler(growth_interval=v),
        "world_size": lambda v: ring_volume("all_reduce", 8, v),
        "n_layers": lambda v: checkpoint_peak_activations(v, 1),
        "hysteresis": lambda v: DynamicLossScaler(hysteresis=v),
    }


@pytest.mark.parametrize("name", ["batch_size", "growth_interval", "world_size",
                                  "n_layers", "hysteresis"])
def test_callers_share_the_rule(name):
    call = _callers()[name]
    for bad in (True, "2", None):
        with pytest.raises(TypeError, match=f"{name} must be an int, got"):
            call(bad)
    for low in (0, -1, np.int64(0)):
        with pytest.raises(ValueError, match=f"{name} must be >= 1, got {low}"):
            call(low)
    call(np.int64(2))
    call(2)


def test_communicator_world_size_shares_the_rule():
    from fpsim.distributed.collectives import Communicator

    for bad in (True, "2", None, 2.0):
        with pytest.raises(TypeError, match="world_size must be an int, got"):
            Communicator(bad)
    for low in (0, -1, np.int64(0)):
        with pytest.raises(ValueError, match=f"world_size must be >= 1, got {low}"):
            Communicator(low)
    n = Communicator(np.int64(2)).world_size
    assert n == 2 and type(n) is int


def test_accepts_what_range_takes():
    assert as_int("n", Count(6), 1) == 6 and len(range(Count(6))) == 6
    with pytest.raises(ValueError, match=re.escape("n must be >= 1, got -2") + "$"):
        as_int("n", Count(-2), 1)  # the int it stands for, not the object's repr


def test_minimum_none_checks_the_type_only():
    for v in (-(2**70), np.int64(-3), Count(-1), np.array(0)):
        got = as_int("n", v, None)
        assert got == int(np.asarray(v.__index__() if isinstance(v, Count) else v))
        assert type(got) is int
    for bad in (True, 2.0, "2", None):
        with pytest.raises(TypeError, match="n must be an int, got"):
            as_int("n", bad, None)
    with pytest.raises(ValueError, match=re.escape("n must be >= 1, got 0")):
        as_int("n", np.array(0), 1)


def test_as_int_in_takes_what_as_int_takes_and_names_the_valid_values():
    from fpsim.checks import as_int_in

    assert as_int_in("bits", np.int64(8), (4, 8), "unsupported bit width {!r}") == 8
    for bad in (8.0, True, "8", None):
        with pytest.raises(TypeError, match="bits must be an int"):
            as_int_in("bits", bad, (4, 8), "unsupported bit width {!r}")
    with pytest.raises(ValueError, match=r"^bad stage 5; valid: 0 \(zero\), 1 \(one\)$"):
        as_int_in("stage", 5, (0, 1), "bad stage {!r}", lambda s: f"{s} ({('zero', 'one')[s]})")
