"""Convolution and pooling with the signatures and defaults of ``torch.nn.functional``:
``conv2d`` (im2col and one matmul per group under the accumulation model), ``max_pool2d``
(exact) and ``avg_pool2d`` (float64 window sum over the divisor, rounded once); exported by
:mod:`fpsim.autograd.functional`."""

from __future__ import annotations

import numpy as np

from ..checks import as_int
from . import accumulate as _acc
from .context import autocast_args, check_same_format, promote_formats, round_to, widen
from .operands import (
    IntPair,
    accumulation_model,
    as_tensor,
    check_padding_string,
    ints,
    operand_dtype,
)
from .tensor import Tensor, make_result

__all__ = ["conv2d", "max_pool2d", "avg_pool2d"]

def _conv_padding(padding: IntPair | str, kernel: tuple[int, int], dilation: tuple[int, int],
                  stride: IntPair) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) zero padding of conv2d."""
    check_padding_string(padding, stride)
    if padding == "valid":
        return 0, 0, 0, 0
    if padding == "same":
        # PyTorch: total d (k - 1); an odd total puts the extra element at the end
        th, tw = (d * (k - 1) for d, k in zip(dilation, kernel, strict=True))
        return th // 2, th - th // 2, tw // 2, tw - tw // 2
    ph, pw = ints(padding, "padding", "conv2d", 0)
    return ph, ph, pw, pw


def _pad(x: np.ndarray, top: int, bottom: int, left: int, right: int,
         fill: float = 0.0) -> np.ndarray:
    if top or bottom or left or right:
        # what np.pad(..., constant_values=fill) returns, without its argument handling
        n, c, h, w = x.shape
        shape = (n, c, top + h + bottom, left + w + right)
        out = np.zeros(shape, x.dtype) if fill == 0 else np.full(shape, fill, x.dtype)
        out[:, :, top:top + h, left:left + w] = x
        return out
    return x


def window_view(xp: np.ndarray, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int,
                oh: int, ow: int) -> np.ndarray:
    """(N, C, oh, ow, kh, kw) read-only view of the padded input's windows: windows (sh, sw)
    apart, taps (dh, dw) apart. An internal kernel (not exported), shared with the training-step
    benchmark's floor.

    >>> window_view(np.arange(16.0).reshape(1, 1, 4, 4), 2, 2, 2, 2, 1, 1, 2, 2)[0, 0, 1, 1]
    array([[10., 11.],
           [14., 15.]])
    """
    # the strided view sliding_window_view(...)[..., ::sh, ::sw, ::dh, ::dw] would give, made
    # directly (read-only, as that one): a quarter of its Python cost per call
    s0, s1, s2, s3 = xp.strides
    shape, strides = xp.shape[:2] + (oh, ow, kh, kw), (s0, s1, sh * s2, sw * s3, dh * s2, dw * s3)
    if xp.flags.c_contiguous:  # a view on its buffer: cheaper than as_strided
        v = np.ndarray(shape, xp.dtype, xp, 0, strides)
        v.flags.writeable = False
        return v
    return np.lib.stride_tricks.as_strided(xp, shape, strides, writeable=False)


def _add_windows(gp: np.ndarray, gwin: np.ndarray, sh: int, sw: int, dh: int, dw: int) -> None:
    """col2im: add the (N, C, oh, ow, kh, kw) window values ``gwin`` into the padded-input
    array ``gp`` (float64, in place); a loop over the kernel taps only."""
    oh, ow, kh, kw = gwin.shape[2:]
    for i in range(kh):
        for j in range(kw):
            gp[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
               j * dw:j * dw + sw * (ow - 1) + 1:sw] += gwin[:, :, :, :, i, j]


# Per-configuration plans (the checked arguments, the sizes and index tables they give), made
# once per (input shape, arguments) and kept: parsing and checking the arguments on every
# call was much of a small layer's time on a small batch. Only plain ints, strings and tuples of
# ints are keys (a bool, a NumPy integer or a list is parsed, and checked, on every call).
_PLANS_MAX = 256


def _plain(*args) -> bool:
    """Whether every argument can be a plan-cache key part: an int, a str or a tuple of ints
    (one call for all of an op's arguments: these checks run on every call)."""
    for v in args:
        t = type(v)
        if t is tuple:
            for e in v:
                if type(e) is not int:
                    return False
        elif t is not int and t is not str:
            return False
    return True


def _remember(cache: dict, key: tuple, plan: tuple) -> None:
    for part in plan:  # a plan is shared by every later call, in any thread: read only
        if isinstance(part, np.ndarray):
            part.flags.writeable = False
    if len(cache) >= _PLANS_MAX:
        cache.clear()
    cache[key] = plan


_CONV_PLANS: dict = {}


def _conv_plan(x: Tensor, w: Tensor, stride, padding, dilation, groups) -> tuple:
    """conv2d's argument checks; the parsed arguments and sizes (sh, sw, dh, dw, groups, pt, pb,
    pl, pr, hp, wp, oh, ow)."""
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"conv2d: expected input (N, C_in, H, W) or (C_in, H, W) and weight "
                         f"(C_out, C_in / groups, kh, kw), got shapes {x.shape} and {w.shape}")
    try:  # what range() takes
        n_groups = as_int("groups", groups, None)
    except TypeError:  # bool, float, str, None, arrays ...
        raise TypeError(f"conv2d: groups must be a positive integer, got "
                        f"{type(groups).__name__} {groups!r}") from None
    if n_groups < 1:
        raise ValueError(f"conv2d: groups must be a positive integer, got {groups!r}")
    groups = n_groups
    sh, sw = ints(stride, "stride", "conv2d", 1)
    dh, dw = ints(dilation, "dilation", "conv2d", 1)
    n, c, h, wd = x.shape
    cout, cg, kh, kw = w.shape
    if cout % groups:
        raise ValueError(f"conv2d: given groups={groups}, expected weight to be divisible by "
                         f"{groups} at dimension 0, but got weight of shape {w.shape}")
    if c != cg * groups:
        raise ValueError(f"conv2d: given groups={groups}, weight of shape {w.shape}, expected "
                         f"input of shape {x.shape} to have {cg * groups} channels, but got {c} "
                         "channels instead")
    if kh < 1 or kw < 1:
        raise ValueError(f"conv2d: weight of shape {w.shape} has an empty kernel")
    pt, pb, pl, pr = _conv_padding(padding, (kh, kw), (dh, dw), stride)
    hp, wp = h + pt + pb, wd + pl + pr
    eh, ew = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    if eh > hp or ew > wp:
        raise ValueError(f"conv2d: the kernel {(kh, kw)} with dilation {(dh, dw)} spans "
                         f"{(eh, ew)}, larger than the padded input {(hp, wp)} (input shape "
                         f"{x.shape})")
    oh, ow = (hp - eh) // sh + 1, (wp - ew) // sw + 1
    return sh, sw, dh, dw, groups, pt, pb, pl, pr, hp, wp, oh, ow


# ------------------------------------------------------------------------- convolution
def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntPair = 1,
           padding: IntPair | str = 0, dilation: IntPair = 1, groups: int = 1, *,
           accumulation=None) -> Tensor:
    """2-D cross-correlation as ``torch.nn.functional.conv2d``: input (N, C_in, H, W) or
    (C_in, H, W), weight (C_out, C_in / groups, kh, kw), ``padding`` an int, a pair, 'valid'
    or 'same' (stride 1; an odd total puts the extra row / column at the bottom / right).

    Each output is one matmul accumulation (im2col, one GEMM per group; the bias joins the
    accumulator) under the accumulation model, rounded once; the input gradient adds the
    column gradients in float64 (col2im) before its one rounding.

    >>> x = Tensor(np.arange(16.0).reshape(1, 1, 4, 4))
    >>> conv2d(x, Tensor(np.ones((1, 1, 2, 2))), dilation=2).tolist()
    [[[[20.0, 24.0], [36.0, 40.0]]]]
    >>> conv2d(Tensor(np.ones((2, 5, 5))), Tensor(np.ones((4, 1, 3, 3))), padding="same",
    ...        groups=2).shape
    (4, 5, 5)
    """
    input, weight, bias = autocast_args("conv2d", input, weight, bias)
    x, w = as_tensor(input), as_tensor(weight)
    if x._data.ndim == 3:  # the array's: Tensor.ndim is a property call
        # Tensor methods reach the ops: this module does not import fpsim.autograd.functional
        return conv2d(x.unsqueeze(0), w, bias, stride, padding, dilation, groups,
                      accumulation=accumulation).squeeze(0)
    key = (x._data.shape, w._data.shape, stride, padding, dilation, groups)
    cached = _plain(stride, padding, dilation, groups)
    plan = _CONV_PLANS.get(key) if cached else None
    if plan is None:
        plan = _conv_plan(x, w, stride, padding, dilation, groups)
        if cached:
            _remember(_CONV_PLANS, key, plan)
    sh, sw, dh, dw, groups, pt, pb, pl, pr, hp, wp, oh, ow = plan
    n, c, h, wd = x._data.shape  # the arrays' shapes: Tensor.shape is a property call
    cout, cg, kh, kw = w_shape = w._data.shape
    fmt = x.fmt
    bt = None if bias is None else as_tensor(bias)
    if w.fmt is not fmt or (bt is not None and bt.fmt is not fmt):  # one format: no check
        check_same_format("conv2d", x, w, bt)
        fmt = promote_formats(fmt, w.fmt) if bt is None else promote_formats(fmt, w.fmt, bt.fmt)
    coutg, m_rows, kg = cout // groups, n * oh * ow, cg * kh * kw
    if bt is None:
        parents, b64 = (x, w), None
    else:
        if bt._data.shape != (cout,):
            raise ValueError(f"conv2d: bias shape {bt.shape} does not match {cout} output "
                             f"channels (weight shape {w.shape})")
        parents, b64 = (x, w, bt), widen(bt._data).reshape(groups, 1, coutg)
    model = accumulation_model(accumulation)
    dt = operand_dtype(model, x.fmt, w.fmt)  # float32 operands for the sgemm model
    win = window_view(_pad(widen(x._data, dt), pt, pb, pl, pr), kh, kw, sh, sw, dh, dw, oh, ow)
    # im2col rows (n, oh, ow), columns (channel, tap) split by group: (groups, M, K / groups)
    cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(m_rows, groups, kg)
    cols = np.ascontiguousarray(cols.transpose(1, 0, 2))
    wmat = widen(w._data, dt).reshape(groups, coutg, kg)
    out = _acc.gemm(cols, wmat.transpose(0, 2, 1), fmt, model, fmt, b64)  # (groups, M, coutg)
    out = out.transpose(1, 0, 2).reshape(n, oh, ow, cout)
    out = np.ascontiguousarray(out.transpose(0, 3, 1, 2))

    def backward(g):
        m = accumulation_model(accumulation)
        g2 = widen(g, operand_dtype(m, fmt)).transpose(0, 2, 3, 1).reshape(m_rows, cout)
        g3 = g2.reshape(m_rows, groups, coutg).transpose(1, 0, 2)  # (groups, M, coutg)
        gx = gw = gb = None
        if x._requires_grad:
            in_fmt = fmt if w.fmt is fmt else promote_formats(fmt, w.fmt)
            gcols = _acc.gemm_acc(g3, wmat, m, in_fmt)
            gcols = gcols.transpose(1, 0, 2).reshape(n, oh, ow, c, kh, kw)
            gxp = np.zeros((n, c, hp, wp))
            _add_windows(gxp, gcols.transpose(0, 3, 1, 2, 4, 5), sh, sw, dh, dw)
            gx = _acc.finish(gxp[:, :, pt:pt + h, pl:pl + wd], x.grad_fmt, m)
        if w._requires_grad:
            in_fmt = fmt if x.fmt is fmt else promote_formats(fmt, x.fmt)
            acc = _acc.gemm_acc(g3.transpose(0, 2, 1), cols, m, in_fmt)
            gw = _acc.finish(acc, w.grad_fmt, m).reshape(w_shape)
        if bt is None:
            return gx, gw
        if bt._requires_grad:
            gb = g2.sum(axis=0, dtype=np.float64)
        return gx, gw, gb

    return make_result(out, fmt, parents, backward, "conv2d")


# ----------------------------------------------------------------------------- pooling
def _pool_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's pooling_output_shape: with ceil_mode the last window may overhang the right
    padding, but must start inside the input or the left padding."""
    out = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _pool_args(op: str, x: Tensor, kernel_size: IntPair, stride: IntPair | None,
               padding: IntPair, dilation: IntPair, ceil_mode: bool,
               ) -> tuple[tuple[int, int], ...]:
    """Checked (kernel, stride, padding, dilation, output size) pairs of a pooling op."""
    if x.ndim != 4:
        raise ValueError(f"{op}: expected input (N, C, H, W) or (C, H, W), got shape {x.shape}")
    kh, kw = ints(kernel_size, "kernel_size", op, 1)
    if stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0):
        sh, sw = kh, kw  # PyTorch: the stride defaults to the kernel size
    else:
        sh, sw = ints(stride, "stride", op, 1)
    ph, pw = ints(padding, "padding", op, 0)
    dh, dw = ints(dilation, "dilation", op, 1)
    if ph > kh // 2 or pw > kw // 2:
        raise ValueError(f"{op}: padding {(ph, pw)} should be at most half of the kernel size "
                         f"{(kh, kw)}")
    h, wd = x.shape[2:]
    oh = _pool_size(h, kh, sh, ph, dh, ceil_mode)
    ow = _pool_size(wd, kw, sw, pw, dw, ceil_mode)
    if oh < 1 or ow < 1:
        raise ValueError(f"{op}: input shape {x.shape} gives output size {(oh, ow)}, too small "
                         f"(kernel {(kh, kw)}, stride {(sh, sw)}, padding {(ph, pw)}, dilation "
                         f"{(dh, dw)})")
    return (kh, kw), (sh, sw), (ph, pw), (dh, dw), (oh, ow)


def _extra(size: int, p: int, out: int, k: int, s: int, d: int) -> int:
    """Padding after the input: p, or more where a ceil_mode window overhangs it, or less
    where no window reaches it."""
    return max((out - 1) * s + (k - 1) * d + 1 - size - p, 0)


# From this many windows on, max_pool2d finds each window's first maximum by comparing the
# taps' strided views (kh * kw passes over the output) rather than by argmax over a copy of the
# windows (that copy, through a 6-D strided iterator, was the pool's largest cost); below
# it the argmax has less Python overhead. Used where no window's maximum is NaN or -inf.
_TAPS_MIN = 2048


def first_max(win: np.ndarray, kh: int, kw: int) -> tuple[np.ndarray, np.ndarray]:
    """np.argmax over the taps of the (N, C, oh, ow, kh, kw) windows ``win``, for windows
    without NaN: a tap wins when it is greater than every tap before it, so the first maximum
    wins, as argmax's. Also returns the windows' maxima, NaN where a window holds a NaN (so
    the caller can tell the argmax is not valid there). An internal kernel (not exported),
    shared with the training-step benchmark's floor.

    >>> arg, best = first_max(np.array([[[[[[1.0, 3.0], [3.0, 2.0]]]]]]), 2, 2)
    >>> int(arg[0, 0, 0, 0]), float(best[0, 0, 0, 0])
    (1, 3.0)
    """
    best = win[..., 0, 0]
    arg = np.zeros(best.shape, dtype=np.intp)
    for t in range(1, kh * kw):
        v = win[..., t // kw, t % kw]
        up = v > best
        np.copyto(arg, t, where=up)
        best = np.maximum(best, v)  # +0 / -0 ties: either, equal in every later compare
    return arg, best


_MAXPOOL_PLANS: dict = {}


def _max_pool_plan(x: Tensor, kernel_size, stride, padding, dilation, ceil_mode) -> tuple:
    """max_pool2d's argument checks; the parsed arguments, sizes and index tables (kh, kw, sh,
    sw, ph, pw, dh, dw, oh, ow, bottom and right padding, window origins top and left, whether
    every window has a tap inside the input, the taps' offsets in an (H, W) plane, each
    window's origin in the flattened input)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), (oh, ow) = _pool_args(
        "max_pool2d", x, kernel_size, stride, padding, dilation, ceil_mode)
    n, c, h, wd = x.shape
    top = np.arange(oh)[:, None] * sh - ph  # window origins in input coordinates
    left = np.arange(ow)[None, :] * sw - pw
    # without padding every window's first tap is inside (the output size guarantees it)
    all_hit = ph == 0 and pw == 0
    if not all_hit:
        hit_r = ((top + np.arange(kh) * dh >= 0) & (top + np.arange(kh) * dh < h)).any(axis=1)
        hit_c = ((left.T + np.arange(kw) * dw >= 0) & (left.T + np.arange(kw) * dw < wd)
                 ).any(axis=1)
        all_hit = bool(hit_r.all() and hit_c.all())
    taps = np.arange(kh * kw)
    table = taps // kw * dh * wd + taps % kw * dw
    base = np.arange(n * c).reshape(n, c, 1, 1) * (h * wd) + (top * wd + left)
    return (kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, _extra(h, ph, oh, kh, sh, dh),
            _extra(wd, pw, ow, kw, sw, dw), top, left, all_hit, table, base)


def max_pool2d(input: Tensor, kernel_size: IntPair, stride: IntPair | None = None,
               padding: IntPair = 0, dilation: IntPair = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor | tuple[Tensor, np.ndarray]:
    """2-D max pooling as ``torch.nn.functional.max_pool2d`` (exact): input (N, C, H, W) or
    (C, H, W); ``stride`` defaults to the kernel size; padding is -inf. A NaN in a window is
    its maximum (the last NaN, as PyTorch's kernels); else the first maximum wins, and gets
    the gradient (overlapping windows add in float64, rounded once).

    With ``return_indices``, returns ``(values, indices)``: int64 flat positions ``h * W + w``
    of the maxima in their (H, W) input plane.

    >>> max_pool2d(Tensor(np.arange(16.0).reshape(1, 1, 4, 4)), 2).tolist()
    [[[[5.0, 7.0], [13.0, 15.0]]]]
    >>> v, i = max_pool2d(Tensor(8 - np.arange(9.0).reshape(1, 3, 3)), 2, ceil_mode=True,
    ...                   return_indices=True)
    >>> v.tolist(), i.tolist()
    ([[[8.0, 6.0], [2.0, 0.0]]], [[[0, 2], [6, 8]]])
    """
    x = as_tensor(input)
    if x._data.ndim == 3:
        r = max_pool2d(x.unsqueeze(0), kernel_size, stride, padding, dilation, ceil_mode,
                       return_indices)
        return (r[0].squeeze(0), r[1][0]) if return_indices else r.squeeze(0)
    key = (x._data.shape, kernel_size, stride, padding, dilation, ceil_mode)
    cached = type(ceil_mode) is bool and _plain(kernel_size, 0 if stride is None else stride,
                                                 padding, dilation)
    plan = _MAXPOOL_PLANS.get(key) if cached else None
    if plan is None:
        plan = _max_pool_plan(x, kernel_size, stride, padding, dilation, ceil_mode)
        if cached:
            _remember(_MAXPOOL_PLANS, key, plan)
    kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, bottom, right, top, left, all_hit, table, base = plan
    n, c, h, wd = x_shape = x._data.shape
    x64 = widen(x._data)
    xp = _pad(x64, ph, bottom, pw, right, fill=-np.inf)
    win6 = window_view(xp, kh, kw, sh, sw, dh, dw, oh, ow)
    keep = None  # the windows with a tap inside the input, where some have none
    # a window with a tap inside the input whose maximum is neither NaN nor -inf has its
    # maximum inside: skip the checks below unless some window's maximum is NaN / -inf or a
    # dilated window steps over the whole input
    arg = None
    if all_hit and kh * kw > 1 and n * c * oh * ow >= _TAPS_MIN:
        # the maxima tell it (np.maximum keeps a NaN): one pass over the output, not the input
        arg, best = first_max(win6, kh, kw)
        checks = not np.minimum.reduce(best, axis=None) > -np.inf  # best.min(), a C call
        if checks:
            arg = None  # a NaN breaks the taps' compare: the argmax below
    else:
        checks = bool(x64.size) and not (x64.min() > -np.inf and all_hit)
    if arg is None:
        win = win6.reshape(n, c, oh, ow, kh * kw)
        arg = np.argmax(win, axis=-1)  # the first maximum (or the first NaN)
    if checks:
        rows, cols = top + arg // kw * dh, left + arg % kw * dw
        best = np.take_along_axis(win, arg[..., None], axis=-1)[..., 0]
        if np.isnan(best).any():  # PyTorch's `val > max || isnan(val)` keeps the last NaN
            isnan = np.isnan(win)
            last = kh * kw - 1 - np.argmax(isnan[..., ::-1], axis=-1)
            arg = np.where(isnan.any(axis=-1), last, arg)
            rows, cols = top + arg // kw * dh, left + arg % kw * dw
        neg = best == -np.inf
        # nothing above PyTorch's initial -inf: it reports the window's first tap not in the
        # top / left padding (here a -inf of the padding may have won the argmax)
        rows = np.where(neg, np.where(top < 0, top % dh, top), rows)
        cols = np.where(neg, np.where(left < 0, left % dw, left), cols)
        inside = ((rows < h) & (cols < wd)).ravel()  # else -inf, and no gradient
        keep = None if inside.all() else inside
        indices = (rows * wd + cols).astype(np.int64, copy=False)
        flat = (np.arange(n * c).reshape(n, c, 1, 1) * (h * wd) + indices).ravel()
    else:  # every winner is inside: its window's origin plus its tap's offset, from a table of
        # the kh * kw offsets (integer division over every window costs more than the argmax)
        flat = table.take(arg)
        flat += base  # the window's origin in the flattened input
        flat = flat.ravel()
        if return_indices:
            indices = table.take(arg)
            indices += top * wd + left
    if keep is None:
        out = x._data.reshape(-1)[flat].reshape(n, c, oh, ow)
    else:
        out = np.where(keep, x._data.reshape(-1)[np.where(keep, flat, 0)],
                       round_to(np.array(-np.inf), x.fmt)).reshape(n, c, oh, ow)
    overlap = sh < (kh - 1) * dh + 1 or sw < (kw - 1) * dw + 1

    def backward(g):
        gv = g.ravel()
        pos = flat
        if keep is not None:
            gv, pos = gv[keep], pos[keep]
        if overlap:  # a position may win several windows: add in float64, round once
            gx = np.bincount(pos, weights=widen(gv), minlength=n * c * h * wd)
        else:  # every position receives at most one gradient: an exact scatter
            gx = np.zeros(n * c * h * wd, dtype=g.dtype)
            gx[pos] = gv
        return (gx.reshape(x_shape),)

    result = make_result(out, x.fmt, (x,), backward, "max_pool2d")
    return (result, indices) if return_indices else result


def avg_pool2d(input: Tensor, kernel_size: IntPair, stride: IntPair | None = None,
               padding: IntPair = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """2-D average pooling as ``torch.nn.functional.avg_pool2d``: the float64 sum of each
    window over its divisor, rounded once to the input's format. The divisor (PyTorch's rule)
    is ``divisor_override`` if given, else the number of window positions inside the input
    and its zero padding (``count_include_pad``, positions past the padding in a ceil_mode
    window not counted), or inside the input only. Backward: ``g / divisor`` added in float64
    to each input position of the window, rounded once.

    >>> x = Tensor(np.arange(9.0).reshape(1, 1, 3, 3))
    >>> avg_pool2d(x, 2, stride=1).tolist()
    [[[[2.0, 3.0], [5.0, 6.0]]]]
    >>> avg_pool2d(x, 2, padding=1, count_include_pad=False).tolist()
    [[[[0.0, 1.5], [4.5, 6.0]]]]
    """
    x = as_tensor(input)
    if x.ndim == 3:
        return avg_pool2d(x.unsqueeze(0), kernel_size, stride, padding, ceil_mode,
                          count_include_pad, divisor_override).squeeze(0)
    (kh, kw), (sh, sw), (ph, pw), _, (oh, ow) = _pool_args(
        "avg_pool2d", x, kernel_size, stride, padding, 1, ceil_mode)
    n, c, h, wd = x.shape
    if divisor_override is not None:
        if isinstance(divisor_override, bool) or not isinstance(divisor_override,
                                                                (int, np.integer)):
            raise ValueError(f"avg_pool2d: divisor_override must be an int or None, got "
                             f"{divisor_override!r}")
        if divisor_override == 0:
            raise ValueError("avg_pool2d: divisor_override must be non-zero, got 0")
        divisor = np.full((oh, ow), float(divisor_override))
    else:
        def counts(size: int, k: int, s: int, p: int, out: int) -> np.ndarray:
            start = np.arange(out) * s - p
            end = np.minimum(start + k, size + p)  # a ceil_mode overhang does not count
            if count_include_pad:
                return end - start
            return np.minimum(end, size) - np.maximum(start, 0)

        divisor = np.outer(counts(h, kh, sh, ph, oh), counts(wd, kw, sw, pw, ow)).astype(float)
    bottom, right = _extra(h, ph, oh, kh, sh, 1), _extra(wd, pw, ow, kw, sw, 1)
    xp = _pad(widen(x._data), ph, bottom, pw, right)
    with np.errstate(all="ignore"):  # inf + -inf is NaN, silently (as PyTorch)
        sums = window_view(xp, kh, kw, sh, sw, 1, 1, oh, ow).sum(axis=(-2, -1)) / divisor
    out = round_to(sums, x.fmt)

    def backward(g):
        share = widen(g) / divisor
        gp = np.zeros((n, c, ph + h + bottom, pw + wd + right))
        _add_windows(gp, np.broadcast_to(share[..., None, None], share.shape + (kh, kw)),
                     sh, sw, 1, 1)
        return (gp[:, :, ph:ph + h, pw:pw + wd],)  # the padding's share is dropped

    return make_result(out, x.fmt, (x,), backward, "avg_pool2d")
