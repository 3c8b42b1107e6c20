"""The fp32 training step of ``fpsim lm``'s GPT against a hand-written NumPy float32 step of the
same model (issue 31's target: fpsim within 1.3x).

Both take the same weights and batch and do forward, backward and an AdamW update; the NumPy
step is written out by hand in float32 (embedding, layer norm, attention with the max
subtracted, GELU tanh, tied head, cross-entropy, their gradients, AdamW). Its loss and
gradients are checked against fpsim's before timing. BLAS is pinned to one thread; the
speed printed is NumPy time / fpsim time (1.0 = as fast as the hand-written step).

fpsim's step runs as ``fpsim lm``'s ``fp32`` recipe does: its GEMMs under the recipe's
accumulation model (``"sgemm"``, the hand-written step's own arithmetic). A second line times
the ``fp32-dgemm`` control (the engine's default ``"fp32"`` model: exact products summed in
float64 and rounded once to fp32; dgemm takes about twice sgemm's time).

    python benchmarks/bench_lm_step.py [--repeat N]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import best_time, pinned_blas  # noqa: E402

from fpsim.autograd import functional as F  # noqa: E402
from fpsim.autograd import matmul_accumulation  # noqa: E402
from fpsim.datasets import shakespeare_chars  # noqa: E402
from fpsim.models import GPT  # noqa: E402
from fpsim.optim import AdamW  # noqa: E402
from fpsim.training.lm_recipes import get_lm_recipe  # noqa: E402

D, L, H, T, B = 64, 2, 4, 64, 16
_C = math.sqrt(2.0 / math.pi)


def _ln(x, g, b):
    mu = x.mean(-1, keepdims=True)
    xc = x - mu
    var = (xc * xc).mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(var + np.float32(1e-5))
    xh = xc * rstd
    return xh * g + b, (xh, rstd, g)


def _ln_back(dy, cache):
    xh, rstd, g = cache
    dg = (dy * xh).reshape(-1, xh.shape[-1]).sum(0)
    db = dy.reshape(-1, xh.shape[-1]).sum(0)
    dxh = dy * g
    dx = (dxh - dxh.mean(-1, keepdims=True) - xh * (dxh * xh).mean(-1, keepdims=True)) * rstd
    return dx, dg, db


def numpy_step(p: dict, idx: np.ndarray, y: np.ndarray, opt: dict) -> float:
    """One float32 forward + backward + AdamW step of the GPT on float32 arrays ``p``."""
    f32 = np.float32
    b_, t = idx.shape
    hs = D // H
    x = p["wte.weight"][idx] + p["wpe.weight"][:t]
    mask = np.triu(np.ones((t, t), bool), 1)
    caches = []
    for i in range(L):
        pre = f"h.{i}."
        y1, c1 = _ln(x, p[pre + "ln_1.weight"], p[pre + "ln_1.bias"])
        qkv = y1 @ p[pre + "attn.c_attn.weight"].T + p[pre + "attn.c_attn.bias"]
        q, k, v = qkv.reshape(b_, t, 3, H, hs).transpose(2, 0, 3, 1, 4)
        s = (q @ k.transpose(0, 1, 3, 2)) * f32(1 / math.sqrt(hs))
        s[..., mask] = -np.inf
        e = np.exp(s - s.max(-1, keepdims=True))
        a = e / e.sum(-1, keepdims=True)
        o = (a @ v).transpose(0, 2, 1, 3).reshape(b_, t, D)
        x1 = x + o @ p[pre + "attn.c_proj.weight"].T + p[pre + "attn.c_proj.bias"]
        y2, c2 = _ln(x1, p[pre + "ln_2.weight"], p[pre + "ln_2.bias"])
        h = y2 @ p[pre + "mlp.c_fc.weight"].T + p[pre + "mlp.c_fc.bias"]
        th = np.tanh(f32(_C) * (h + f32(0.044715) * h * h * h))
        gl = f32(0.5) * h * (f32(1) + th)
        x2 = x1 + gl @ p[pre + "mlp.c_proj.weight"].T + p[pre + "mlp.c_proj.bias"]
        caches.append((x, y1, c1, q, k, v, a, o, x1, y2, c2, h, th, gl))
        x = x2
    yf, cf = _ln(x, p["ln_f.weight"], p["ln_f.bias"])
    logits = yf @ p["wte.weight"].T
    z = logits.reshape(-1, logits.shape[-1])
    z = z - z.max(1, keepdims=True)
    ez = np.exp(z)
    se = ez.sum(1, keepdims=True)
    n = z.shape[0]
    yy = y.reshape(-1)
    loss = float(np.mean(np.log(se[:, 0]) - z[np.arange(n), yy]))
    g = {}
    dz = ez / se
    dz[np.arange(n), yy] -= 1
    dz = (dz / f32(n)).reshape(logits.shape)
    g["wte.weight"] = dz.reshape(n, -1).T @ yf.reshape(n, -1)
    dx, g["ln_f.weight"], g["ln_f.bias"] = _ln_back(dz @ p["wte.weight"], cf)
    for i in reversed(range(L)):
        pre = f"h.{i}."
        x0, y1, c1, q, k, v, a, o, x1, y2, c2, h, th, gl = caches[i]
        dm = dx.reshape(-1, D)
        g[pre + "mlp.c_proj.weight"] = dm.T @ gl.reshape(-1, 4 * D)
        g[pre + "mlp.c_proj.bias"] = dm.sum(0)
        dgl = dx @ p[pre + "mlp.c_proj.weight"]
        dh = dgl * (f32(0.5) * (f32(1) + th) + f32(0.5) * h * (f32(1) - th * th) * f32(_C)
                    * (f32(1) + f32(3 * 0.044715) * h * h))
        dh2 = dh.reshape(-1, 4 * D)
        g[pre + "mlp.c_fc.weight"] = dh2.T @ y2.reshape(-1, D)
        g[pre + "mlp.c_fc.bias"] = dh2.sum(0)
        d, g[pre + "ln_2.weight"], g[pre + "ln_2.bias"] = _ln_back(
            dh @ p[pre + "mlp.c_fc.weight"], c2)
        dx1 = dx + d
        dp = dx1.reshape(-1, D)
        g[pre + "attn.c_proj.weight"] = dp.T @ o.reshape(-1, D)
        g[pre + "attn.c_proj.bias"] = dp.sum(0)
        do = (dx1 @ p[pre + "attn.c_proj.weight"]).reshape(b_, t, H, hs).transpose(0, 2, 1, 3)
        da = do @ v.transpose(0, 1, 3, 2)
        dv = a.transpose(0, 1, 3, 2) @ do
        ds = a * (da - (da * a).sum(-1, keepdims=True)) * f32(1 / math.sqrt(hs))
        dq = ds @ k
        dk = ds.transpose(0, 1, 3, 2) @ q
        dqkv = np.stack([dq, dk, dv]).transpose(1, 3, 0, 2, 4).reshape(-1, 3 * D)
        g[pre + "attn.c_attn.weight"] = dqkv.T @ y1.reshape(-1, D)
        g[pre + "attn.c_attn.bias"] = dqkv.sum(0)
        d, g[pre + "ln_1.weight"], g[pre + "ln_1.bias"] = _ln_back(
            (dqkv @ p[pre + "attn.c_attn.weight"]).reshape(b_, t, D), c1)
        dx = dx1 + d
    dwte = np.zeros_like(p["wte.weight"])
    np.add.at(dwte, idx.reshape(-1), dx.reshape(-1, D))
    g["wte.weight"] = g["wte.weight"] + dwte
    dwpe = np.zeros_like(p["wpe.weight"])
    dwpe[:t] = dx.sum(0)
    g["wpe.weight"] = dwpe
    # AdamW (PyTorch's formulas, float32)
    opt["t"] += 1
    b1, b2, lr, eps = f32(0.9), f32(0.99), f32(1e-2), f32(1e-8)
    bc1, bc2 = 1 - 0.9 ** opt["t"], math.sqrt(1 - 0.99 ** opt["t"])
    for name, w in p.items():
        gr = g[name]
        if w.ndim >= 2:
            w *= f32(1 - 1e-2 * 0.1)
        m, vv = opt["m"][name], opt["v"][name]
        m += (gr - m) * (1 - b1)
        vv *= b2
        vv += (1 - b2) * gr * gr
        w -= f32(lr / bc1) * m / (np.sqrt(vv) / f32(bc2) + eps)
    opt["grads"] = g
    return loss


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args(argv)
    train, _, vocab = shakespeare_chars()
    rng = np.random.default_rng(0)
    starts = rng.integers(0, len(train) - T - 1, B)
    pos = starts[:, None] + np.arange(T)
    idx, y = train[pos].astype(np.int64), train[pos + 1].astype(np.int64)
    model = GPT(len(vocab), T, D, L, H, rng=0)
    params = dict(model.named_parameters())
    decay = [q for q in params.values() if q.ndim >= 2]
    rest = [q for q in params.values() if q.ndim < 2]
    opt = AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                lr=1e-2, betas=(0.9, 0.99))
    p = {n: q.numpy(np.float32).copy() for n, q in params.items()}
    state = {"t": 0, "m": {n: np.zeros_like(w) for n, w in p.items()},
             "v": {n: np.zeros_like(w) for n, w in p.items()}}

    def gemms_of(recipe: str):
        """The recipe's matmul accumulation context (the engine's default where it sets none)."""
        model_of = get_lm_recipe(recipe).accumulation
        return matmul_accumulation(model_of) if model_of else contextlib.nullcontext()

    def step_under(recipe: str):
        def step() -> float:
            with gemms_of(recipe):
                opt.zero_grad()
                logits = model(idx)
                loss = F.cross_entropy(logits.reshape(-1, len(vocab)), y.reshape(-1))
                loss.backward()
            opt.step()
            return loss.item()

        return step

    fpsim_step, dgemm_step = step_under("fp32"), step_under("fp32-dgemm")

    with pinned_blas(1):
        # same loss and gradients before timing (float32, so to ~1e-4 relative)
        ref = {n: q.numpy(np.float32).copy() for n, q in params.items()}
        opt.zero_grad()
        with gemms_of("fp32"):
            lf = F.cross_entropy(model(idx).reshape(-1, len(vocab)), y.reshape(-1))
            lf.backward()
        check = {"t": 0, "m": {n: np.zeros_like(w) for n, w in ref.items()},
                 "v": {n: np.zeros_like(w) for n, w in ref.items()}}
        ln = numpy_step({n: w.copy() for n, w in ref.items()}, idx, y, check)
        worst = max(float(np.max(np.abs(check["grads"][n] - q.grad))
                          / (np.max(np.abs(q.grad)) or 1.0)) for n, q in params.items())
        print(f"loss fpsim {lf.item():.6f}, NumPy {ln:.6f}; largest gradient difference "
              f"{worst:.2e} (relative to each gradient's max)")
        if not (abs(lf.item() - ln) < 1e-4 and worst < 1e-3):
            print("the two steps disagree: not timing them")
            return 1
        t_np = best_time(lambda: numpy_step(p, idx, y, state), args.repeat)
        t_fp = best_time(fpsim_step, args.repeat)
        t_dg = best_time(dgemm_step, args.repeat)
    print(f"GPT d {D}, {L} layers, {H} heads, batch {B} x {T}, one BLAS thread, best of "
          f"{args.repeat}")
    print(f"NumPy float32 step {t_np * 1e3:.1f} ms, fpsim fp32 step {t_fp * 1e3:.1f} ms: "
          f"fpsim / NumPy = {t_fp / t_np:.2f}x, speed vs reference = {t_np / t_fp:.2f} "
          f"(target: fpsim within 1.3x)")
    print(f"fpsim fp32-dgemm control (float64 accumulation) {t_dg * 1e3:.1f} ms: "
          f"fpsim / NumPy = {t_dg / t_np:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
