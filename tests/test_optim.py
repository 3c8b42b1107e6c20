"""fpsim.optim against PyTorch's update formulas written out here by hand (float64 on small
cases), parameter groups, state dicts, and fp32 master weights for fp16 parameters."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import fpsim
from fpsim import optim
from fpsim.nn import Parameter

FP16, FP32 = fpsim.FP16, fpsim.FP32

W0 = np.array([0.5, -1.25, 2.0, 0.03125])
GRADS = [np.array([0.1, -0.2, 0.3, 0.05]), np.array([-0.4, 0.25, 0.5, 0.0]),
         np.array([0.2, 0.1, -0.6, 0.125])]


def run(opt_cls, grads=GRADS, w0=W0, **kw):
    p = Parameter(w0.copy())
    opt = opt_cls([p], **kw)
    out = []
    for g in grads:
        p.grad = g
        opt.step()
        out.append(p.numpy(np.float64).copy())
    return out


def sgd_reference(lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                  maximize=False):
    """torch.optim.SGD's documented algorithm, in float64."""
    w, buf, out = W0.copy(), None, []
    for g in GRADS:
        g = -g if maximize else g.copy()
        if weight_decay:
            g = g + weight_decay * w
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        w = w - lr * g
        out.append(w.copy())
    return out


def adam_reference(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
                   decoupled=False):
    """torch.optim.Adam / AdamW's documented algorithm, in float64."""
    b1, b2 = betas
    w, m, v, vmax, out = W0.copy(), np.zeros(4), np.zeros(4), np.zeros(4), []
    for t, g in enumerate(GRADS, start=1):
        if weight_decay and decoupled:
            w = w * (1 - lr * weight_decay)
        elif weight_decay:
            g = g + weight_decay * w
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        mhat = m / (1 - b1 ** t)
        if amsgrad:
            vmax = np.maximum(vmax, v)
            vhat = vmax / (1 - b2 ** t)
        else:
            vhat = v / (1 - b2 ** t)
        w = w - lr * mhat / (np.sqrt(vhat) + eps)
        out.append(w.copy())
    return out


def assert_close(got, ref):
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_allclose(g, r, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("kw", [dict(lr=0.1), dict(lr=0.1, momentum=0.9),
                                dict(lr=0.05, momentum=0.9, dampening=0.3),
                                dict(lr=0.1, momentum=0.8, nesterov=True),
                                dict(lr=0.1, momentum=0.9, weight_decay=0.01),
                                dict(lr=0.1, weight_decay=0.1, maximize=True)], ids=str)
def test_sgd_matches_pytorch_formulas(kw):
    assert_close(run(optim.SGD, **kw), sgd_reference(**kw))


@pytest.mark.parametrize("kw", [dict(), dict(lr=0.01, weight_decay=0.1),
                                dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6),
                                dict(lr=0.01, amsgrad=True)], ids=str)
def test_adam_matches_pytorch_formulas(kw):
    assert_close(run(optim.Adam, **kw), adam_reference(**kw))


@pytest.mark.parametrize("kw", [dict(), dict(lr=0.01, weight_decay=0.1),
                                dict(lr=0.01, amsgrad=True)], ids=str)
def test_adamw_matches_pytorch_formulas(kw):
    ref = adam_reference(decoupled=True, **{"weight_decay": 1e-2, **kw})
    assert_close(run(optim.AdamW, **kw), ref)


def test_defaults_are_pytorchs():
    p = Parameter([1.0])
    g = optim.Adam([p]).param_groups[0]
    assert (g["lr"], g["betas"], g["eps"], g["weight_decay"], g["amsgrad"]) == (
        1e-3, (0.9, 0.999), 1e-8, 0.0, False)
    assert optim.AdamW([p]).param_groups[0]["weight_decay"] == 1e-2
    s = optim.SGD([p]).param_groups[0]
    assert (s["lr"], s["momentum"], s["dampening"], s["nesterov"]) == (1e-3, 0.0, 0.0, False)


def test_first_adam_step_moves_by_lr():
    (w,) = run(optim.Adam, grads=[GRADS[0]], lr=0.01)
    np.testing.assert_allclose(w, W0 - 0.01 * np.sign(GRADS[0]), rtol=1e-5)


def test_param_groups_and_zero_grad():
    a, b = Parameter([1.0]), Parameter([1.0])
    opt = optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
    a.grad = b.grad = [1.0]
    opt.step()
    assert a.item() == pytest.approx(0.9) and b.item() == 0.5
    opt.param_groups[0]["lr"] = 0.2  # edited in place, as a scheduler or GradScaler does
    opt.step()
    assert a.item() == pytest.approx(0.7)
    opt.zero_grad(set_to_none=False)
    assert a.grad.tolist() == [0.0]
    opt.zero_grad()
    assert a.grad is None and b.grad is None
    with pytest.raises(ValueError, match="more than one parameter group"):
        optim.SGD([{"params": [a]}, {"params": [a]}])
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([])


def test_bad_hyper_parameters():
    p = [Parameter([1.0])]
    with pytest.raises(ValueError, match="learning rate"):
        optim.SGD(p, lr=-1)
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD(p, lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="beta"):
        optim.Adam(p, betas=(1.0, 0.9))
    with pytest.raises(ValueError, match="epsilon"):
        optim.Adam(p, eps=-1.0)
    with pytest.raises(ValueError, match="unknown format"):
        optim.Adam(p, state_fmt="fp7")


def test_state_dict_resumes_identically():
    def make():
        p = Parameter(W0.copy())
        return p, optim.Adam([p], lr=0.01)

    p1, o1 = make()
    for g in GRADS:
        p1.grad = g
        o1.step()
    p2, o2 = make()
    p2.grad = GRADS[0]
    o2.step()
    sd = o2.state_dict()
    assert sd["param_groups"][0]["params"] == [0] and sd["state"][0]["step"] == 1
    p3 = Parameter(p2.data)
    o3 = optim.Adam([p3], lr=0.5)
    o3.load_state_dict(sd)
    assert o3.param_groups[0]["lr"] == 0.01
    for g in GRADS[1:]:
        p3.grad = g
        o3.step()
    np.testing.assert_array_equal(p3.data, p1.data)


def test_master_weights_keep_updates_fp16_loses():
    """A 1e-4 update to an fp16 weight of 1.0 is below half an ulp (2**-11): lost in fp16,
    accumulated in the fp32 master."""
    plain = Parameter([1.0], FP16)
    master = Parameter([1.0], FP16)
    o_plain = optim.SGD([plain], lr=1e-4)
    o_master = optim.SGD([master], lr=1e-4, master_weights=True)
    m32 = np.float32(1.0)
    for _ in range(10):
        plain.grad = master.grad = [1.0]
        o_plain.step()
        o_master.step()
        m32 = m32 - np.float32(1e-4) * np.float32(1.0)  # the fp32 master's own arithmetic
    assert plain.item() == 1.0
    assert o_master.state[master]["master"].dtype == np.float32
    assert o_master.state[master]["master"][0] == m32
    assert master.item() == float(fpsim.round(float(m32), FP16)) and master.item() < 1.0
    assert master.data.dtype == np.float16


def test_optimizer_state_is_fp32_for_fp16_parameters():
    p = Parameter([1.0, 2.0], FP16)
    opt = optim.Adam([p], master_weights=True)
    p.grad = [0.5, 0.25]
    opt.step()
    st = opt.state[p]
    assert st["exp_avg"].dtype == np.float32 and st["exp_avg_sq"].dtype == np.float32
    bf = optim.SGD([Parameter([1.0])], lr=0.1, momentum=0.9, state_fmt="bf16")
    bf.param_groups[0]["params"][0].grad = [1 / 3]
    bf.step()
    buf = next(iter(bf.state.values()))["momentum_buffer"]
    assert buf.dtype.name == "bfloat16" and float(buf[0]) == float(fpsim.round(1 / 3, "bf16"))


def test_fp64_parameters_keep_fp64_state():
    """As PyTorch: the state of an fp64 parameter is fp64 (a float32 momentum buffer would
    round 1/3 at 24 bits), computed in float64: two momentum steps by hand."""
    p = Parameter([1.0], "fp64")
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    for g in (1 / 3, 1 / 7):
        p.grad = [g]
        opt.step()
    buf = 0.9 * (1 / 3) + 1 / 7
    assert opt.state[p]["momentum_buffer"].dtype == np.float64
    assert p.tolist() == [1.0 - 0.1 * (1 / 3) - 0.1 * buf]
    assert opt.state_format(p).name == "fp64"
    adam = optim.Adam([Parameter([1.0], "fp64"), Parameter([1.0], "fp16")])
    for q in adam.param_groups[0]["params"]:
        q.grad = [0.1]
    adam.step()
    dtypes = [adam.state[q]["exp_avg"].dtype for q in adam.param_groups[0]["params"]]
    assert dtypes == [np.float64, np.float32]


def test_no_master_update_is_rounded_once_to_the_parameter_format():
    p = Parameter([1.0, 3.0], FP16)
    opt = optim.SGD([p], lr=1.0)
    g = np.array([2.0 ** -12 * 3, 2.0 ** -9])
    p.grad = g
    opt.step()
    exact = np.float32([1.0, 3.0]) - np.float32(fpsim.round(g, FP16))
    assert p.numpy(np.float64).tolist() == fpsim.round(exact.astype(np.float64), FP16).tolist()
    assert p.numpy(np.float64)[0] == 1 - 2.0 ** -10  # 1 - 1.5 ulp: a tie, to even


class _OutOfPlaceSGD(optim.SGD):
    """SGD's update as written before the in-place momentum (each operation a fresh array):
    the reference the in-place update must equal bit for bit."""

    def _update(self, w, g, state, group, dtype):
        lr, mom, damp = group["lr"], group["momentum"], group["dampening"]
        if group["maximize"]:
            g = -g
        if group["weight_decay"] != 0:
            g = g + group["weight_decay"] * w
        if mom != 0:
            buf = self._state_get(state, "momentum_buffer", dtype)
            fmt = self._step_state_fmt
            if fmt.storage_dtype == dtype:
                buf = np.array(g, copy=True) if buf is None else mom * buf + (1 - damp) * g
                self._state_set(state, "momentum_buffer", buf)
            else:  # a narrower state: each op of the buffer rounds to it (fpsim.round here),
                # and the step goes on from the stored buffer, as PyTorch's fp16 buffer
                def rnd(x):
                    return fpsim.round(np.asarray(x, dtype=np.float64), fmt).astype(dtype)
                buf = rnd(g) if buf is None else rnd(rnd(mom * buf) + (1 - damp) * g)
                self._state_set(state, "momentum_buffer", buf)
            g = g + mom * buf if group["nesterov"] else buf
        return w - lr * g


@pytest.mark.parametrize("kw", [dict(lr=0.1, momentum=0.9),
                                dict(lr=0.05, momentum=0.9, dampening=0.3),
                                dict(lr=0.1, momentum=0.8, nesterov=True),
                                dict(lr=0.1, momentum=0.9, weight_decay=0.01, maximize=True)],
                         ids=str)
@pytest.mark.parametrize("fmt, extra", [("fp16", dict(master_weights=True)),
                                        ("bf16", dict(master_weights=True)),
                                        ("fp16", dict()), ("fp32", dict()), ("fp64", dict()),
                                        ("fp32", dict(state_fmt="bf16")),
                                        ("fp16", dict(master_weights=True, state_fmt="fp16"))],
                         ids=str)
def test_sgd_in_place_momentum_is_the_out_of_place_update_bit_for_bit(kw, fmt, extra):
    rng = np.random.default_rng(7)
    w0 = rng.standard_normal((6, 5))
    grads = [rng.standard_normal((6, 5)) * 10.0 ** rng.integers(-6, 2) for _ in range(5)]
    runs = []
    for cls in (optim.SGD, _OutOfPlaceSGD):
        p = Parameter(w0, fmt)
        opt = cls([p], **kw, **extra)
        out = []
        for g in grads:
            p.grad = g
            opt.step()
            buf = opt.state[p]["momentum_buffer"]
            out.append((p.numpy().copy(), np.array(buf, copy=True)))
        runs.append(out)
    for (pa, ba), (pb, bb) in zip(*runs, strict=True):
        np.testing.assert_array_equal(pa.view(np.uint8), pb.view(np.uint8))
        np.testing.assert_array_equal(ba.view(np.uint8), bb.view(np.uint8))


def test_sgd_momentum_buffer_is_updated_in_place_and_state_dict_is_a_copy():
    p = Parameter(np.ones(3), "fp32")
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = np.ones(3)
    opt.step()
    buf = opt.state[p]["momentum_buffer"]
    saved = opt.state_dict()
    p.grad = np.ones(3)
    opt.step()
    assert opt.state[p]["momentum_buffer"] is buf  # PyTorch's buf.mul_().add_()
    np.testing.assert_array_equal(saved["state"][0]["momentum_buffer"], np.ones(3))


@pytest.mark.parametrize("fmt", ["fp32", "bf16", "fp16"])
def test_zero_d_parameters_step_as_one_element_ones(fmt):
    """A 0-d parameter steps as a (1,)-shaped one, bit for bit, and keeps 0-d arrays as values
    and state (NumPy ops on 0-d arrays give scalars: SGD's in-place subtract refused them)."""
    SGD, Adam, AdamW = optim.SGD, optim.Adam, optim.AdamW
    setups = [(SGD, dict(lr=0.1)), (SGD, dict(lr=0.1, momentum=0.9)),
              (SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1)),
              (SGD, dict(lr=0.1, momentum=0.9, dampening=0.5, maximize=True)),
              (Adam, dict(lr=0.1)), (Adam, dict(lr=0.1, amsgrad=True)),
              (AdamW, dict(lr=0.1, weight_decay=0.1))]
    for (opt_cls, kw), master in itertools.product(setups, (False, True)):
        p0, p1 = Parameter(2.0, fmt), Parameter([2.0], fmt)
        o0 = opt_cls([p0], master_weights=master, **kw)
        o1 = opt_cls([p1], master_weights=master, **kw)
        for g in (1.0, -0.3, 0.7):
            p0.grad, p1.grad = g, [g]
            o0.step()
            o1.step()
        assert type(p0.data) is np.ndarray and p0.data.shape == ()
        assert p0.data.dtype == p1.data.dtype and p0.tolist() == p1.tolist()[0]
        for k, v in o0.state[p0].items():
            if isinstance(v, np.generic | np.ndarray):
                assert type(v) is np.ndarray and v.shape == (), k
                assert v.tolist() == o1.state[p1][k].tolist()[0], k
