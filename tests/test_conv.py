"""conv2d, max_pool2d, avg_pool2d (fpsim/autograd/conv.py) and nn.Conv2d / MaxPool2d /
AvgPool2d against references written here, independent of the im2col code: a direct convolution
and direct pooling (explicit loops over output positions and kernel taps, float64), float64
central finite differences for the gradients (tests.test_autograd.check_grads), and fpsim.round
of the exact float64 result for the one-rounding rule in fp16. A few PyTorch results are typed
in as constants where noted (each checked against PyTorch 2.13)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fpsim
from fpsim import nn
from fpsim.autograd import Tensor, matmul_accumulation
from fpsim.autograd import functional as F
from tests.test_autograd import check_grads, t64

FP16, FP32, FP64 = fpsim.FP16, fpsim.FP32, fpsim.FP64
RNG = np.random.default_rng(2024)


def rnd(*shape: int) -> np.ndarray:
    return RNG.uniform(-2.0, 2.0, size=shape)


def distinct(*shape: int) -> np.ndarray:
    """Distinct values 1/7 apart: no ties in a pooling window, and a finite-difference step
    never changes a window's winner."""
    return RNG.permutation(math.prod(shape)).reshape(shape) / 7.0


def grid16(*shape: int, scale: int = 32) -> np.ndarray:
    """fp16 values k/16, |k| <= scale: products and their sums are exact in float64."""
    return RNG.integers(-scale, scale + 1, size=shape) / 16.0


def pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


# ------------------------------------------------------------------------- references
def ref_conv_pads(padding, k: tuple, d: tuple) -> tuple[int, int, int, int]:
    """(top, bottom, left, right); 'same': total d (k - 1), the odd element at the end."""
    if padding == "valid":
        return 0, 0, 0, 0
    if padding == "same":
        (th, tw) = (d[0] * (k[0] - 1), d[1] * (k[1] - 1))
        return th // 2, th - th // 2, tw // 2, tw - tw // 2
    ph, pw = pair(padding)
    return ph, ph, pw, pw


def conv_taps(xshape, wshape, stride, padding, dilation, groups):
    """Output size and every (o, c_in_group, c, i, j, y, q, r, col) with input position (r,
    col) inside the input: out[:, o, y, q] += x[:, c, r, col] * w[o, ci, i, j]."""
    _, _, h, wd = xshape
    co, cg, kh, kw = wshape
    (sh, sw), (dh, dw) = pair(stride), pair(dilation)
    top, bottom, left, right = ref_conv_pads(padding, (kh, kw), (dh, dw))
    oh = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + left + right - dw * (kw - 1) - 1) // sw + 1
    taps = []
    for o in range(co):
        grp = o // (co // groups)
        for ci in range(cg):
            for i in range(kh):
                for j in range(kw):
                    for y in range(oh):
                        for q in range(ow):
                            r, col = y * sh + i * dh - top, q * sw + j * dw - left
                            if 0 <= r < h and 0 <= col < wd:
                                taps.append((o, ci, grp * cg + ci, i, j, y, q, r, col))
    return (oh, ow), taps


def ref_conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1, g=None):
    """Direct convolution in float64; with an output gradient ``g`` also (gx, gw)."""
    (oh, ow), taps = conv_taps(x.shape, w.shape, stride, padding, dilation, groups)
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    gx, gw = np.zeros(x.shape), np.zeros(w.shape)
    for o, ci, c, i, j, y, q, r, col in taps:
        out[:, o, y, q] += x[:, c, r, col] * w[o, ci, i, j]
        if g is not None:
            gx[:, c, r, col] += g[:, o, y, q] * w[o, ci, i, j]
            gw[o, ci, i, j] += np.sum(g[:, o, y, q] * x[:, c, r, col])
    if b is not None:
        out += np.asarray(b)[None, :, None, None]
    return out if g is None else (out, gx, gw)


def ref_pool_len(size: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    """Windows that fit in the padded input; with ceil_mode one more covering the leftover
    end, unless it would start past the input (in the right padding)."""
    padded, span = size + 2 * p, d * (k - 1) + 1
    starts = [o * s for o in range(padded) if o * s + span <= padded]
    if ceil and starts and starts[-1] + span < padded and starts[-1] + s < size + p:
        starts.append(starts[-1] + s)
    return len(starts)


def pool_windows(xshape, k, s, p, d, ceil):
    """Output size and, per output (y, q), the input positions of its taps inside the input
    (tap order) and the number of its taps inside input + padding."""
    (kh, kw), (ph, pw), (dh, dw) = pair(k), pair(p), pair(d)
    sh, sw = pair(k if s is None else s)
    h, wd = xshape[2:]
    oh, ow = ref_pool_len(h, kh, sh, ph, dh, ceil), ref_pool_len(wd, kw, sw, pw, dw, ceil)
    wins = {}
    for y in range(oh):
        for q in range(ow):
            inside, padded = [], 0
            for i in range(kh):
                for j in range(kw):
                    r, col = y * sh + i * dh - ph, q * sw + j * dw - pw
                    padded += -ph <= r < h + ph and -pw <= col < wd + pw
                    if 0 <= r < h and 0 <= col < wd:
                        inside.append((r, col))
            wins[y, q] = inside, padded
    return (oh, ow), wins


def ref_max_pool2d(x, k, s=None, p=0, d=1, ceil=False):
    """(values, flat indices, gradient of sum(out * proj)) by numpy's argmax over each
    window's in-input taps (the first maximum)."""
    (oh, ow), wins = pool_windows(x.shape, k, s, p, d, ceil)
    n, c, h, wd = x.shape
    vals, idx = np.zeros((n, c, oh, ow)), np.zeros((n, c, oh, ow), dtype=np.int64)
    for (y, q), (inside, _) in wins.items():
        tv = np.stack([x[:, :, r, col] for r, col in inside], axis=-1)
        a = np.argmax(tv, axis=-1)
        vals[:, :, y, q] = np.take_along_axis(tv, a[..., None], axis=-1)[..., 0]
        idx[:, :, y, q] = np.array([r * wd + col for r, col in inside])[a]
    return vals, idx


def ref_max_pool_grad(xshape, idx, g):
    """The output gradient summed (float64) at each window's selected input position."""
    n, c, h, wd = xshape
    gx = np.zeros((n, c, h * wd))
    for a in range(n):
        for b in range(c):
            np.add.at(gx[a, b], idx[a, b].ravel(), g[a, b].ravel())
    return gx.reshape(xshape)


def ref_avg_pool2d(x, k, s=None, p=0, ceil=False, count_include_pad=True, divisor=None,
                   g=None):
    """Window sum of the in-input taps over PyTorch's divisor; with ``g`` also the input
    gradient (g / divisor at each in-input tap, summed)."""
    (oh, ow), wins = pool_windows(x.shape, k, s, p, 1, ceil)
    out, gx = np.zeros(x.shape[:2] + (oh, ow)), np.zeros(x.shape)
    for (y, q), (inside, padded) in wins.items():
        div = divisor if divisor is not None else padded if count_include_pad else len(inside)
        for r, col in inside:
            out[:, :, y, q] += x[:, :, r, col]
            if g is not None:
                gx[:, :, r, col] += g[:, :, y, q] / div
        out[:, :, y, q] /= div
    return out if g is None else (out, gx)


# ------------------------------------------------------------------------------ conv2d
CONV_CASES = [  # (C_in, C_out, kernel, stride, padding, dilation, groups)
    (2, 3, 3, 1, 0, 1, 1),
    (2, 3, 3, 2, 1, 1, 1),
    (2, 3, 3, 1, 0, 2, 1),            # dilation
    (3, 2, (2, 3), (2, 1), (1, 0), (2, 1), 1),
    (4, 6, 3, 1, 1, 1, 2),            # groups
    (4, 4, 3, 2, 2, 2, 4),            # depthwise, dilated, strided
    (4, 8, 3, 1, 1, 1, 4),            # depthwise with channel multiplier 2
    (2, 4, 3, 1, "same", 2, 2),
    (2, 2, (2, 4), 1, "same", (3, 1), 1),  # even kernels: asymmetric 'same' padding
    (2, 3, 3, 1, "valid", 2, 1),
]


@pytest.mark.parametrize("cin,cout,k,stride,padding,dilation,groups", CONV_CASES)
def test_conv2d_values_against_direct_convolution(cin, cout, k, stride, padding, dilation,
                                                   groups):
    kh, kw = pair(k)
    x, w, b = rnd(2, cin, 7, 6), rnd(cout, cin // groups, kh, kw), rnd(cout)
    got = F.conv2d(t64(x, False), t64(w, False), t64(b, False), stride, padding, dilation,
                   groups)
    ref = ref_conv2d(x, w, b, stride, padding, dilation, groups)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-13, atol=1e-13)
    if padding == "same":
        assert got.shape[2:] == x.shape[2:]


@pytest.mark.parametrize("cin,cout,k,stride,padding,dilation,groups",
                         [CONV_CASES[i] for i in (2, 3, 5, 6, 8)])
def test_conv2d_gradients_against_finite_differences(cin, cout, k, stride, padding, dilation,
                                                     groups):
    kh, kw = pair(k)
    x, w, b = rnd(2, cin, 5, 6), rnd(cout, cin // groups, kh, kw), rnd(cout)
    check_grads(lambda a, kk, c: F.conv2d(a, kk, c, stride, padding, dilation, groups), x, w, b)


def test_conv2d_same_padding_puts_the_odd_element_at_the_end():
    # PyTorch: F.conv2d([[[[1, 2, 3, 4]]]], [[[[1, 10]]]], padding="same") -> [21, 32, 43, 4]
    x, w = t64([[[[1.0, 2.0, 3.0, 4.0]]]], False), t64([[[[1.0, 10.0]]]], False)
    assert F.conv2d(x, w, padding="same").tolist() == [[[[21.0, 32.0, 43.0, 4.0]]]]
    # dilation 3, kernel 2: total 3, one row on top, two at the bottom
    col = t64(np.arange(1.0, 5.0).reshape(1, 1, 4, 1), False)
    got = F.conv2d(col, t64([[[[1.0], [10.0]]]], False), padding="same", dilation=(3, 1))
    assert got.numpy().ravel().tolist() == [30.0, 41.0, 2.0, 3.0]  # [0, 1, 2, 3, 4, 0, 0]


def test_conv2d_groups_are_independent_convolutions():
    x, w = rnd(1, 4, 5, 5), rnd(6, 2, 3, 3)
    got = F.conv2d(t64(x, False), t64(w, False), groups=2, padding=1).numpy()
    for grp in range(2):
        part = F.conv2d(t64(x[:, 2 * grp:2 * grp + 2], False), t64(w[3 * grp:3 * grp + 3], False),
                        padding=1).numpy()
        np.testing.assert_array_equal(got[:, 3 * grp:3 * grp + 3], part)


@pytest.mark.parametrize("stride,padding,dilation,groups",
                         [(1, 0, 1, 1), (2, 1, 2, 2), (1, "same", 2, 4), (1, "same", (1, 2), 1)])
def test_conv2d_fp16_is_the_exact_result_rounded_once(stride, padding, dilation, groups):
    """Under the "exact" accumulation model the output, the input gradient (col2im in
    float64) and the weight and bias gradients are the float64-exact values rounded once."""
    x, w, b = grid16(2, 4, 6, 6), grid16(4, 4 // groups, 3, 3), grid16(4)
    g = grid16(*ref_conv2d(x, w, b, stride, padding, dilation, groups).shape)
    out, gx, gw = ref_conv2d(x, w, b, stride, padding, dilation, groups, g=g)
    tx, tw, tb = (Tensor(a, FP16, requires_grad=True) for a in (x, w, b))
    with matmul_accumulation("exact"):
        y = F.conv2d(tx, tw, tb, stride, padding, dilation, groups)
        y.backward(g)
    assert y.fmt == FP16 and tx.grad.dtype == np.float16
    assert not np.array_equal(fpsim.round(out, FP16), out)  # the rounding is exercised
    np.testing.assert_array_equal(y.numpy(np.float64), fpsim.round(out, FP16))
    np.testing.assert_array_equal(tx.grad.astype(np.float64), fpsim.round(gx, FP16))
    np.testing.assert_array_equal(tw.grad.astype(np.float64), fpsim.round(gw, FP16))
    np.testing.assert_array_equal(tb.grad.astype(np.float64),
                                  fpsim.round(g.sum(axis=(0, 2, 3)), FP16))


def test_conv2d_unbatched_input():
    x, w = rnd(2, 5, 5), rnd(4, 1, 3, 3)
    got = F.conv2d(t64(x, False), t64(w, False), None, 1, "same", 2, 2)
    assert got.shape == (4, 5, 5)
    np.testing.assert_allclose(got.numpy(), ref_conv2d(x[None], w, None, 1, "same", 2, 2)[0],
                               rtol=1e-13, atol=1e-13)


def test_conv2d_bad_arguments_name_the_problem():
    x, w = t64(np.zeros((1, 4, 5, 5))), t64(np.zeros((6, 2, 3, 3)))
    with pytest.raises(ValueError, match=r"groups=4.*divisible by 4 at dimension 0.*"
                                         r"\(6, 2, 3, 3\)"):
        F.conv2d(x, w, groups=4)
    with pytest.raises(ValueError, match=r"groups=3.*\(6, 2, 3, 3\).*\(1, 4, 5, 5\) to have 6 "
                                         r"channels, but got 4"):
        F.conv2d(x, w, groups=3)
    with pytest.raises(ValueError, match="groups must be a positive integer, got 0"):
        F.conv2d(x, w, groups=0)
    with pytest.raises(ValueError, match="invalid padding string 'full', should be one of "
                                         "'valid', 'same'"):
        F.conv2d(x, w, padding="full", groups=2)
    with pytest.raises(ValueError, match="padding='same' is not supported for strided"):
        F.conv2d(x, w, stride=2, padding="same", groups=2)
    with pytest.raises(ValueError, match="dilation must be positive, got 0"):
        F.conv2d(x, w, dilation=0, groups=2)
    with pytest.raises(ValueError, match="stride must be positive"):
        F.conv2d(x, w, stride=(1, 0), groups=2)
    with pytest.raises(ValueError, match="padding must be non-negative"):
        F.conv2d(x, w, padding=-1, groups=2)
    with pytest.raises(ValueError, match=r"padding must be an int or a pair of ints, got "
                                         r"\(1, 2, 3\)"):
        F.conv2d(x, w, padding=(1, 2, 3), groups=2)
    with pytest.raises(ValueError, match=r"dilation \(3, 3\) spans \(7, 7\), larger than the "
                                         r"padded input \(5, 5\)"):
        F.conv2d(x, w, dilation=3, groups=2)
    with pytest.raises(ValueError, match=r"bias shape \(4,\) does not match 6 output"):
        F.conv2d(x, w, t64(np.zeros(4)), groups=2)
    with pytest.raises(ValueError, match=r"got shapes \(1, 1, 4, 5\) and \(2, 3, 3\)"):
        F.conv2d(t64(np.zeros((1, 1, 4, 5))), w[0])


class _Two:
    """An integer-like object: range() takes it through __index__."""

    def __index__(self) -> int:
        return 2


def test_conv2d_groups_take_what_range_takes():
    # groups is checked by fpsim.checks.as_int: NumPy integers, 0-d integer arrays and
    # __index__ objects are the count they stand for (values and grads as with the int)
    x, w = rnd(1, 4, 5, 5), rnd(6, 2, 3, 3)
    xt, wt = t64(x), t64(w)
    ref = F.conv2d(xt, wt, groups=2)
    ref.sum().backward()
    ref_g = xt.grad.copy(), wt.grad.copy()
    for g in (np.int8(2), np.uint64(2), np.array(2), np.array(2, dtype=np.int16), _Two()):
        assert len(range(g)) == 2
        xt, wt = t64(x), t64(w)
        out = F.conv2d(xt, wt, groups=g)
        out.sum().backward()
        np.testing.assert_array_equal(out.numpy(), ref.numpy())
        np.testing.assert_array_equal(xt.grad, ref_g[0])
        np.testing.assert_array_equal(wt.grad, ref_g[1])
        layer = nn.Conv2d(4, 6, 3, groups=g, rng=0)
        assert layer.groups == 2 and type(layer.groups) is int


def test_conv_and_pool_sizes_take_what_range_takes():
    # kernel_size, stride, padding and dilation (ints or pairs) are checked by
    # fpsim.checks.as_int, element by element: NumPy integers, 0-d integer arrays and
    # __index__ objects give the int's result; other types are a TypeError naming the op
    x, w = t64(rnd(1, 2, 7, 7)), t64(rnd(4, 2, 3, 3))
    ref = F.conv2d(x, w, stride=2, padding=1, dilation=(1, 2)).numpy()
    two = _Two()
    for s, p, d in ((np.int64(2), np.array(1), (1, two)), ((two, np.uint8(2)), (1, 1),
                                                            (np.array(1), 2))):
        np.testing.assert_array_equal(F.conv2d(x, w, stride=s, padding=p, dilation=d).numpy(),
                                      ref)
    ref = F.max_pool2d(x, 3, stride=2, padding=1).numpy()
    np.testing.assert_array_equal(F.max_pool2d(x, np.array(3), stride=two, padding=(1, 1)
                                               ).numpy(), ref)
    ref = F.avg_pool2d(x, 2, stride=2).numpy()
    np.testing.assert_array_equal(F.avg_pool2d(x, (two, two), stride=np.int8(2)).numpy(), ref)
    layer = nn.Conv2d(2, 4, np.array(3), stride=two, padding=np.int64(1), rng=0)
    assert (layer.kernel_size, layer.stride, layer.padding) == ((3, 3), (2, 2), (1, 1))
    for bad in ((1, 2, 3), np.array([2]), ()):  # a sequence of another length
        with pytest.raises(ValueError, match="conv2d: stride must be an int or a pair of ints"):
            F.conv2d(x, w, stride=bad)
    for bad in (True, 2.0, "2", None, np.array([2.0, 2.0]), np.array(2.0), np.timedelta64(2)):
        for kwargs, name in (({"stride": bad}, "stride"), ({"padding": (1, bad)}, "padding"),
                             ({"dilation": bad}, "dilation")):
            with pytest.raises(TypeError, match=f"conv2d: {name} must be an int or a pair of "
                                                "ints"):
                F.conv2d(x, w, **kwargs)
        with pytest.raises(TypeError, match="max_pool2d: kernel_size must be an int or a pair"):
            F.max_pool2d(x, bad)
        with pytest.raises(TypeError, match="Conv2d: stride must be an int or a pair of ints"):
            nn.Conv2d(2, 4, 3, stride=bad)


@pytest.mark.parametrize("bad", [True, np.True_, 2.0, np.float32(2.0), "2", None,
                                 np.array([2]), np.array(2.0), np.timedelta64(2)])
def test_conv2d_groups_refuse_non_integers_with_a_type_error(bad):
    x, w = t64(np.zeros((1, 4, 5, 5))), t64(np.zeros((6, 2, 3, 3)))
    with pytest.raises(TypeError, match=r"conv2d: groups must be a positive integer, got "
                                        + type(bad).__name__):
        F.conv2d(x, w, groups=bad)
    with pytest.raises(TypeError, match=r"Conv2d: groups must be a positive integer, got "
                                        + type(bad).__name__):
        nn.Conv2d(4, 6, 3, groups=bad)


@pytest.mark.parametrize("low", [0, -1, np.int64(0), np.array(-2)])
def test_conv2d_groups_below_one_is_a_value_error(low):
    x, w = t64(np.zeros((1, 4, 5, 5))), t64(np.zeros((6, 2, 3, 3)))
    with pytest.raises(ValueError, match="conv2d: groups must be a positive integer, got "):
        F.conv2d(x, w, groups=low)
    with pytest.raises(ValueError, match=r"Conv2d: groups must be a positive integer \(>= 1\)"):
        nn.Conv2d(4, 6, 3, groups=low)


# -------------------------------------------------------------------------- max_pool2d
POOL_CASES = [  # (kernel, stride, padding, dilation, ceil_mode)
    (2, None, 0, 1, False),
    (3, 1, 1, 1, False),
    (3, 2, 1, 2, False),              # dilation
    ((2, 3), (1, 2), (1, 1), (2, 1), False),
    (2, None, 0, 1, True),            # ceil_mode: a partial last window
    (3, 2, 1, 1, True),
    (2, 2, 1, 1, True),               # ceil_mode window dropped: it would start in the padding
    (3, 3, 1, 2, True),
]


@pytest.mark.parametrize("k,s,p,d,ceil", POOL_CASES)
def test_max_pool2d_values_indices_and_gradient(k, s, p, d, ceil):
    x = distinct(2, 2, 7, 6)
    vals, idx = ref_max_pool2d(x, k, s, p, d, ceil)
    got, gidx = F.max_pool2d(t64(x, False), k, s, p, d, ceil, return_indices=True)
    np.testing.assert_array_equal(got.numpy(), vals)
    assert gidx.dtype == np.int64
    np.testing.assert_array_equal(gidx, idx)
    check_grads(lambda t: F.max_pool2d(t, k, s, p, d, ceil), x)


def test_max_pool2d_output_sizes_as_pytorch():
    # PyTorch: nn.MaxPool2d(...)(torch.zeros(1, 1, H, H)).shape[-1] for these arguments
    for h, k, s, p, d, ceil, size in [(5, 2, 2, 0, 1, True, 3), (5, 2, 2, 0, 1, False, 2),
                                      (5, 2, 2, 1, 1, True, 3), (6, 3, 2, 1, 1, True, 4),
                                      (6, 3, 2, 1, 1, False, 3), (7, 3, 2, 1, 2, True, 3),
                                      (7, 3, 2, 0, 2, True, 2)]:
        got = F.max_pool2d(t64(np.zeros((1, 1, h, h)), False), k, s, p, d, ceil)
        assert got.shape == (1, 1, size, size), (h, k, s, p, d, ceil)
        assert size == ref_pool_len(h, k, s, p, d, ceil)


def test_max_pool2d_nan_and_all_minus_inf_windows_as_pytorch():
    # PyTorch's kernels: `if (val > maxval || isnan(val))` from maxval = -inf: a NaN wins
    # (the last NaN of the window), and a window of -inf keeps its first in-input tap
    x = t64([[[[np.nan, 1.0, 1.0, 5.0], [np.nan, 2.0, 3.0, np.nan]]]])
    v, i = F.max_pool2d(x, 2, return_indices=True)
    assert np.isnan(v.numpy()).all() and i.tolist() == [[[[4, 7]]]]
    v.backward(np.array([[[[2.0, 3.0]]]]))
    assert x.grad.tolist() == [[[[0.0, 0.0, 0.0, 0.0], [2.0, 0.0, 0.0, 3.0]]]]
    v, i = F.max_pool2d(t64(np.full((1, 1, 3, 3), -np.inf)), 2, 2, 1, return_indices=True)
    assert v.tolist() == [[[[-np.inf] * 2] * 2]] and i.tolist() == [[[[0, 1], [3, 4]]]]
    # a dilated window with taps at -1 and 2 only steps over a 2-wide input: -inf, PyTorch's
    # start index (ih0 += dilation while ih0 < 0: 2 * W + 2), and no gradient
    x = t64(np.ones((1, 1, 2, 2)))
    v, i = F.max_pool2d(x, 2, padding=1, dilation=3, return_indices=True)
    assert v.tolist() == [[[[-np.inf]]]] and i.tolist() == [[[[6]]]]
    v.sum().backward()
    assert x.grad.tolist() == [[[[0.0, 0.0], [0.0, 0.0]]]]


def test_max_pool2d_overlapping_gradients_add_in_float64_and_round_once():
    x = distinct(1, 2, 6, 6)
    scales = 2.0 ** RNG.integers(-6, 6, size=(1, 2, 6, 6))  # sums need more than 11 bits
    g = fpsim.round(RNG.uniform(-1, 1, size=(1, 2, 6, 6)) * scales, FP16)
    _, idx = ref_max_pool2d(x, 3, 1, 1)
    ref = ref_max_pool_grad(x.shape, idx, g)
    assert not np.array_equal(fpsim.round(ref, FP16), ref)  # the rounding is exercised
    t = Tensor(x, FP16, requires_grad=True)
    F.max_pool2d(t, 3, 1, 1).backward(g)
    np.testing.assert_array_equal(t.grad.astype(np.float64), fpsim.round(ref, FP16))


def test_max_pool2d_unbatched_and_fp16_values_exact():
    x = fpsim.round(rnd(2, 5, 5), FP16)
    v, i = F.max_pool2d(Tensor(x, FP16), 3, 2, 1, ceil_mode=True, return_indices=True)
    rv, ri = ref_max_pool2d(x[None], 3, 2, 1, 1, True)
    assert v.shape == (2, 3, 3) and i.shape == (2, 3, 3) and v.fmt == FP16
    np.testing.assert_array_equal(v.numpy(np.float64), rv[0])
    np.testing.assert_array_equal(i, ri[0])
    assert F.max_pool2d(Tensor(x, FP16), 2).shape == (2, 2, 2)


def test_max_pool2d_bad_arguments_name_the_problem():
    x = t64(np.zeros((1, 1, 4, 4)))
    with pytest.raises(ValueError, match=r"padding \(2, 2\) should be at most half of the "
                                         r"kernel size \(3, 3\)"):
        F.max_pool2d(x, 3, padding=2)
    with pytest.raises(ValueError, match="stride must be positive"):
        F.max_pool2d(x, 2, stride=0)
    with pytest.raises(ValueError, match="kernel_size must be positive"):
        F.max_pool2d(x, (0, 2))
    with pytest.raises(ValueError, match="dilation must be positive"):
        F.max_pool2d(x, 2, dilation=0)
    with pytest.raises(ValueError, match=r"kernel_size must be an int or a pair of ints, got "
                                         r"\(2, 2, 2\)"):
        F.max_pool2d(x, (2, 2, 2))
    with pytest.raises(ValueError, match=r"output size \(0, 0\), too small"):
        F.max_pool2d(x, 3, dilation=2)
    with pytest.raises(ValueError, match=r"expected input \(N, C, H, W\) or \(C, H, W\), got "
                                         r"shape \(4, 4\)"):
        F.max_pool2d(t64(np.zeros((4, 4))), 2)


# -------------------------------------------------------------------------- avg_pool2d
AVG_CASES = [  # (kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
    (2, None, 0, False, True, None),
    (3, 2, 1, False, True, None),
    (3, 2, 1, False, False, None),
    (3, 2, 1, True, True, None),      # ceil_mode: the overhang past the padding not counted
    (3, 2, 1, True, False, None),
    (2, 2, 0, True, True, None),
    ((2, 3), (1, 2), (1, 1), True, True, None),
    (2, 1, 1, False, True, 3),
    (3, 2, 1, True, False, 5),
]


@pytest.mark.parametrize("k,s,p,ceil,cip,div", AVG_CASES)
def test_avg_pool2d_values_and_gradients(k, s, p, ceil, cip, div):
    x = rnd(2, 2, 7, 6)
    got = F.avg_pool2d(t64(x, False), k, s, p, ceil, cip, div).numpy()
    np.testing.assert_allclose(got, ref_avg_pool2d(x, k, s, p, ceil, cip, div), rtol=1e-14,
                               atol=1e-15)
    check_grads(lambda t: F.avg_pool2d(t, k, s, p, ceil, cip, div), x)


def test_avg_pool2d_divisors_as_pytorch():
    x = t64(np.arange(9.0).reshape(1, 1, 3, 3), False)
    # PyTorch: F.avg_pool2d(x, 2, padding=1) counts the padding, count_include_pad=False not
    assert F.avg_pool2d(x, 2, padding=1).tolist() == [[[[0.0, 0.75], [2.25, 6.0]]]]
    assert F.avg_pool2d(x, 2, padding=1, count_include_pad=False).tolist() == \
        [[[[0.0, 1.5], [4.5, 6.0]]]]
    assert F.avg_pool2d(x, 2, padding=1, divisor_override=2).tolist() == \
        [[[[0.0, 1.5], [4.5, 12.0]]]]
    # PyTorch: ceil_mode windows overhanging the input (no padding) average what they cover
    assert np.all(F.avg_pool2d(t64(np.ones((1, 1, 5, 5)), False), 2, ceil_mode=True).numpy()
                  == 1.0)
    # PyTorch: F.avg_pool2d(torch.ones(1, 1, 4, 4), 3, 2, 1, ceil_mode=True): per axis the
    # windows hold 2 / 3, 3 / 3 and 1 / 2 input rows out of rows inside input + padding
    got = F.avg_pool2d(t64(np.ones((1, 1, 4, 4)), False), 3, 2, 1, ceil_mode=True).numpy()
    f = np.array([2 / 3, 1.0, 1 / 2])
    np.testing.assert_allclose(got[0, 0], np.outer(f, f), rtol=1e-15)


@pytest.mark.parametrize("k,s,p,ceil,cip,div", [(3, 1, 1, False, True, None),
                                                (3, 2, 1, True, False, None),
                                                (2, 1, 0, False, True, 7)])
def test_avg_pool2d_fp16_rounds_once(k, s, p, ceil, cip, div):
    """Forward: the float64 sum (exact here) over the divisor, rounded once; backward: the
    float64 sum of g / divisor, rounded once."""
    x = fpsim.round(RNG.uniform(-4, 4, size=(2, 2, 6, 6)), FP16)
    shape = ref_avg_pool2d(x, k, s, p, ceil, cip, div).shape
    g = fpsim.round(RNG.uniform(-4, 4, size=shape), FP16)
    out, gx = ref_avg_pool2d(x, k, s, p, ceil, cip, div, g=g)
    t = Tensor(x, FP16, requires_grad=True)
    y = F.avg_pool2d(t, k, s, p, ceil, cip, div)
    y.backward(g)
    assert y.fmt == FP16
    np.testing.assert_array_equal(y.numpy(np.float64), fpsim.round(out, FP16))
    np.testing.assert_array_equal(t.grad.astype(np.float64), fpsim.round(gx, FP16))


def test_avg_pool2d_unbatched_and_bad_arguments():
    x = rnd(2, 5, 5)
    got = F.avg_pool2d(t64(x, False), 3, 2, 1, count_include_pad=False)
    np.testing.assert_allclose(got.numpy(), ref_avg_pool2d(x[None], 3, 2, 1, False, False)[0],
                               rtol=1e-14)
    with pytest.raises(ValueError, match="divisor_override must be non-zero"):
        F.avg_pool2d(t64(x), 2, divisor_override=0)
    with pytest.raises(ValueError, match="divisor_override must be an int or None"):
        F.avg_pool2d(t64(x), 2, divisor_override=2.5)
    with pytest.raises(ValueError, match=r"padding \(2, 2\) should be at most half"):
        F.avg_pool2d(t64(x), 3, padding=2)


# -------------------------------------------------------------------------------- layers
def test_conv2d_layer_arguments_and_grouped_init():
    conv = nn.Conv2d(4, 8, 3, stride=1, padding="same", dilation=2, groups=4, rng=3)
    assert conv.weight.shape == (8, 1, 3, 3) and conv.bias.shape == (8,)
    # PyTorch's init: kaiming_uniform(a=sqrt(5)) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for
    # weight and bias, fan_in = in_channels / groups * kh * kw, the weight drawn first
    bound = 1 / math.sqrt(1 * 3 * 3)
    gen = np.random.default_rng(3)
    np.testing.assert_array_equal(conv.weight.numpy(np.float64),
                                  fpsim.round(gen.uniform(-bound, bound, (8, 1, 3, 3)), FP32))
    np.testing.assert_array_equal(conv.bias.numpy(np.float64),
                                  fpsim.round(gen.uniform(-bound, bound, 8), FP32))
    x = rnd(2, 4, 6, 6)
    ref = ref_conv2d(x, conv.weight.numpy(np.float64), conv.bias.numpy(np.float64), 1, "same",
                     2, 4)
    conv64 = conv.to("fp64")
    np.testing.assert_allclose(conv64(t64(x, False)).numpy(), ref, rtol=1e-13, atol=1e-13)
    assert "dilation=(2, 2)" in repr(conv) and "groups=4" in repr(conv)
    plain = nn.Conv2d(2, 3, (2, 3), 2, 1, bias=False, fmt="fp16", rng=0)  # the old keywords
    assert plain.bias is None and plain.weight.fmt == FP16 and plain.padding == (1, 1)
    assert plain(Tensor(np.zeros((1, 2, 5, 5)), FP16)).shape == (1, 3, 3, 3)


def test_conv2d_layer_checks_as_pytorch():
    with pytest.raises(ValueError, match=r"in_channels \(3\) must be divisible by groups \(2\)"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match=r"out_channels \(3\) must be divisible by groups"):
        nn.Conv2d(4, 3, 3, groups=2)
    with pytest.raises(ValueError, match="groups must be a positive integer"):
        nn.Conv2d(4, 4, 3, groups=0)
    with pytest.raises(ValueError, match="padding='same' is not supported for strided"):
        nn.Conv2d(1, 1, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="invalid padding string 'half'"):
        nn.Conv2d(1, 1, 3, padding="half")


def test_pool_layers():
    x = distinct(1, 2, 7, 7)
    pool = nn.MaxPool2d(3, 2, 1, dilation=2, return_indices=True, ceil_mode=True)
    v, i = pool(t64(x, False))
    rv, ri = ref_max_pool2d(x, 3, 2, 1, 2, True)
    np.testing.assert_array_equal(v.numpy(), rv)
    np.testing.assert_array_equal(i, ri)
    assert pool.stride == 2 and nn.MaxPool2d(3).stride == 3
    assert "dilation=2" in repr(pool) and "ceil_mode=True" in repr(pool)
    avg = nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False, divisor_override=None)
    np.testing.assert_allclose(avg(t64(x, False)).numpy(),
                               ref_avg_pool2d(x, 3, 2, 1, True, False), rtol=1e-14)
    assert nn.AvgPool2d(2, divisor_override=1)(t64(x, False)).shape == (1, 2, 3, 3)
    assert "AvgPool2d" in nn.__all__


def test_conv2d_sgemm_model_float32_accumulation():
    """Under the sgemm model the grouped, dilated conv runs on float32 operands: with grid
    values every float32 partial sum is exact, so it equals the exact model bit for bit; the
    bias gradient is still a float64 sum."""
    x = grid16(2, 4, 7, 7)
    w = grid16(6, 2, 3, 3)
    b = grid16(6)
    outs, grads = [], []
    for model in ("exact", "sgemm"):
        xt = Tensor(x, FP16, requires_grad=True)
        wt = Tensor(w, FP16, requires_grad=True)
        bt = Tensor(b, FP16, requires_grad=True)
        with matmul_accumulation(model):
            y = F.conv2d(xt, wt, bt, padding=1, dilation=2, groups=2)
            y.backward(np.ones(y.shape))
        outs.append(y.numpy(np.float64))
        grads.append((xt.grad, wt.grad, bt.grad))
    assert np.array_equal(outs[0], outs[1])
    for g0, g1 in zip(grads[0], grads[1], strict=True):
        assert g0.dtype == g1.dtype == np.float16 and np.array_equal(g0, g1)
    with matmul_accumulation("sgemm"), pytest.raises(ValueError, match="inside fp32"):
        F.conv2d(Tensor(x, FP64), Tensor(w, FP64), groups=2)
