"""Record a PyTorch float64 nanoGPT's logits and gradients, and PyTorch's embedding, GELU
(tanh) and causal attention in fp32 / fp16 / bf16, into tests/data/torch/gpt.npz: the
independent reference of tests/test_torch_gpt.py (issue 31's correctness checks). Needs torch
(not a dependency of fpsim); run it in its own environment:

    python -m venv /path/to/torchenv && /path/to/torchenv/bin/pip install torch==2.13.0 numpy
    /path/to/torchenv/bin/python tools/record_torch_gpt.py

The GPT is nanoGPT's model.py (Karpathy, MIT licence) restated with the parameter names of
fpsim.models.GPT's contract (no ``transformer.`` prefix): token and position embeddings,
pre-norm blocks of causal self-attention (the explicit path: q k^T * 1/sqrt(head size),
masked_fill -inf above the diagonal, softmax, @ v; checked against
scaled_dot_product_attention(is_causal=True) here) and a GELU-tanh MLP, a final LayerNorm and
the head tied to wte; no dropout. Weights are random (not nanoGPT's small initial ones, so
that every nonlinearity is exercised), float64, given as arrays; the logits' upstream
gradient is random. Each case stores the token ids, every parameter, the gradient fed back,
the logits and every parameter's gradient.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "torch" / "gpt.npz"

# (vocab, context, d_model, n_layers, n_heads, batch, T): T < context in some
GPT_CASES = [(11, 8, 16, 2, 2, 2, 8), (11, 8, 16, 1, 4, 3, 5), (7, 6, 8, 1, 1, 2, 6),
             (13, 8, 8, 3, 2, 1, 7)]


def contract_names(n_layers: int) -> list[str]:
    names = ["wte.weight", "wpe.weight"]
    for i in range(n_layers):
        names += [f"h.{i}.{n}" for n in (
            "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
            "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
            "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")]
    return names + ["ln_f.weight", "ln_f.bias"]


def main() -> int:
    import torch
    import torch.nn as nn
    import torch.nn.functional as TF

    torch.set_num_threads(1)
    rng = np.random.default_rng(31)
    arrays: dict[str, np.ndarray] = {}
    cases: list[dict] = []

    class CausalSelfAttention(nn.Module):
        def __init__(self, d, nh):
            super().__init__()
            self.c_attn = nn.Linear(d, 3 * d, dtype=torch.float64)
            self.c_proj = nn.Linear(d, d, dtype=torch.float64)
            self.n_head, self.n_embd = nh, d

        def forward(self, x, flash=False):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            if flash:
                y = TF.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
                att = att.masked_fill(~mask, float("-inf"))
                att = TF.softmax(att, dim=-1)
                y = att @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class MLP(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.c_fc = nn.Linear(d, 4 * d, dtype=torch.float64)
            self.gelu = nn.GELU(approximate="tanh")
            self.c_proj = nn.Linear(4 * d, d, dtype=torch.float64)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self, d, nh):
            super().__init__()
            self.ln_1 = nn.LayerNorm(d, eps=1e-5, dtype=torch.float64)
            self.attn = CausalSelfAttention(d, nh)
            self.ln_2 = nn.LayerNorm(d, eps=1e-5, dtype=torch.float64)
            self.mlp = MLP(d)

        def forward(self, x, flash=False):
            x = x + self.attn(self.ln_1(x), flash)
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self, v, c, d, n_layers, nh):
            super().__init__()
            self.wte = nn.Embedding(v, d, dtype=torch.float64)
            self.wpe = nn.Embedding(c, d, dtype=torch.float64)
            self.h = nn.ModuleList([Block(d, nh) for _ in range(n_layers)])
            self.ln_f = nn.LayerNorm(d, eps=1e-5, dtype=torch.float64)
            self.lm_head = nn.Linear(d, v, bias=False, dtype=torch.float64)
            self.lm_head.weight = self.wte.weight  # weight tying, as nanoGPT

        def forward(self, idx, flash=False):
            t = idx.size(1)
            x = self.wte(idx) + self.wpe(torch.arange(t, dtype=torch.long))
            for block in self.h:
                x = block(x, flash)
            return self.lm_head(self.ln_f(x))

    for v, c, d, n_layers, nh, b, t in GPT_CASES:
        model = GPT(v, c, d, n_layers, nh)
        names = [n for n, _ in model.named_parameters()]  # the tied head is listed once
        assert names == contract_names(n_layers), names
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "ln_" in n and n.endswith("weight"):
                    p.copy_(torch.tensor(1.0 + 0.2 * rng.standard_normal(tuple(p.shape))))
                else:
                    std = 0.1 if n.endswith("bias") else 0.5 / math.sqrt(p.shape[-1]) * 2
                    p.copy_(torch.tensor(std * rng.standard_normal(tuple(p.shape))))
        idx = rng.integers(0, v, (b, t))
        logits = model(torch.tensor(idx))
        flash = model(torch.tensor(idx), flash=True)
        assert torch.allclose(logits, flash, rtol=1e-12, atol=1e-14)
        g = rng.standard_normal(tuple(logits.shape))
        logits.backward(torch.tensor(g))
        i = len(cases)
        cases.append({"kind": "gpt", "vocab": v, "context": c, "d_model": d,
                      "n_layers": n_layers, "n_heads": nh, "names": names})
        arrays[f"{i}/idx"] = idx.astype(np.int64)
        arrays[f"{i}/g"] = g
        arrays[f"{i}/logits"] = logits.detach().numpy()
        for n, p in model.named_parameters():
            arrays[f"{i}/param/{n}"] = p.detach().numpy().copy()
            arrays[f"{i}/grad/{n}"] = p.grad.numpy().copy()

    # embedding with repeated indices in fp32 / fp16 / bf16: the weight gradient's adds, in
    # PyTorch's CPU order, each rounded to the dtype; gradients of mixed magnitudes so that
    # the order shows in the last bits
    dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    for fmt, tdt in dtypes.items():
        for num, dim, shape in ((5, 4, (300,)), (9, 3, (6, 50)), (4, 2, (2, 520))):
            idx = rng.integers(0, num, shape)
            w = torch.tensor(rng.standard_normal((num, dim))).to(tdt).requires_grad_()
            gd = rng.standard_normal(shape + (dim,)) * 2.0 ** rng.integers(-10, 6, shape + (dim,))
            gt = torch.tensor(gd).to(tdt)
            out = TF.embedding(torch.tensor(idx), w)
            out.backward(gt)
            i = len(cases)
            cases.append({"kind": "embedding", "fmt": fmt, "num": num, "dim": dim})
            arrays[f"{i}/idx"] = idx.astype(np.int64)
            arrays[f"{i}/w"] = w.detach().to(torch.float32).numpy()  # exact: fp16, bf16 in fp32
            arrays[f"{i}/g"] = gt.to(torch.float32).numpy()
            arrays[f"{i}/out"] = out.detach().to(torch.float32).numpy()
            arrays[f"{i}/grad"] = w.grad.to(torch.float32).numpy()

    # GELU (tanh) forward and backward in fp16 / bf16 (PyTorch's CPU kernels compute in
    # float32 and round once) and causal attention in fp32 / fp16 / bf16 (PyTorch's CPU
    # matmuls and softmax): values as float32 (exact)
    n = 1024
    for fmt in ("fp16", "bf16"):
        x = torch.tensor(rng.standard_normal(n) * 2.0 ** rng.integers(-8, 4, n)).to(dtypes[fmt])
        x.requires_grad_()
        gy = torch.tensor(rng.standard_normal(n)).to(dtypes[fmt])
        y = TF.gelu(x, approximate="tanh")
        y.backward(gy)
        i = len(cases)
        cases.append({"kind": "gelu_tanh", "fmt": fmt})
        arrays[f"{i}/x"] = x.detach().to(torch.float32).numpy()
        arrays[f"{i}/g"] = gy.to(torch.float32).numpy()
        arrays[f"{i}/y"] = y.detach().to(torch.float32).numpy()
        arrays[f"{i}/dx"] = x.grad.to(torch.float32).numpy()
    for fmt in ("fp32", "fp16", "bf16"):
        b, nh, t, hs = 2, 2, 6, 8
        q, k, vv = (torch.tensor(rng.standard_normal((b, nh, t, hs))).to(dtypes[fmt])
                    .requires_grad_() for _ in range(3))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        y = TF.softmax(att.masked_fill(~mask, float("-inf")), dim=-1) @ vv
        gy = torch.tensor(rng.standard_normal(tuple(y.shape))).to(dtypes[fmt])
        y.backward(gy)
        i = len(cases)
        cases.append({"kind": "attention", "fmt": fmt})
        for name, tens in (("q", q), ("k", k), ("v", vv)):
            arrays[f"{i}/{name}"] = tens.detach().to(torch.float32).numpy()
            arrays[f"{i}/d{name}"] = tens.grad.to(torch.float32).numpy()
        arrays[f"{i}/g"] = gy.to(torch.float32).numpy()
        arrays[f"{i}/y"] = y.detach().to(torch.float32).numpy()

    arrays["cases"] = np.array(json.dumps(cases))
    arrays["torch_version"] = np.array(torch.__version__)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **arrays)
    print(f"{len(cases)} cases -> {OUT} ({OUT.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
