"""The losses: ``nll_loss``, ``cross_entropy`` and ``mse_loss``, with PyTorch's names, defaults
and rounding places (exported by :mod:`fpsim.autograd.functional` and :mod:`fpsim.functional`).

Contract, as every op of :mod:`fpsim.autograd.functional` (its table gives the rows): a loss
computes in float64 and rounds once to the input's format (``mse_loss``: the promoted format of
input and target); its backward computes in float64 and the engine rounds each gradient to its
tensor's gradient format. ``cross_entropy`` is the ops PyTorch's kernel runs, each rounded where
PyTorch rounds (``log_softmax`` then ``nll_loss``; label smoothing and probability targets add
``mul``, ``sum``, ``div``, ``add``); plain class targets take one graph node with the same
roundings in the same order. Composed ops are reached through the Tensor methods
(``x.log_softmax(1)``, ``w.reshape(...)``, ``-t.sum()``), which call the ops module: this
module imports only the engine below it, so the ops module can re-export it without a circle.
``reduction`` is one of ``"mean"`` (default), ``"sum"``, ``"none"``.

>>> from fpsim.autograd import Tensor
>>> mse_loss(Tensor([1.0, 3.0]), [0.0, 1.0], reduction="sum").item()
5.0
"""

from __future__ import annotations

import numpy as np

from .. import state as _state
from .context import (
    autocast_args,
    get_autocast_hook,
    plain_rounding,
    promote_formats,
    round_to,
    widen,
)
from .operands import as_tensor
from .tensor import Tensor, make_result

__all__ = ["nll_loss", "cross_entropy", "mse_loss"]

_REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction!r} is not a valid value for reduction; valid: "
                         f"{', '.join(_REDUCTIONS)}")


def nll_loss(input: Tensor, target, weight=None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of integer class targets: input (N, C) or (C,) log-probabilities,
    target (N,) or a scalar; ``weight`` (C,) rescales classes; ``mean`` divides by the summed
    weights of the non-ignored targets (PyTorch's rule).

    >>> nll_loss(Tensor([[-1.0, -2.0]]), [1]).item()
    2.0
    """
    input = autocast_args("nll_loss", input)
    _check_reduction(reduction)
    x = as_tensor(input)
    t = np.asarray(target._data if isinstance(target, Tensor) else target)
    if x.ndim > 2:  # (N, C, d1, ...) with target (N, d1, ...): one row per position
        if t.shape != (x.shape[0],) + x.shape[2:]:
            raise ValueError(f"nll_loss: expected target shape {(x.shape[0],) + x.shape[2:]} "
                             f"for input shape {x.shape}, got target shape {t.shape}")
        out = nll_loss(_class_last(x), t.reshape(-1), weight, ignore_index, reduction)
        return out.reshape(t.shape) if reduction == "none" else out
    if t.dtype.kind not in "iu":
        if t.dtype.kind == "f" and np.array_equal(t, np.round(t)) and t.shape == x.shape[:1]:
            t = t.astype(np.int64)
        else:
            raise TypeError(f"nll_loss / cross_entropy take integer class targets, got dtype "
                            f"{t.dtype} with shape {t.shape}")
    squeeze_out = x.ndim == 1
    x2 = x._data[None, :] if squeeze_out else x._data
    t1 = t.reshape(1) if squeeze_out else t
    if x2.ndim != 2:
        raise ValueError(f"nll_loss: input must be (N, C) or (C,), got shape {x.shape}")
    n, c = x2.shape
    if t1.shape != (n,):
        raise ValueError(f"nll_loss: expected target shape ({n},) for input shape {x.shape}, "
                         f"got target shape {t.shape}")
    if weight is None and not squeeze_out and _unweighted_applies(x2, t1, ignore_index, reduction):
        return _nll_unweighted(x, t1, n, c, reduction)
    valid = t1 != ignore_index
    bad = valid & ((t1 < 0) | (t1 >= c))
    if bad.any():
        raise IndexError(f"Target {int(t1[bad][0])} is out of bounds for {c} classes")
    tc = np.where(valid, t1, 0)
    w = np.ones(c) if weight is None else widen(as_tensor(weight)._data).reshape(c)
    wt = np.where(valid, w[tc], 0.0)
    picked = widen(x2)[np.arange(n), tc]
    with np.errstate(all="ignore"):
        # an ignored target's loss and gradient are +0, as PyTorch's (which skips the row);
        # a weight-0 class's are -0 * picked (-0 for finite picked), also as PyTorch's
        losses = np.where(valid, -wt * picked, 0.0)
        if reduction == "none":
            val = losses[0] if squeeze_out else losses
        elif reduction == "sum":
            val = losses.sum()
        else:
            val = losses.sum() / wt.sum()
    out = round_to(np.asarray(val), x.fmt)

    def backward(g):
        g64 = widen(g)
        if reduction == "none":
            coef = g64.reshape(n)
        elif reduction == "sum":
            coef = np.full(n, float(g64))
        else:
            coef = np.full(n, float(g64) / wt.sum())
        gx = np.zeros((n, c))
        with np.errstate(all="ignore"):  # 0 / 0: a mean over no weight is NaN, as PyTorch
            gx[np.arange(n)[valid], tc[valid]] = (-wt * coef)[valid]
        return (gx.reshape(x.shape),)

    return make_result(out, x.fmt, (x,), backward, "nll_loss")


_UNSIGNED: dict = {}  # integer dtype -> the unsigned dtype of its width


def _unweighted_applies(x2: np.ndarray, t: np.ndarray, ignore_index: int,
                        reduction: str) -> bool:
    """Whether :func:`_nll_unweighted` computes the loss of log-probabilities ``x2`` (N, C)
    and integer targets ``t``: N > 0 targets of shape (N,), a reduced loss, no class ignored
    and 0 <= t < C for all (one reduction: viewed as unsigned, negatives are huge). Class
    weights are the caller's to rule out."""
    if reduction == "none" or x2.ndim != 2 or t.shape != x2.shape[:1] or not t.size:
        return False
    c = x2.shape[1]
    if 0 <= ignore_index < c:
        return False
    unsigned = _UNSIGNED.get(t.dtype)
    if unsigned is None:
        unsigned = _UNSIGNED[t.dtype] = np.dtype(t.dtype.str.replace("i", "u"))
    return t.view(unsigned).max() < c


def _nll_unweighted(x: Tensor, t: np.ndarray, n: int, c: int, reduction: str) -> Tensor:
    """nll_loss of an (N, C) input without class weights whose N targets are all valid classes:
    the general path's operations on unit weights (-1.0 * picked, summed, over N for the
    mean), without its masks and weight arrays: the same values, bit for bit."""
    rows = np.arange(n)
    picked = widen(x._data[rows, t])
    with np.errstate(all="ignore"):
        val = np.multiply(-1.0, picked).sum()
        if reduction == "mean":
            val = val / n
    out = round_to(np.asarray(val), x.fmt)

    return make_result(out, x.fmt, (x,), lambda g: (_nll_grad(g, n, c, rows, t, reduction),),
                       "nll_loss")


def _nll_grad(g: np.ndarray, n: int, c: int, rows: np.ndarray, t: np.ndarray,
              reduction: str) -> np.ndarray:
    """The (N, C) float64 gradient of an unweighted nll_loss (all N targets valid) from the
    loss's gradient ``g``: -g (over N for the mean) at each row's target, 0 elsewhere."""
    coef = float(widen(g))
    if reduction == "mean":
        coef = coef / n
    gx = np.zeros((n, c))
    gx[rows, t] = -1.0 * coef
    return gx


def _nll_grad_rounded(g: np.ndarray, n: int, c: int, rows: np.ndarray, t: np.ndarray,
                      reduction: str, fmt) -> np.ndarray:
    """``widen(round_to(_nll_grad(g, ...), fmt))``: the (N, C) float64 values of nll_loss's
    gradient rounded to ``fmt``. Under plain rounding (elementwise, no random draws) with a
    finite coefficient, the two distinct values of that array, +0 and the coefficient, are
    rounded once each (a finite value's nearest-even rounding is unique, whatever route an
    array's size takes) and placed, without the whole array's rounding and widening; where
    +0 does not round to +0 (a format without it), the whole array."""
    if plain_rounding():
        coef = float(widen(g))
        if reduction == "mean":
            coef = coef / n
        if np.isfinite(coef):
            zero, value = widen(round_to(np.array([0.0, -1.0 * coef]), fmt))
            if zero == 0 and not np.signbit(zero):
                gl = np.zeros((n, c))
                gl[rows, t] = value
                return gl
    return widen(round_to(_nll_grad(g, n, c, rows, t, reduction), fmt))


def _cross_entropy_classes(x: Tensor, t: np.ndarray, reduction: str) -> Tensor:
    """cross_entropy of (N, C) logits and N valid class indices, no weights, no smoothing, as
    one graph node: log_softmax then nll_loss, the same roundings in the same order as the two
    ops (:func:`fpsim.autograd.functional.log_softmax`, :func:`_nll_unweighted`) and, in the
    backward, the rounding the engine gives the gradient between them, without a second node's
    cost. cross_entropy takes
    it only where nothing could tell the difference: no autocast policy (it casts per op) and
    no graph observer (the memory meter sees the two ops). tests/test_cross_entropy_node.py
    proves it equal to the two-op composition, bit for bit."""
    fmt = x.fmt
    n, c = x._data.shape
    x64 = widen(x._data)
    with np.errstate(all="ignore"):
        # the same float64 ops in two buffers: the widened copy (when it is one) and exp's
        z = np.subtract(x64, x64.max(axis=1, keepdims=True, initial=-np.inf),
                        out=None if x64 is x._data else x64)
        e = np.exp(z)
        logp = round_to(np.subtract(z, np.log(e.sum(axis=1, keepdims=True)), out=e), fmt)
        del x64, z, e
        rows = np.arange(n)
        val = np.multiply(-1.0, widen(logp[rows, t])).sum()
        if reduction == "mean":
            val = val / n
    out = round_to(np.asarray(val), fmt)

    def backward(g):
        # nll_loss's gradient as the engine stores it, in log_softmax's output format (an op
        # result has no grad_fmt of its own)
        gl = _nll_grad_rounded(g, n, c, rows, t, reduction, fmt)
        lp = widen(logp)
        r = np.exp(lp, out=None if lp is logp else lp)  # in place in a fresh widening
        r *= gl.sum(axis=1, keepdims=True)
        return (np.subtract(gl, r, out=r),)

    return make_result(out, fmt, (x,), backward, "cross_entropy")


def _class_last(x: Tensor) -> Tensor:
    """(N, C, d1, ...) -> (N * d1 * ..., C): the positions of a K-dimensional loss as rows."""
    perm = (0,) + tuple(range(2, x.ndim)) + (1,)
    return x.permute(perm).reshape((-1, x.shape[1]))


def cross_entropy(input: Tensor, target, weight=None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy of logits ``input`` (N, C), (C,) or (N, C, d1, ...) against integer class
    targets or class probabilities (a float target of the input's shape), composed of the ops
    PyTorch's kernel runs, each with its rounding: ``nll_loss(log_softmax(input, 1), ...)``;
    with ``label_smoothing`` e: ``(1 - e) * nll + e / C * smooth`` where smooth is
    ``-(log_softmax * weight).sum(1)`` reduced as PyTorch (mean: divided by the summed weights
    of the non-ignored targets, or their count without weights); probability targets become
    ``target * (1 - e) + e / C`` and the loss ``-(log_softmax * target * weight).sum()``,
    divided by N * d1 * ... for the mean.

    >>> round(cross_entropy(Tensor([[0.0, 0.0]], "fp64"), [0]).item(), 12)
    0.69314718056
    >>> round(cross_entropy(Tensor([[2.0, 0.0]], "fp64"), [0], label_smoothing=0.2).item(), 6)
    0.326928
    """
    input = autocast_args("cross_entropy", input)
    _check_reduction(reduction)
    if not 0.0 <= float(label_smoothing) <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    x = as_tensor(input)
    nd = x._data.ndim  # the array's: Tensor.ndim / shape are property calls
    if nd == 0:
        raise ValueError("cross_entropy: input must be (C,), (N, C) or (N, C, d1, ...), got a "
                         "scalar")
    cdim = 0 if nd == 1 else 1
    c = x._data.shape[cdim]
    plain_classes = weight is None and label_smoothing == 0 and type(target) is np.ndarray \
        and target.dtype.kind in "iu"  # class indices, nothing else: the loss is the nll
    if plain_classes and not _state.local.observers and get_autocast_hook() is None \
            and _unweighted_applies(x._data, target, ignore_index, reduction):
        return _cross_entropy_classes(x, target, reduction)
    logp = x.log_softmax(cdim)
    if weight is None and label_smoothing == 0 and isinstance(target, np.ndarray) \
            and target.dtype.kind in "iu":  # class indices, nothing else: the loss is the nll
        return nll_loss(logp, target, None, ignore_index, reduction)
    # a weight that is not a Tensor takes the input's format (PyTorch wants the input's dtype)
    w = weight if weight is None or isinstance(weight, Tensor) else Tensor(weight, x.fmt)
    if w is not None and w.shape != (c,):
        raise ValueError(f"cross_entropy: weight shape {w.shape} does not match {c} classes")
    wshape = tuple(c if d == cdim else 1 for d in range(x.ndim))
    t_arr = np.asarray(target._data if isinstance(target, Tensor) else target)
    eps = float(label_smoothing)
    if t_arr.dtype.kind in "fV" and t_arr.shape == x.shape:  # class probabilities
        if ignore_index >= 0:
            raise ValueError("cross_entropy: ignore_index is not supported for class-probability "
                             "targets")
        tt = as_tensor(target) if isinstance(target, Tensor) else Tensor(t_arr, x.fmt)
        if eps > 0:
            tt = tt * (1.0 - eps) + eps / c
        prod = logp * tt
        if w is not None:
            prod = prod * w.reshape(wshape)
        if reduction == "none":
            return -prod.sum(cdim)
        total = -prod.sum()
        return total if reduction == "sum" else total / (x._data.size // c)
    nll = nll_loss(logp, target, weight, ignore_index, reduction)
    if eps == 0:
        return nll
    smooth = -(logp if w is None else logp * w.reshape(wshape)).sum(cdim)
    ignored = t_arr == ignore_index
    if ignored.any():
        smooth = smooth.masked_fill(ignored.reshape(smooth.shape), 0.0)
    if reduction == "none":
        ret = smooth
    elif reduction == "sum":
        ret = smooth.sum()
    elif w is None:
        ret = smooth.sum() / int((~ignored).sum())
    else:
        kept = t_arr[~ignored].astype(np.int64).reshape(-1)
        ret = smooth.sum() / w[kept].sum()
    return (1.0 - eps) * nll + ret * (eps / c)


def mse_loss(input: Tensor, target, reduction: str = "mean") -> Tensor:
    """Mean (or summed, or elementwise) squared error; input and target of the same shape. A
    target that is not a Tensor is converted to the input's format (nearest even).

    >>> mse_loss(Tensor([1.0, 3.0]), [0.0, 1.0]).item()
    2.5
    """
    input, target = autocast_args("mse_loss", input, target)
    _check_reduction(reduction)
    x = as_tensor(input)
    t = target if isinstance(target, Tensor) else Tensor(target, x.fmt)
    if t.shape != x.shape:
        raise ValueError(f"mse_loss: input shape {x.shape} and target shape {t.shape} differ")
    fmt = x.fmt if x.fmt is t.fmt else promote_formats(x.fmt, t.fmt)
    n = x._data.size  # the mean of no elements is NaN (0 / 0), as PyTorch's
    with np.errstate(all="ignore"):  # inf - inf is NaN, silently (as PyTorch)
        d = widen(x._data) - widen(t._data)
        sq = d * d
        val = sq if reduction == "none" else (sq.sum() if reduction == "sum" else sq.sum() / n)
    out = round_to(np.asarray(val), fmt)

    def backward(g):
        g64 = widen(g)
        scale = (2.0 / n if n else np.nan) if reduction == "mean" else 2.0  # (n = 0: no element)
        gx = d * (g64 * scale)
        return gx, -gx

    return make_result(out, fmt, (x, t), backward, "mse_loss")
