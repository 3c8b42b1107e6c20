"""Convolution and pooling: ``conv2d`` (im2col and one matmul under the accumulation model)
and ``max_pool2d`` (exact), with the signatures of ``torch.nn.functional``; exported by
:mod:`fpsim.autograd.functional`."""

from __future__ import annotations

import numpy as np

from . import accumulate as _acc
from .context import autocast_args, promote_formats, widen
from .functional import _as_tensor, _model, squeeze, unsqueeze
from .tensor import Tensor, make_result

__all__ = ["conv2d", "max_pool2d"]


def _pair(v, name: str) -> tuple[int, int]:
    if isinstance(v, (int, np.integer)):
        return int(v), int(v)
    t = tuple(int(i) for i in v)
    if len(t) != 2:
        raise ValueError(f"{name} must be an int or a pair, got {v!r}")
    return t


def _windows(x64: np.ndarray, kh: int, kw: int, sh: int, sw: int, ph: int, pw: int,
             fill: float = 0.0) -> np.ndarray:
    """(N, C, OH, OW, kh, kw) view of the (padded) input's sliding windows."""
    if ph or pw:
        x64 = np.pad(x64, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    win = np.lib.stride_tricks.sliding_window_view(x64, (kh, kw), axis=(2, 3))
    return win[:, :, ::sh, ::sw]


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1, *, accumulation=None) -> Tensor:
    """2-D cross-correlation (PyTorch's conv2d) by im2col and one matmul under the accumulation
    model: input (N, C, H, W) or (C, H, W), weight (C_out, C, kh, kw). ``dilation`` and
    ``groups`` must be 1.

    >>> conv2d(Tensor(np.ones((1, 1, 3, 3))), Tensor(np.ones((1, 1, 2, 2)))).shape
    (1, 1, 2, 2)
    """
    input, weight, bias = autocast_args("conv2d", input, weight, bias)
    x, w = _as_tensor(input), _as_tensor(weight)
    if x.ndim == 3:
        return squeeze(conv2d(unsqueeze(x, 0), w, bias, stride, padding, dilation, groups,
                              accumulation=accumulation), 0)
    if _pair(dilation, "dilation") != (1, 1) or groups != 1:
        raise ValueError("conv2d here supports dilation=1 and groups=1 only")
    if x.ndim != 4 or w.ndim != 4 or x.shape[1] != w.shape[1]:
        raise ValueError(f"conv2d: input shape {x.shape} and weight shape {w.shape} do not "
                         "match (need (N, C, H, W) and (C_out, C, kh, kw))")
    sh, sw = _pair(stride, "stride")
    ph, pw = _pair(padding, "padding")
    n, c, h, wd = x.shape
    cout, _, kh, kw = w.shape
    oh, ow = (h + 2 * ph - kh) // sh + 1, (wd + 2 * pw - kw) // sw + 1
    if oh <= 0 or ow <= 0:
        raise ValueError(f"conv2d: kernel {(kh, kw)} is larger than the padded input "
                         f"{(h + 2 * ph, wd + 2 * pw)}")
    parents = [x, w]
    fmt = x.fmt if x.fmt is w.fmt else promote_formats(x.fmt, w.fmt)
    b64 = None
    if bias is not None:
        bt = _as_tensor(bias)
        if bt.shape != (cout,):
            raise ValueError(f"conv2d: bias shape {bt.shape} does not match {cout} output "
                             "channels")
        parents.append(bt)
        fmt = promote_formats(fmt, bt.fmt)
        b64 = widen(bt._data)
    model = _model(accumulation)
    cols = _windows(widen(x._data), kh, kw, sh, sw, ph, pw).transpose(0, 2, 3, 1, 4, 5)
    cols = cols.reshape(n * oh * ow, c * kh * kw)
    wmat = widen(w._data).reshape(cout, -1)
    out = _acc.gemm(cols, wmat.T, fmt, model, fmt, b64)
    out = np.ascontiguousarray(out.reshape(n, oh, ow, cout).transpose(0, 3, 1, 2))

    def backward(g):
        m = _model(accumulation)
        g2 = widen(g).transpose(0, 2, 3, 1).reshape(-1, cout)
        grads = [None] * len(parents)
        if x._requires_grad:
            gcols = _acc.gemm_acc(g2, wmat, m, promote_formats(fmt, w.fmt))
            gcols = gcols.reshape(n, oh, ow, c, kh, kw)
            gxp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
            for i in range(kh):  # col2im: a loop over the kernel taps only
                for j in range(kw):
                    gxp[:, :, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw] += \
                        gcols[:, :, :, :, i, j].transpose(0, 3, 1, 2)
            grads[0] = _acc.finish(gxp[:, :, ph:ph + h, pw:pw + wd], x.grad_fmt, m)
        if w._requires_grad:
            acc = _acc.gemm_acc(g2.T, cols, m, promote_formats(fmt, x.fmt))
            grads[1] = _acc.finish(acc, w.grad_fmt, m).reshape(w.shape)
        if bias is not None and parents[2]._requires_grad:
            grads[2] = g2.sum(axis=0)
        return tuple(grads)

    return make_result(out, fmt, parents, backward, "conv2d")


def max_pool2d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False) -> Tensor:
    """2-D max pooling (exact): input (N, C, H, W) or (C, H, W); ``stride`` defaults to the
    kernel size; padding is -inf. The gradient goes to the first maximum of each window.
    ``dilation=1``, ``ceil_mode=False``, ``return_indices=False`` only.

    >>> max_pool2d(Tensor(np.arange(16.0).reshape(1, 1, 4, 4)), 2).tolist()
    [[[[5.0, 7.0], [13.0, 15.0]]]]
    """
    x = _as_tensor(input)
    if x.ndim == 3:
        return squeeze(max_pool2d(unsqueeze(x, 0), kernel_size, stride, padding, dilation,
                                  ceil_mode, return_indices), 0)
    if _pair(dilation, "dilation") != (1, 1) or ceil_mode or return_indices:
        raise ValueError("max_pool2d here supports dilation=1, ceil_mode=False and "
                         "return_indices=False only")
    if x.ndim != 4:
        raise ValueError(f"max_pool2d: expected input (N, C, H, W), got shape {x.shape}")
    kh, kw = _pair(kernel_size, "kernel_size")
    sh, sw = _pair(kernel_size if stride is None else stride, "stride")
    ph, pw = _pair(padding, "padding")
    if ph > kh // 2 or pw > kw // 2:
        raise ValueError(f"max_pool2d: padding {(ph, pw)} should be at most half of the kernel "
                         f"size {(kh, kw)}")
    n, c, h, wd = x.shape
    hp, wp = h + 2 * ph, wd + 2 * pw
    win = _windows(widen(x._data), kh, kw, sh, sw, ph, pw, fill=-np.inf)
    oh, ow = win.shape[2], win.shape[3]
    arg = np.argmax(win.reshape(n, c, oh, ow, kh * kw), axis=-1)
    rows = np.arange(oh)[:, None] * sh + arg // kw
    colsi = np.arange(ow)[None, :] * sw + arg % kw
    flat = (np.arange(n * c).reshape(n, c, 1, 1) * hp + rows) * wp + colsi  # padded positions
    xp = x._data if not (ph or pw) else np.pad(
        x._data, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    out = xp.reshape(-1)[flat]

    overlap = sh < kh or sw < kw

    def backward(g):
        if overlap:  # a position may win several windows: add in float64, round once
            gp = np.bincount(flat.ravel(), weights=widen(g).ravel(), minlength=n * c * hp * wp)
        else:  # every position receives at most one gradient: an exact scatter
            gp = np.zeros(n * c * hp * wp, dtype=g.dtype)
            gp[flat.ravel()] = g.ravel()
        return (gp.reshape(n, c, hp, wp)[:, :, ph:ph + h, pw:pw + wd],)

    return make_result(out, x.fmt, (x,), backward, "max_pool2d")
