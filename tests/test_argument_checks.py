"""Argument checks across modules (counts, empty data, layer sizes, far decimals): inputs
whose handling the issue-20 refactors changed by mistake."""

import numpy as np
import pytest


def _count_callers():
    from fpsim.amp.deepspeed_scaler import DynamicLossScaler
    from fpsim.amp.scaler import ApexLossScaler, GradScaler
    from fpsim.datasets import minibatches
    from fpsim.distributed import ring_volume
    from fpsim.memory import checkpoint_peak_activations, optimal_checkpoint_segments

    return {
        "n_samples": lambda v: minibatches(v, 1),
        "batch_size": lambda v: minibatches(8, v),
        "epochs": lambda v: minibatches(8, 2, v),
        "n_layers": lambda v: checkpoint_peak_activations(v, 1),
        "segments": lambda v: checkpoint_peak_activations(10, v),
        "n_layers ": lambda v: optimal_checkpoint_segments(v),
        "growth_interval": lambda v: GradScaler(growth_interval=v),
        "scale_window": lambda v: ApexLossScaler(scale_window=v),
        "hysteresis": lambda v: DynamicLossScaler(hysteresis=v),
        "world_size": lambda v: ring_volume("all_reduce", 8, v),
        "size": lambda v: ring_volume("all_reduce", v, 2),
    }


@pytest.mark.parametrize("name", list(_count_callers()))
def test_a_timedelta_is_not_a_count(name):
    # np.timedelta64 subclasses np.signedinteger; datasets and memory refused it before as_int
    # (operator.index does), as_int took np.timedelta64(3) for 3
    call = _count_callers()[name]
    with pytest.raises(TypeError, match=f"{name.strip()} must be an int, got timedelta64"):
        call(np.timedelta64(3))
    call(np.int64(3))


def test_train_on_an_empty_training_set_names_the_data():
    # before 9ed4eb1 the trainer ran on empty batches and returned NaN losses; since it draws
    # through minibatches it stopped with minibatches' "n_samples must be >= 1", a name train()
    # does not have
    from fpsim.datasets import load_digits
    from fpsim.training import train

    d = load_digits()
    empty = type(d)(d.x_train[:0], d.y_train[:0], d.x_test[:20], d.y_test[:20])
    with pytest.raises(ValueError, match=r"data\.x_train is empty"):
        train(data=empty, precision="fp32", sizes=(64, 8, 10), steps=2, batch_size=4,
              eval_every=2)


@pytest.mark.parametrize("cls_name", ["FP8Linear", "MXLinear"])
def test_quant_linear_sizes_as_nn_linear(cls_name):
    """FP8Linear / MXLinear take sizes as nn.Linear does (ints >= 1): a zero size was a
    ZeroDivisionError from the bias bound 1 / sqrt(in_features)."""
    import fpsim.quant as Q

    cls = getattr(Q, cls_name)
    for args, err, text in (((0, 4), ValueError, "in_features must be >= 1"),
                            ((4, 0), ValueError, "out_features must be >= 1"),
                            ((2.0, 3), TypeError, "in_features must be an int"),
                            ((True, 3), TypeError, "in_features must be an int")):
        with pytest.raises(err, match=text):
            cls(*args)
    assert cls(np.int64(3), 2, rng=0).weight.shape == (2, 3)


def test_show_far_decimals_answers_at_once():
    """`fpsim show` on a decimal far beyond every format (1e-999999999) answers at once: its
    error line no longer builds the exact Fraction (10**999999999, minutes of work)."""
    import subprocess
    import sys

    code = ("from fpsim.cli import main\n"
            "for v in ('1e-999999999', '-1e999999999', '1e-1001'):\n"
            "    main(['show', v, '-f', 'fp16', '--rounding', 'up'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    errors = [ln for ln in lines if ln.startswith("error")]
    assert errors == [
        "error        : the rounded value itself, to every digit shown (|x| is below 10**-1000)",
        "error        : -x, to every digit shown (|x| is above 10**1000)",
        "error        : the rounded value itself, to every digit shown (|x| is below 10**-1000)"]
    assert "rounded      : -65504.0" in lines  # rounding up from -1e999999999: the largest
