"""The quantization experiment behind ``fpsim quant`` (the command: :mod:`fpsim.cli.quant`):
one small network on the shipped UCI digits, quantized every way fpsim models, with accuracy,
model size and training memory.

Setup: an MLP 64 -> 64 -> ReLU -> 10, trained in fp32 with Adam (lr 1e-2, batch 64); the
test set is the held-out quarter of the digits (449 images). Each seed retrains everything.

Table 1 (digits):

- FP32, and an "FP32 fine-tuned" control trained for the same extra epochs as QAT (QAT's
  gain over PTQ includes these epochs; the control shows how much of it they alone give).
- INT8 PTQ, per-tensor and per-channel weights: PyTorch's static quantization (MinMax
  observers over 8 calibration batches of 64 training images; activations quint8 affine),
  converted to integer-only :class:`~fpsim.quant.layers.Int8Linear` layers.
- INT8 QAT: PyTorch's default QAT fake quantizers, fine-tuned from the fp32 model (observers
  frozen for the last epoch), converted to the same integer layers.
- The sensitive setting, ``bits``-bit (default 3, "W3A3"): weights on a signed ``bits``-bit
  grid and every activation (input, hidden, logits) on an unsigned ``bits``-bit grid. At 8
  bits this network loses nothing to PTQ, so QAT has nothing to recover; narrowing the grids
  is what makes it sensitive. Rows: PTQ per-channel, QAT, and LSQ (learned step sizes).
- NF4 weight-only (block 64, double quantization, bf16 compute), and NF4 + LoRA: QLoRA
  adapters (rank ``lora_rank``) trained on the training set with the NF4 base frozen.
- FP8: the network trained from scratch with :class:`~fpsim.quant.layers.FP8Linear` layers
  (E4M3 forward, E5M2 backward, delayed scaling with a 16-step amax history).

Table 3, block-scaled training (:class:`~fpsim.quant.mx_layers.MXLinear`, fake-quantized GEMM
operands, each trained from scratch as the FP8 row): a BF16 baseline (bf16 weights and
gradients, fp32 master weights and Adam moments), MXFP8 (Transformer Engine's recipe: E4M3 in
both passes, 1x32 blocks), NVFP4 with every GEMM operand rounded to nearest even in 1x16
blocks (weights too) and no Hadamard transform, and NVIDIA's NVFP4 recipe (16x16 weight
blocks, stochastic rounding of gradients, random Hadamard transforms on the weight-gradient
inputs, the last layer in BF16). Then the failure case: NVFP4 without its fp32 per-tensor
scale (e4m3 block scales only, clamped at 2**-6 as torchao does, so magnitudes below 2**-8
round to 0: most gradients of the mean-reduced loss), with round to nearest (training stalls)
and with each piece of the recipe alone (stochastic rounding of gradients, the Hadamard
transform, 16x16 weight blocks, the BF16 last layer) and all four. Then one input outlier
(``outlier``, 2**20), two ways, on
the FP32 model (evaluation only; the outlier's weights are zero, so FP32 is unchanged):

- an outlier *channel* (as LLM.int8's outlier features): the input is padded from 64 to 96
  features, feature 64 holds the outlier and features 65-95 are 0, so the outlier sits in a
  32-block of its own. Quantized per tensor to FP8 E4M3 (scale 448 / amax), every ordinary
  pixel (at most 1, times 448 / 2**20) lands below half of e4m3's smallest subnormal 2**-9
  and flushes to 0: chance accuracy. MXFP8 scales each block by its own amax and keeps the
  two pixel blocks exactly (the pixels are multiples of 1/16). NVFP4 fails like per-tensor
  FP8: its per-tensor scale ``amax / (6 * 448)`` pushes the pixel blocks' e4m3 scales below
  2**-6, where they clamp, and their values (at most 1) round to 0 in fp4; with block scales
  only (no per-tensor scale) NVFP4 keeps them.
- an outlier *pixel* (pixel 0, blank in every digit, set to the outlier): it shares its block
  with ordinary pixels and flushes them. MXFP8's 1x32 blocks lose the top half of the image;
  1x8 blocks (outside the spec: 9 bits per value instead of 8.25) lose only the top row.

Table 2, QLoRA in miniature: the fp32 model is fine-tuned to a shifted task (every image
moved ``shift`` pixels; the test images too), by full fine-tuning in fp32, in mixed precision
(bf16 weights and gradients, fp32 master weights and Adam moments) and by QLoRA; memory is
measured on the objects (:func:`~fpsim.quant.lora.training_memory`).

Model size counts what inference stores (:func:`~fpsim.quant.layers.model_size_bytes`:
integer weights packed to their bit width); training memory counts the model states of a
step (weights, gradients, optimizer state; not activations). ``--quick`` (one seed, fewer
epochs) is what the tests run.
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from .. import mx, nn, optim
from ..autograd import functional as F
from ..autograd.tensor import Tensor, as_format, no_grad
from ..datasets import load_digits
from ..state import as_seed
from .fp8_scaling import fp8_dequantize, fp8_quantize
from .layers import FP8Linear, NF4Linear, check_bits, model_size_bytes
from .lora import lora_parameters, prepare_qlora, training_memory
from .mx_layers import MXLinear, fake_quantize_mx
from .qat import (
    convert,
    disable_observer,
    get_default_qat_qconfig,
    get_default_qconfig,
    prepare_qat,
    quantize_ptq,
)

__all__ = [
    "ExperimentConfig",
    "QUICK",
    "Row",
    "ExperimentResult",
    "make_mlp",
    "outlier_accuracies",
    "ToFormat",
    "shift_images",
    "train",
    "accuracy",
    "run_experiment",
    "format_result",
]


@dataclass(frozen=True)
class ExperimentConfig:
    """The knobs of :func:`run_experiment` (defaults: the full run)."""

    hidden: int = 64
    epochs: int = 20
    lr: float = 1e-2
    qat_epochs: int = 5
    qat_lr: float = 1e-3
    batch_size: int = 64
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    sensitive_bits: int = 3
    calibration_batches: int = 8
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_lr: float = 1e-2
    ft_epochs: int = 10
    shift: tuple[int, int] = (1, 0)
    outlier: float = 2.0**20


QUICK = ExperimentConfig(epochs=12, qat_epochs=4, seeds=(0,), ft_epochs=6)


@dataclass
class Row:
    """One line of a table: accuracies per seed, bytes, and a note."""

    method: str
    accuracies: list[float] = field(default_factory=list)
    model_bytes: int | None = None
    train_bytes: int | None = None
    note: str = ""

    @property
    def accuracy(self) -> float:
        """The mean accuracy over seeds."""
        return float(np.mean(self.accuracies))


@dataclass
class ExperimentResult:
    """The three tables, the configuration and the wall time (seconds)."""

    config: ExperimentConfig
    table: list[Row]
    finetune: list[Row]
    seconds: float = 0.0
    block_scaled: list[Row] = field(default_factory=list)

    def row(self, method: str, table: str = "table") -> Row:
        """The row named ``method`` of ``table`` ("table", "finetune" or "block_scaled")."""
        for r in getattr(self, table):
            if r.method == method:
                return r
        raise KeyError(f"no row {method!r}; rows: {[r.method for r in getattr(self, table)]}")

    def to_dict(self) -> dict:
        """JSON-ready: the config, and per row the mean and per-seed accuracies and bytes."""
        def rows(rs):
            return [dict(asdict(r), accuracy=r.accuracy) for r in rs]
        return {"config": asdict(self.config), "table": rows(self.table),
                "finetune": rows(self.finetune), "block_scaled": rows(self.block_scaled),
                "seconds": self.seconds}


def make_mlp(hidden: int = 64, seed: int = 0) -> nn.Sequential:
    """The experiment's network: Linear(64, hidden), ReLU, Linear(hidden, 10), fp32.

    >>> [type(m).__name__ for m in make_mlp(8)]
    ['Linear', 'ReLU', 'Linear']
    """
    seed = as_seed(seed)
    return nn.Sequential(nn.Linear(64, hidden, rng=seed), nn.ReLU(),
                         nn.Linear(hidden, 10, rng=seed + 1000))


def shift_images(x: np.ndarray, dx: int, dy: int = 0) -> np.ndarray:
    """Move each 8x8 digit ``dx`` pixels right and ``dy`` down (zero fill).

    >>> shift_images(np.arange(64.0)[None], 1)[0, :3].tolist()
    [0.0, 0.0, 1.0]
    """
    if abs(dx) > 7 or abs(dy) > 7:
        raise ValueError(f"shift must be within 7 pixels, got {(dx, dy)}")
    im = np.asarray(x).reshape(-1, 8, 8)
    out = np.zeros_like(im)
    out[:, max(dy, 0):8 + min(dy, 0), max(dx, 0):8 + min(dx, 0)] = \
        im[:, max(-dy, 0):8 - max(dy, 0), max(-dx, 0):8 - max(dx, 0)]
    return out.reshape(-1, 64)


def train(model: nn.Module, x: np.ndarray, y: np.ndarray, epochs: int, lr: float, *,
          params=None, seed: int = 0, batch_size: int = 64, master_weights: bool = False,
          hook=None):
    """Adam on cross-entropy for ``epochs`` shuffled passes (the order seeded by ``seed``);
    ``hook(epoch, model)`` runs before each epoch. Returns the optimizer.

    >>> s = load_digits()
    >>> opt = train(make_mlp(8), s.x_train[:64], s.y_train[:64], 1, 1e-2)
    >>> type(opt).__name__
    'Adam'
    """
    opt = optim.Adam(list(model.parameters() if params is None else params), lr=lr,
                     master_weights=master_weights)
    model.train()
    n, seed = len(x), as_seed(seed)
    for ep in range(epochs):
        if hook is not None:
            hook(ep, model)
        order = np.random.default_rng(seed * 1000 + ep).permutation(n)
        for i in range(0, n, batch_size):
            idx = order[i:i + batch_size]
            loss = F.cross_entropy(model(Tensor(x[idx], _input_format(model))), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return opt


def _input_format(model: nn.Module):
    """The format a model's inputs are given in: its parameters' one format (a bf16 model
    takes bf16 inputs; linear refuses mixed formats as PyTorch), else fp32."""
    fmts = {p.fmt for p in model.parameters()}
    return fmts.pop() if len(fmts) == 1 else "fp32"


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    """Top-1 accuracy in evaluation mode, without a graph.

    >>> s = load_digits()
    >>> 0.0 <= accuracy(make_mlp(8), s.x_test, s.y_test) <= 1.0
    True
    """
    model.eval()
    with no_grad():
        pred = np.asarray(model(Tensor(x, _input_format(model))).numpy(np.float64)).argmax(axis=1)
    return float((pred == np.asarray(y)).mean())


def _ptq(net: nn.Module, qconfig, x: np.ndarray, cfg: ExperimentConfig) -> nn.Module:
    calib = x[:cfg.calibration_batches * cfg.batch_size]
    return quantize_ptq(net, calib, qconfig, batch_size=cfg.batch_size)


def _qat(net, qconfig, s, cfg: ExperimentConfig, seed: int):
    qm = prepare_qat(net, qconfig)
    last = cfg.qat_epochs - 1

    def freeze(ep, m):  # PyTorch's recipe: freeze the observers for the final epoch(s)
        if ep == last and last > 0:
            m.apply(disable_observer)

    opt = train(qm, s.x_train, s.y_train, cfg.qat_epochs, cfg.qat_lr, seed=seed,
                batch_size=cfg.batch_size, hook=freeze)
    return convert(qm), training_memory(qm, opt).total


def _fp8_model(hidden: int, seed: int) -> nn.Sequential:
    return nn.Sequential(FP8Linear(64, hidden, rng=seed), nn.ReLU(),
                         FP8Linear(hidden, 10, rng=seed + 1000))


class ToFormat(nn.Module):
    """Rounds its input to ``fmt``: an fp32 layer feeding a bf16 one (PyTorch's ``x.to(dtype)``).

    >>> ToFormat("bf16")(Tensor([1.00390625])).tolist()
    [1.0]
    """

    def __init__(self, fmt) -> None:
        super().__init__()
        self.fmt = as_format(fmt)

    def forward(self, x: Tensor) -> Tensor:
        return x.to(self.fmt)

    def extra_repr(self) -> str:
        return self.fmt.name


def _mx_model(hidden: int, seed: int, last_bf16: bool = False, **kw) -> nn.Sequential:
    if last_bf16:  # the recipe keeps the last layer in BF16: its input is rounded to bf16
        return nn.Sequential(MXLinear(64, hidden, rng=seed, **kw), nn.ReLU(), ToFormat("bf16"),
                             nn.Linear(hidden, 10, rng=seed + 1000).to("bf16"))
    return nn.Sequential(MXLinear(64, hidden, rng=seed, **kw), nn.ReLU(),
                         MXLinear(hidden, 10, rng=seed + 1000, **kw))


NO_TS = "NVFP4 no tensor scale"  # the failure case: e4m3 block scales only
BLOCK_ROWS = ("BF16 (fp32 master)", "MXFP8 (E4M3, 1x32)", "NVFP4 (RNE, 1x16, no RHT)",
              "NVFP4 recipe (SR, RHT, 2-D W)", f"{NO_TS} (RNE)", f"{NO_TS} + SR gradients",
              f"{NO_TS} + RHT wgrad", f"{NO_TS} + 16x16 W blocks",
              f"{NO_TS} + BF16 last layer", f"{NO_TS}, recipe (all four)",
              "outlier channel: FP32",
              "outlier channel: FP8 per-tensor", "outlier channel: MXFP8",
              "outlier channel: NVFP4", "outlier channel: NVFP4 block scales only",
              "outlier pixel: MXFP8 1x32", "outlier pixel: MXFP8 1x8")
OUTLIER_FEATURES = 96  # 64 pixels, the outlier channel, 31 zeros: three whole 32-blocks
SMALL_BLOCK = 8  # the outlier-pixel case's smaller block (one image row)


def _with_first_weight(net: nn.Module, w_first: np.ndarray) -> nn.Module:
    """A copy of ``net`` whose first layer's weight is ``w_first`` (its bias and the rest kept)."""
    net = copy.deepcopy(net)
    first = nn.Linear(w_first.shape[1], w_first.shape[0])
    first.weight.data = w_first
    first.bias.data = net[0].bias.numpy(np.float32)
    net.add_module("0", first)
    return net


def _fp8_per_tensor(x: np.ndarray) -> np.ndarray:
    scale = np.float32(448.0) / np.abs(x).max()
    return fp8_dequantize(fp8_quantize(x, scale), scale)


def outlier_accuracies(net: nn.Module, s, outlier: float) -> dict[str, float]:
    """Accuracy of the FP32 ``net`` on test inputs holding one outlier whose weights are 0 (FP32
    unchanged), the inputs quantized per tensor to E4M3 or in blocks: the outlier as an extra
    input channel in a block of its own, and as pixel 0 inside a block of ordinary pixels
    (the rows of the third table, :data:`BLOCK_ROWS` from the fifth on).

    >>> s = load_digits()
    >>> acc = outlier_accuracies(make_mlp(8), s, 2.0**20)
    >>> acc["outlier channel: FP8 per-tensor"] == acc["outlier channel: NVFP4"]  # both flushed
    True
    """
    w = net[0].weight.numpy(np.float32)
    x = np.asarray(s.x_test, np.float32)
    n, d = x.shape
    # the outlier channel: feature d of OUTLIER_FEATURES; its weights and the padding's are 0
    wide = np.zeros((w.shape[0], OUTLIER_FEATURES), np.float32)
    wide[:, :d] = w
    xc = np.zeros((n, OUTLIER_FEATURES), np.float32)
    xc[:, :d] = x
    xc[:, d] = np.float32(outlier)
    chan = _with_first_weight(net, wide)
    # the outlier pixel: pixel 0 (blank in every digit), its weights 0
    w0 = w.copy()
    w0[:, 0] = 0.0
    pix = _with_first_weight(net, w0)
    xp = x.copy()
    xp[:, 0] = np.float32(outlier)

    def mxfp8(v, k):
        return mx.quantize(v, "mxfp8_e4m3", k, axis=1, scale_mode="rceil").dequantize()

    rows = {
        "outlier channel: FP32": (chan, xc),
        "outlier channel: FP8 per-tensor": (chan, _fp8_per_tensor(xc)),
        "outlier channel: MXFP8": (chan, mxfp8(xc, 32)),
        "outlier channel: NVFP4": (chan, fake_quantize_mx(xc, "nvfp4", 1)),
        "outlier channel: NVFP4 block scales only":
            (chan, mx.quantize(xc, "nvfp4", axis=1).dequantize()),
        "outlier pixel: MXFP8 1x32": (pix, mxfp8(xp, 32)),
        f"outlier pixel: MXFP8 1x{SMALL_BLOCK}": (pix, mxfp8(xp, SMALL_BLOCK)),
    }
    return {k: accuracy(m, v, s.y_test) for k, (m, v) in rows.items()}


def run_experiment(config: ExperimentConfig | None = None, *, quick: bool = False,
                   progress=None) -> ExperimentResult:
    """Run the three tables (module docstring); ``quick`` uses :data:`QUICK`. ``progress(str)``,
    if given, is called as each step finishes.

    >>> from dataclasses import replace
    >>> r = run_experiment(replace(QUICK, epochs=1, qat_epochs=1, ft_epochs=1, hidden=8))
    >>> [row.method for row in r.table][:3]
    ['FP32', 'FP32 fine-tuned (control)', 'INT8 PTQ per-tensor']
    """
    if config is not None and not isinstance(config, ExperimentConfig):
        raise TypeError(f"run_experiment: config must be an ExperimentConfig or None, got "
                        f"{type(config).__name__} {config!r}")
    cfg = QUICK if (config is None and quick) else (config or ExperimentConfig())
    b = check_bits(cfg.sensitive_bits)
    if not cfg.seeds:
        raise ValueError("give at least one seed")
    for i, s in enumerate(cfg.seeds):  # at the start, not after the first seed's training
        as_seed(s, f"seeds[{i}]")
    t0 = time.perf_counter()
    say = progress or (lambda _msg: None)
    s = load_digits()
    dx, dy = cfg.shift
    xs_train, xs_test = shift_images(s.x_train, dx, dy), shift_images(s.x_test, dx, dy)
    wb = f"W{b}A{b}"
    names = ["FP32", "FP32 fine-tuned (control)", "INT8 PTQ per-tensor", "INT8 PTQ per-channel",
             "INT8 QAT", f"{wb} PTQ per-channel", f"{wb} QAT", f"{wb} LSQ", "NF4 weight-only",
             "NF4 + LoRA", "FP8 (E4M3 fwd / E5M2 bwd)"]
    table = {n: Row(n) for n in names}
    ft_names = ["FP32, not fine-tuned", "full fine-tune fp32", "full fine-tune mixed (bf16)",
                "NF4, not fine-tuned", "QLoRA (NF4 + LoRA)"]
    ft = {n: Row(n) for n in ft_names}
    bsc = {n: Row(n) for n in BLOCK_ROWS}

    def put(rows, name, acc, model=None, train_bytes=None):
        r = rows[name]
        r.accuracies.append(acc)
        if model is not None:
            r.model_bytes = model_size_bytes(model)
        if train_bytes is not None:
            r.train_bytes = int(train_bytes)

    kw = dict(batch_size=cfg.batch_size)
    for seed in cfg.seeds:
        net = make_mlp(cfg.hidden, seed)
        opt = train(net, s.x_train, s.y_train, cfg.epochs, cfg.lr, seed=seed, **kw)
        put(table, "FP32", accuracy(net, s.x_test, s.y_test), net,
            training_memory(net, opt).total)
        ctrl = copy.deepcopy(net)
        opt = train(ctrl, s.x_train, s.y_train, cfg.qat_epochs, cfg.qat_lr, seed=seed, **kw)
        put(table, "FP32 fine-tuned (control)", accuracy(ctrl, s.x_test, s.y_test), ctrl,
            training_memory(ctrl, opt).total)
        say(f"seed {seed}: fp32 trained")

        for per_channel, name in ((False, "INT8 PTQ per-tensor"), (True, "INT8 PTQ per-channel")):
            q = _ptq(net, get_default_qconfig(8, per_channel), s.x_train, cfg)
            put(table, name, accuracy(q, s.x_test, s.y_test), q)
        q, mem = _qat(net, get_default_qat_qconfig(8), s, cfg, seed)
        put(table, "INT8 QAT", accuracy(q, s.x_test, s.y_test), q, mem)
        say(f"seed {seed}: int8 done")

        q = _ptq(net, get_default_qconfig(b), s.x_train, cfg)
        put(table, f"{wb} PTQ per-channel", accuracy(q, s.x_test, s.y_test), q)
        q, mem = _qat(net, get_default_qat_qconfig(b), s, cfg, seed)
        put(table, f"{wb} QAT", accuracy(q, s.x_test, s.y_test), q, mem)
        q, mem = _qat(net, get_default_qat_qconfig(b, learnable=True), s, cfg, seed)
        put(table, f"{wb} LSQ", accuracy(q, s.x_test, s.y_test), q, mem)
        say(f"seed {seed}: {wb} done")

        nf4 = copy.deepcopy(net)
        for i in (0, 2):
            nf4.add_module(str(i), NF4Linear.from_linear(net[i]))
        put(table, "NF4 weight-only", accuracy(nf4, s.x_test, s.y_test), nf4)
        ql = prepare_qlora(net, cfg.lora_rank, cfg.lora_alpha, rng=seed)
        opt = train(ql, s.x_train, s.y_train, cfg.qat_epochs, cfg.lora_lr, seed=seed,
                    params=lora_parameters(ql), master_weights=True, **kw)
        put(table, "NF4 + LoRA", accuracy(ql, s.x_test, s.y_test), ql,
            training_memory(ql, opt).total)
        fp8 = _fp8_model(cfg.hidden, seed)
        opt = train(fp8, s.x_train, s.y_train, cfg.epochs, cfg.lr, seed=seed, **kw)
        put(table, "FP8 (E4M3 fwd / E5M2 bwd)", accuracy(fp8, s.x_test, s.y_test), fp8,
            training_memory(fp8, opt).total)
        say(f"seed {seed}: nf4 / fp8 done")

        # table 3: block-scaled training, and the outlier
        bf = make_mlp(cfg.hidden, seed).to("bf16")
        opt = train(bf, s.x_train, s.y_train, cfg.epochs, cfg.lr, seed=seed,
                    master_weights=True, **kw)
        put(bsc, "BF16 (fp32 master)", accuracy(bf, s.x_test, s.y_test), bf,
            training_memory(bf, opt).total)
        plain = dict(recipe="nvfp4", stochastic_gradients=False, hadamard=False,
                     weight_2d=False)
        bare = dict(plain, tensor_scale=False)
        for name, mkw in (("MXFP8 (E4M3, 1x32)", dict(recipe="mxfp8")),
                          ("NVFP4 (RNE, 1x16, no RHT)", plain),
                          ("NVFP4 recipe (SR, RHT, 2-D W)", dict(recipe="nvfp4", last_bf16=True)),
                          (f"{NO_TS} (RNE)", bare),
                          (f"{NO_TS} + SR gradients", dict(bare, stochastic_gradients=True)),
                          (f"{NO_TS} + RHT wgrad", dict(bare, hadamard=True)),
                          (f"{NO_TS} + 16x16 W blocks", dict(bare, weight_2d=True)),
                          (f"{NO_TS} + BF16 last layer", dict(bare, last_bf16=True)),
                          (f"{NO_TS}, recipe (all four)",
                           dict(recipe="nvfp4", tensor_scale=False, last_bf16=True))):
            m = _mx_model(cfg.hidden, seed, **mkw)
            opt = train(m, s.x_train, s.y_train, cfg.epochs, cfg.lr, seed=seed, **kw)
            put(bsc, name, accuracy(m, s.x_test, s.y_test), m, training_memory(m, opt).total)
        for name, acc in outlier_accuracies(net, s, cfg.outlier).items():
            put(bsc, name, acc)
        say(f"seed {seed}: block-scaled done")

        # table 2: fine-tuning to the shifted task
        put(ft, "FP32, not fine-tuned", accuracy(net, xs_test, s.y_test), net)
        full = copy.deepcopy(net)
        opt = train(full, xs_train, s.y_train, cfg.ft_epochs, cfg.lora_lr, seed=seed, **kw)
        put(ft, "full fine-tune fp32", accuracy(full, xs_test, s.y_test), full,
            training_memory(full, opt).total)
        mixed = copy.deepcopy(net).to("bf16")
        opt = train(mixed, xs_train, s.y_train, cfg.ft_epochs, cfg.lora_lr, seed=seed,
                    master_weights=True, **kw)
        put(ft, "full fine-tune mixed (bf16)", accuracy(mixed, xs_test, s.y_test), mixed,
            training_memory(mixed, opt).total)
        ql = prepare_qlora(net, cfg.lora_rank, cfg.lora_alpha, rng=seed)
        put(ft, "NF4, not fine-tuned", accuracy(ql, xs_test, s.y_test))
        opt = train(ql, xs_train, s.y_train, cfg.ft_epochs, cfg.lora_lr, seed=seed,
                    params=lora_parameters(ql), master_weights=True, **kw)
        put(ft, "QLoRA (NF4 + LoRA)", accuracy(ql, xs_test, s.y_test), ql,
            training_memory(ql, opt).total)
        ft["NF4, not fine-tuned"].model_bytes = ft["QLoRA (NF4 + LoRA)"].model_bytes
        say(f"seed {seed}: fine-tuning done")

    notes = {
        "FP32 fine-tuned (control)": f"+{cfg.qat_epochs} epochs at lr {cfg.qat_lr:g}, as QAT",
        "INT8 PTQ per-tensor": f"{cfg.calibration_batches} calibration batches",
        "INT8 QAT": "fake quant, observers frozen in the last epoch",
        f"{wb} PTQ per-channel": f"sensitive: {b}-bit weights and activations",
        f"{wb} LSQ": "learned step sizes (Esser et al. 2020)",
        "NF4 weight-only": "block 64, double quantization, bf16 compute",
        "NF4 + LoRA": f"r={cfg.lora_rank}, bf16 adapters, +{cfg.qat_epochs} epochs as QAT",
        "FP8 (E4M3 fwd / E5M2 bwd)": "trained from scratch, delayed scaling",
        "full fine-tune mixed (bf16)": "bf16 weights, fp32 master + Adam",
        "QLoRA (NF4 + LoRA)": f"r={cfg.lora_rank}; NF4 base frozen",
        "BF16 (fp32 master)": "bf16 weights and gradients, fp32 master + Adam",
        "MXFP8 (E4M3, 1x32)": "Transformer Engine's MXFP8: both passes E4M3, E8M0 rceil",
        "NVFP4 (RNE, 1x16, no RHT)": "every layer NVFP4, nearest even",
        "NVFP4 recipe (SR, RHT, 2-D W)": "16x16 W blocks, SR grads, RHT wgrad, last layer BF16",
        f"{NO_TS} (RNE)": "e4m3 block scales only: gradients below ~2**-8 flush",
        f"{NO_TS} + SR gradients": "stochastic rounding keeps them in expectation",
        f"{NO_TS} + RHT wgrad": "Hadamard mixes 16 samples before the wgrad cast",
        f"{NO_TS} + 16x16 W blocks": "weights only: the gradients still flush",
        f"{NO_TS} + BF16 last layer": "the last layer learns in BF16; the first still flushes",
        f"{NO_TS}, recipe (all four)": "SR, RHT, 2-D W and BF16 last layer together",
        "outlier channel: FP32": f"96 inputs: 64 pixels, {_num(cfg.outlier)}, 31 zeros",
        "outlier channel: FP8 per-tensor": "inputs E4M3, scale 448 / amax: pixels flushed",
        "outlier channel: MXFP8": "inputs MXFP8 1x32: the outlier in a block of its own",
        "outlier channel: NVFP4": "two-level: per-tensor scale amax / (6 * 448)",
        "outlier channel: NVFP4 block scales only": "no per-tensor scale: e4m3 block scales",
        "outlier pixel: MXFP8 1x32": "pixel 0 = outlier: its block (top half) flushed",
        f"outlier pixel: MXFP8 1x{SMALL_BLOCK}":
            f"block {SMALL_BLOCK} (off-spec, {8 + 8 / SMALL_BLOCK:g} bits/value): top row flushed",
    }
    for rows in (table, ft, bsc):
        for n, r in rows.items():
            r.note = notes.get(n, "")
    return ExperimentResult(cfg, list(table.values()), list(ft.values()),
                            time.perf_counter() - t0, list(bsc.values()))


def _num(v: float) -> str:
    """``v`` as ``2**k`` when it is a power of two (the outlier), else ``%g``."""
    m, e = np.frexp(v)
    return f"2**{int(e) - 1}" if m == 0.5 else f"{v:g}"


def _fmt_bytes(v: int | None) -> str:
    return "-" if v is None else f"{v:,}"


def _table_lines(rows: list[Row], acc_head: str) -> list[str]:
    head = ("method", acc_head, "model bytes", "training bytes", "note")
    body = []
    for r in rows:
        acc = f"{100 * r.accuracy:.1f}%"
        if len(r.accuracies) > 1:
            acc += f" ({100 * min(r.accuracies):.1f}-{100 * max(r.accuracies):.1f})"
        body.append((r.method, acc, _fmt_bytes(r.model_bytes), _fmt_bytes(r.train_bytes),
                     r.note))
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    fmt = [str.ljust, str.rjust, str.rjust, str.rjust, str.ljust]
    lines = ["  ".join(f(h, w) for f, h, w in zip(fmt, head, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(f(c, w) for f, c, w in zip(fmt, b, widths, strict=True)).rstrip()
              for b in body]
    return lines


def format_result(result: ExperimentResult) -> str:
    """The three tables as text, with the setup and how the model was made sensitive.

    >>> from dataclasses import replace
    >>> r = run_experiment(replace(QUICK, epochs=1, qat_epochs=1, ft_epochs=1, hidden=8))
    >>> "QLoRA (NF4 + LoRA)" in format_result(r)
    True
    """
    if not isinstance(result, ExperimentResult):
        raise TypeError(f"format_result takes run_experiment's result (an ExperimentResult), "
                        f"got {type(result).__name__} {result!r}")
    cfg = result.config
    b = cfg.sensitive_bits
    seeds = len(cfg.seeds)
    n_params = 64 * cfg.hidden + cfg.hidden + cfg.hidden * 10 + 10
    s = load_digits()
    out = [f"fpsim quant: UCI digits ({len(s.x_train):,} train / {len(s.x_test):,} test images), "
           f"MLP 64-{cfg.hidden}-10 "
           f"({n_params:,} parameters), {cfg.epochs} epochs of Adam; "
           f"{'mean (min-max) of ' + str(seeds) + ' seeds' if seeds > 1 else '1 seed'}",
           ""]
    out += _table_lines(result.table, "test accuracy")
    out += ["",
            f"Sensitive setting W{b}A{b}: at 8 bits this network loses nothing to PTQ, so QAT "
            "has nothing to recover; with",
            f"weights on a {b}-bit signed grid and every activation (input, hidden, logits) on "
            f"a {b}-bit unsigned grid, PTQ loses",
            "accuracy and QAT wins part of it back (LSQ, trained with Adam, which makes its "
            "gradient scale moot, less).",
            "The FP32 control shows what QAT's extra epochs alone give.",
            "Model bytes: what inference stores (integer weights packed to their width, int32 "
            "bias, scales).",
            "Training bytes: model states of a step (weights, gradients, optimizer state incl. "
            "fp32 masters), no activations.",
            "",
            f"QLoRA in miniature: fine-tuning the FP32 model to digits shifted by {cfg.shift} "
            f"pixels ({cfg.ft_epochs} epochs, lr {cfg.lora_lr:g})", ""]
    out += _table_lines(result.finetune, "shifted-test accuracy")
    if result.block_scaled:
        out += ["", "Block-scaled training (fake-quantized GEMM operands, trained from scratch), "
                "and one input outlier", ""]
        out += _table_lines(result.block_scaled, "test accuracy")
        out += ["",
                f"{NO_TS}: NVFP4 with its e4m3 block scales alone (no fp32 per-tensor scale). "
                "torchao clamps a block scale",
                "at 2**-6, so values below 2**-8 round to 0 in fp4; a mean-reduced loss's "
                "gradients mostly sit there, they",
                "flush, and training stalls. The per-tensor scale amax / (6 * 448) fixes it (the "
                "NVFP4 rows above); so does",
                "stochastic rounding of the gradients (unbiased: a flushed value survives in "
                "expectation) and, mostly, the",
                "Hadamard transform of the weight-gradient inputs; 16x16 weight blocks do not "
                "(they treat the weights).",
                "Sweep over seeds and configurations: docs/mx.md.",
                "",
                "Outlier rows: the FP32 model on test inputs holding one value "
                f"{_num(cfg.outlier)} whose weights are 0 (FP32 unchanged).",
                "- Outlier channel (an extra input feature, as LLM.int8's outlier features; "
                "inputs padded to 96 = 3 blocks of 32):",
                "  per-tensor FP8 scales every pixel by 448 / amax, below e4m3's smallest "
                "subnormal: all flush to 0. MXFP8",
                "  gives the outlier a block and a scale of its own and keeps the pixels. "
                "NVFP4's per-tensor scale",
                "  amax / (6 * 448) fails like per-tensor FP8 (the pixel blocks' e4m3 scales "
                "clamp at 2**-6, their values",
                "  round to 0 in fp4); its block scales alone keep them.",
                "- Outlier pixel (pixel 0, inside a block of ordinary pixels): the outlier sets "
                "its block's scale and flushes",
                f"  its neighbours: 1x32 blocks lose the top half of the image, 1x{SMALL_BLOCK} "
                f"only the top row, at {8 + 8 / SMALL_BLOCK:g} instead of",
                "  8.25 bits per value: smaller blocks, fewer casualties, more scale bytes."]
    out += ["", f"({result.seconds:.1f} s)"]
    return "\n".join(out)
