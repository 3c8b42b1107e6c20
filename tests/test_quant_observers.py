"""Observers and qparams against hand-computed min / max and PyTorch's ``_calculate_qparams``
formulas evaluated here in exact arithmetic with float32 rounding (MPFR via gmpy2)."""

from __future__ import annotations

import warnings
from fractions import Fraction

import gmpy2
import numpy as np
import pytest

from fpsim.quant import (
    MinMaxObserver,
    MovingAverageMinMaxObserver,
    PerChannelMinMaxObserver,
    calculate_qmin_qmax,
    calculate_qparams,
)

EPS = Fraction(1, 2**23)  # torch.finfo(torch.float32).eps


def f32(v) -> Fraction:
    q = Fraction(v)
    with gmpy2.ieee(32):
        r = gmpy2.mpfr(gmpy2.mpq(q.numerator, q.denominator))
    return Fraction(*(int(t) for t in r.as_integer_ratio()))


def ref_qparams(mn: float, mx: float, qmin: int, qmax: int, symmetric: bool,
                quint8: bool = False, custom: bool = False) -> tuple[Fraction, int]:
    """PyTorch's formulas with a float32 rounding after every float operation."""
    mn_neg = min(Fraction(mn), Fraction(0))
    mx_pos = max(Fraction(mx), Fraction(0))
    if symmetric:
        s = max(f32(max(-mn_neg, mx_pos) / f32(Fraction(qmax - qmin, 2))), EPS)
        z = ((qmin + qmax) // 2 if custom else 128) if quint8 else 0
        return s, z
    s = max(f32(f32(mx_pos - mn_neg) / (qmax - qmin)), EPS)
    z = qmin - round(f32(mn_neg / s))  # torch.round: half to even, as Python's round
    return s, min(max(z, qmin), qmax)


def frac(a) -> Fraction:
    return Fraction(float(np.asarray(a).reshape(-1)[0]))


def test_minmax_affine_quint8_hand_case():
    obs = MinMaxObserver()  # PyTorch default: quint8, per-tensor affine, [0, 255]
    obs(np.array([0.5, -1.0], np.float32))
    obs(np.array([3.0, 2.0], np.float32))
    assert float(obs.min_val) == -1.0 and float(obs.max_val) == 3.0
    s, z = obs.calculate_qparams()
    assert s.dtype == np.float32 and z.dtype == np.int64 and s.shape == (1,)
    assert frac(s) == f32(Fraction(4, 255))
    assert int(z[0]) == 64  # 0 - round(-1 / (4/255)) = round(63.75) = 64


def test_range_is_widened_to_include_zero():
    obs = MinMaxObserver()
    obs([2.0, 6.0])  # all positive: min_neg = 0
    s, z = obs.calculate_qparams()
    assert frac(s) == f32(Fraction(6, 255)) and int(z[0]) == 0
    obs = MinMaxObserver(dtype="qint8")
    obs([-6.0, -2.0])  # all negative: max_pos = 0, z = -128 - round(-6 / s) = 127
    s, z = obs.calculate_qparams()
    assert frac(s) == f32(Fraction(6, 255)) and int(z[0]) == 127


def test_symmetric_qint8_and_quint8():
    obs = MinMaxObserver(dtype="qint8", qscheme="per_tensor_symmetric")
    obs([-0.5, 1.0])
    s, z = obs.calculate_qparams()
    assert frac(s) == f32(Fraction(1) / Fraction(255, 2)) and int(z[0]) == 0
    obs = MinMaxObserver(dtype="quint8", qscheme="per_tensor_symmetric")
    obs([-3.0, 1.0])
    s, z = obs.calculate_qparams()
    assert frac(s) == f32(Fraction(3) / Fraction(255, 2)) and int(z[0]) == 128


def test_zero_range_gives_eps_scale():
    # min == max == 0: scale = max(0, eps) = 2**-23, as PyTorch (not 1.0)
    for kw, z_expect in (({}, 0), ({"dtype": "qint8"}, -128 - 0),
                         ({"dtype": "qint8", "qscheme": "per_tensor_symmetric"}, 0),
                         ({"dtype": "quint8", "qscheme": "per_tensor_symmetric"}, 128)):
        obs = MinMaxObserver(**kw)
        obs(np.zeros(5, np.float32))
        s, z = obs.calculate_qparams()
        assert frac(s) == EPS
        assert int(z[0]) == z_expect


def test_unobserved_returns_default_with_warning():
    obs = MinMaxObserver()
    with pytest.warns(UserWarning, match="observer"):
        s, z = obs.calculate_qparams()
    assert s.tolist() == [1.0] and z.tolist() == [0]


def test_reduce_range_and_custom_ranges():
    assert calculate_qmin_qmax(None, None, "quint8", True) == (0, 127, False)
    assert calculate_qmin_qmax(None, None, "qint8", True) == (-64, 63, False)
    assert calculate_qmin_qmax(None, None, "qint32") == (-(2**31), 2**31 - 1, False)
    assert calculate_qmin_qmax(-8, 7, "qint8", True) == (-4, 3, True)
    obs = MinMaxObserver(reduce_range=True)
    obs([-1.0, 3.0])
    s, z = obs.calculate_qparams()
    rs, rz = ref_qparams(-1.0, 3.0, 0, 127, False)
    assert frac(s) == rs and int(z[0]) == rz
    obs = MinMaxObserver(dtype="qint8", qscheme="per_tensor_symmetric", quant_min=-8,
                         quant_max=7)
    obs([-3.0, 1.5])
    s, z = obs.calculate_qparams()
    assert frac(s) == f32(Fraction(3) / Fraction(15, 2)) and int(z[0]) == 0
    obs = MinMaxObserver(dtype="quint8", qscheme="per_tensor_symmetric", quant_min=0,
                         quant_max=15)
    obs([-3.0, 1.5])
    assert int(obs.calculate_qparams()[1][0]) == 7  # custom range: (0 + 15) // 2


def test_random_qparams_match_reference():
    rng = np.random.default_rng(0)
    for _ in range(300):
        a, b = sorted(rng.standard_normal(2) * np.exp(rng.uniform(-10, 10)))
        a, b = float(np.float32(a)), float(np.float32(b))
        for dtype, (qmin, qmax) in (("quint8", (0, 255)), ("qint8", (-128, 127))):
            for sym in (False, True):
                s, z = calculate_qparams(a, b, qmin, qmax,
                                         "per_tensor_symmetric" if sym else "per_tensor_affine",
                                         dtype)
                rs, rz = ref_qparams(a, b, qmin, qmax, sym, dtype == "quint8")
                assert frac(s) == rs, (a, b, dtype, sym)
                assert int(z[0]) == rz, (a, b, dtype, sym)


def test_moving_average_float32_steps():
    obs = MovingAverageMinMaxObserver()
    rng = np.random.default_rng(1)
    batches = [rng.standard_normal(16).astype(np.float32) * (1 + i) for i in range(30)]
    c = f32(Fraction(0.01))
    mn = mx = None
    for b in batches:
        obs(b)
        bmin, bmax = Fraction(float(b.min())), Fraction(float(b.max()))
        if mn is None:
            mn, mx = bmin, bmax
        else:
            mn = f32(mn + f32(c * f32(bmin - mn)))
            mx = f32(mx + f32(c * f32(bmax - mx)))
        assert Fraction(float(obs.min_val)) == mn
        assert Fraction(float(obs.max_val)) == mx
    s, z = obs.calculate_qparams()
    rs, rz = ref_qparams(float(mn), float(mx), 0, 255, False)
    assert frac(s) == rs and int(z[0]) == rz


def test_per_channel_min_max_and_qparams():
    rng = np.random.default_rng(2)
    w = (rng.standard_normal((4, 3, 5)) * rng.uniform(0.1, 3, (4, 1, 1))).astype(np.float32)
    for axis in (0, 1, -1):
        obs = PerChannelMinMaxObserver(ch_axis=axis, dtype="qint8",
                                       qscheme="per_channel_symmetric")
        obs(w)
        obs(w * np.float32(0.5))
        ax = axis % 3
        for c in range(w.shape[ax]):
            vals = [float(v) for v in np.take(w, c, axis=ax).reshape(-1)]
            assert float(obs.min_val[c]) == min(vals)
            assert float(obs.max_val[c]) == max(vals)
        s, z = obs.calculate_qparams()
        assert s.shape == (w.shape[ax],)
        for c in range(w.shape[ax]):
            rs, rz = ref_qparams(float(obs.min_val[c]), float(obs.max_val[c]), -128, 127, True)
            assert Fraction(float(s[c])) == rs and int(z[c]) == rz
    obs = PerChannelMinMaxObserver()  # PyTorch default: quint8 per-channel affine
    obs(w)
    s, z = obs.calculate_qparams()
    for c in range(4):
        rs, rz = ref_qparams(float(w[c].min()), float(w[c].max()), 0, 255, False)
        assert Fraction(float(s[c])) == rs and int(z[c]) == rz


def test_observer_passes_input_through():
    x = np.arange(4.0)
    assert MinMaxObserver()(x) is x
    assert MinMaxObserver()(np.zeros(0)).size == 0


def test_bad_input():
    with pytest.raises(ValueError, match="NaN"):
        MinMaxObserver()(np.array([1.0, np.nan], np.float32))
    with pytest.raises(ValueError, match="infinity"):
        MovingAverageMinMaxObserver()(np.array([1.0, np.inf]))
    with pytest.raises(ValueError, match="NaN"):
        PerChannelMinMaxObserver()(np.array([[np.nan]]))
    with pytest.raises(ValueError, match="qscheme"):
        MinMaxObserver(qscheme="per_channel_affine")
    with pytest.raises(ValueError, match="qscheme"):
        PerChannelMinMaxObserver(qscheme="per_tensor_affine")
    with pytest.raises(ValueError, match="valid"):
        MinMaxObserver(qscheme="per_tensor_magic")
    with pytest.raises(ValueError, match="valid"):
        MinMaxObserver(dtype="qint4")
    with pytest.raises(ValueError, match="reduce range"):
        MinMaxObserver(dtype="quint8", qscheme="per_tensor_symmetric", reduce_range=True)
    with pytest.raises(ValueError, match="include 0"):
        MinMaxObserver(quant_min=1, quant_max=10)
    with pytest.raises(ValueError, match="does not fit"):
        MinMaxObserver(dtype="qint8", quant_min=-200, quant_max=100)
    with pytest.raises(ValueError, match="both"):
        MinMaxObserver(quant_min=0)
    with pytest.raises(ValueError, match="channel count"):
        obs = PerChannelMinMaxObserver()
        obs(np.ones((2, 3)))
        obs(np.ones((3, 3)))
    with pytest.raises(ValueError, match="min_val must be <= max_val"):
        calculate_qparams(2.0, 1.0, 0, 255)
    with pytest.raises(ValueError, match="NaN"):
        calculate_qparams(np.nan, 1.0, 0, 255)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        calculate_qparams(0.0, 0.0, 0, 255)  # a zero range is fine: no warning


def test_qparams_range_and_eps_errors():
    with pytest.raises(ValueError, match=r"quant_min must be strictly less than quant_max, got "
                                         r"\[5, 0\]"):
        calculate_qparams(-1.0, 1.0, 5, 0)
    with pytest.raises(ValueError, match="quant_min must be strictly less than quant_max"):
        calculate_qparams(-1.0, 1.0, 5, 5)
    with pytest.raises(TypeError, match="quant_min must be an int"):
        calculate_qparams(-1.0, 1.0, 0.5, 255)
    with pytest.raises(ValueError, match=r"does not fit quint8 \[0, 255\]"):
        calculate_qparams(-1.0, 1.0, -128, 127)  # a signed range with the default quint8
    with pytest.raises(ValueError, match="eps must be positive and finite"):
        calculate_qparams(-1.0, 1.0, 0, 255, eps=-1.0)
    with pytest.raises(ValueError, match="eps must be positive and finite"):
        calculate_qparams(-1.0, 1.0, 0, 255, eps=1e-50)  # 0 in float32
    with pytest.raises(TypeError, match="eps must be a positive real number"):
        MinMaxObserver(eps="1e-6")
    with pytest.raises(ValueError, match="unknown quantized dtype 'float16'; valid: 'qint8', "
                                         "'quint8', 'qint32'"):
        calculate_qparams(-1.0, 1.0, 0, 255, dtype="float16")


def test_observer_range_errors():
    with pytest.raises(ValueError, match=r"quant_min must be strictly less than quant_max, got "
                                         r"\[5, 0\]"):
        MinMaxObserver(quant_min=5, quant_max=0)
    with pytest.raises(ValueError, match="quant_min must be strictly less than quant_max"):
        MinMaxObserver(quant_min=0, quant_max=0)
    with pytest.raises(ValueError, match="must include 0"):
        MinMaxObserver(quant_min=5, quant_max=10)
    with pytest.raises(ValueError, match="give both quant_min and quant_max"):
        MinMaxObserver(quant_min=0)
    with pytest.raises(ValueError, match="unknown quantized dtype 'int4'; valid: "):
        PerChannelMinMaxObserver(dtype="int4")
    with pytest.raises(ValueError, match="unknown qscheme 'foo'; valid: 'per_tensor_affine'"):
        MinMaxObserver(qscheme="foo")
    with pytest.raises(TypeError, match="averaging_constant must be a real number"):
        MovingAverageMinMaxObserver(averaging_constant="0.1")
    with pytest.raises(ValueError, match=r"averaging_constant must be in \(0, 1\]"):
        MovingAverageMinMaxObserver(averaging_constant=0)
    with pytest.raises(ValueError, match=r"quant_min must be strictly less"):
        calculate_qmin_qmax(3, 3, "qint8")
