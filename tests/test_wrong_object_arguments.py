"""An argument of the wrong kind of object (a string where a model, a mapping or histograms
belong) is a TypeError naming the function, the argument and what was given, not the
AttributeError of the first method called on it. Found by calling every public function's
docstring example with one argument swapped for a bad value."""

from __future__ import annotations

import numpy as np
import pytest

from fpsim import amp, quant

MODEL_TAKERS = {
    "model_size_bytes": quant.model_size_bytes,
    "prepare_qlora": quant.prepare_qlora,
    "lora_parameters": quant.lora_parameters,
    "training_memory": quant.training_memory,
    "prepare": quant.prepare,
    "prepare_qat": quant.prepare_qat,
    "convert": quant.convert,
    "quantize_ptq": lambda m: quant.quantize_ptq(m, np.zeros((2, 4))),
}


@pytest.mark.parametrize("name", sorted(MODEL_TAKERS))
@pytest.mark.parametrize("bad", ["net", None, [1, 2], np.zeros(3)])
def test_a_model_argument_must_be_a_module(name, bad):
    with pytest.raises(TypeError, match=rf"^{name}: model must be an fpsim.nn.Module, got "
                                        rf"{type(bad).__name__} "):
        MODEL_TAKERS[name](bad)


def test_policy_overrides_and_histograms_are_checked():
    with pytest.raises(TypeError, match="overrides must be a mapping of op names to policies "
                                        r"\(or None\), got str 'exp'"):
        amp.get_autocast_policy("exp")
    for bad in ("abc", [1], [amp.exponent_histogram(np.array([1.0])), None]):
        with pytest.raises(TypeError, match="merge_histograms takes ExponentHistograms"):
            amp.merge_histograms(bad)
    merged = amp.merge_histograms([amp.exponent_histogram(np.array([1.0, 2.0]))])
    assert merged.as_dict() == {0: 1, 1: 1}


def test_ragged_and_unbroadcastable_arrays_in_the_upper_layers():
    """The core's rules (checks.as_array, checks.broadcast_shape) where the amp instruments
    and the figures take arrays."""
    from fpsim import viz
    with pytest.raises(ValueError, match=r"^lost_updates: operands could not be broadcast "
                                         r"together with shapes \(3,\) \(4,\)"):
        amp.lost_updates(np.zeros(3), np.zeros(4), "fp16")
    with pytest.raises(ValueError, match="^a must be a number or a rectangular array"):
        viz.block_alignment([1.0, [2.0]], [1.0, 2.0], 1.0)


def test_a_hardware_file_path_is_not_a_file_descriptor():
    """open() takes an int as a file descriptor: load_hardware_file(True) read standard output
    and closed it. A path must be a str or os.PathLike."""
    import os

    import fpsim.tensorcore as tc
    for bad in (True, 1, 2):
        with pytest.raises(TypeError, match="expected str, bytes or os.PathLike object"):
            tc.load_hardware_file(bad)
        for fd in (0, 1, 2):
            os.fstat(fd)  # still open
