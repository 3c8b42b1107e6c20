"""Optimizer.register_update_hook: the public hook fpsim's trainer records weight updates with
(it used to replace the optimizer's private ``_update``)."""

import numpy as np
import pytest

from fpsim.nn import Parameter
from fpsim.optim import SGD, Adam


def _params(seed=0):
    rng = np.random.default_rng(seed)
    ps = [Parameter(rng.standard_normal((3, 4)).astype(np.float32), "fp16"),
          Parameter(rng.standard_normal(4).astype(np.float32), "fp16")]
    for p in ps:
        p.grad = rng.standard_normal(p.shape).astype(np.float32)
    return ps


@pytest.mark.parametrize("make", [lambda ps: SGD(ps, lr=0.1, momentum=0.9, master_weights=True),
                                  lambda ps: Adam(ps, lr=1e-2)])
def test_a_pass_through_hook_changes_nothing_and_sees_every_update(make):
    plain, hooked = _params(), _params()
    a, b = make(plain), make(hooked)
    seen = []

    def hook(update, w, g, state, group, dtype):
        old = w.copy()  # the update may change w in place
        new = update(w, g, state, group, dtype)
        seen.append((old, np.array(new), g.copy()))
        return new

    b.register_update_hook(hook)
    for _ in range(3):
        a.step()
        b.step()
    for p, q in zip(plain, hooked, strict=True):
        assert p.data.tobytes() == q.data.tobytes()
    assert len(seen) == 3 * len(plain)
    assert all(not np.array_equal(old, new) for old, new, _ in seen)


def test_hooks_chain_in_registration_order_and_remove():
    ps = _params()
    opt = SGD(ps, lr=0.5)
    calls = []

    def tag(name):
        def hook(update, *args):
            calls.append(name)
            return update(*args)
        return hook

    h1 = opt.register_update_hook(tag("first"))
    opt.register_update_hook(tag("second"))
    opt.step()
    assert calls[:2] == ["second", "first"]  # the later hook wraps the earlier one
    calls.clear()
    h1.remove()
    h1.remove()  # a second remove does nothing
    opt.step()
    assert calls == ["second", "second"]


def test_a_hook_may_replace_the_update():
    ps = _params()
    before = [p.data.copy() for p in ps]
    opt = SGD(ps, lr=0.5)
    opt.register_update_hook(lambda update, w, *rest: w)  # a frozen step
    opt.step()
    assert all(np.array_equal(p.data, b) for p, b in zip(ps, before, strict=True))


def test_a_hook_must_be_callable():
    with pytest.raises(TypeError, match="hook must be callable"):
        SGD(_params(), lr=0.1).register_update_hook(3)
