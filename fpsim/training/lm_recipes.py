"""The precision recipes of ``fpsim lm``: how the small GPT is trained under each, and where
each choice comes from.

Every recipe starts from the same fp32 initial weights, sees the same batches and uses the
same AdamW hyper-parameters and learning-rate schedule (:mod:`fpsim.training.lm`); nothing is
staged (no gradient shift, no learning-rate factor).

=============  ==============================================================================
name           what runs in which format
=============  ==============================================================================
fp32           everything fp32 (Apex O0), GEMMs by the BLAS's sgemm as NumPy's and PyTorch's
               float32 matmuls on a CPU (the ``"sgemm"`` accumulation model: each add
               rounded to fp32 in the BLAS's order, so the bits can differ between BLAS
               builds and CPUs, as theirs do). ``fp32-dgemm`` (a control, run by name) is the
               same with the engine's default ``"fp32"`` model: exact products summed in
               float64 and rounded once to fp32.
fp16           pure fp16 (Apex O3): fp16 weights, activations, gradients and AdamW state, no
               master copy, no loss scaling; Apex casts the model's output to fp32, so the
               loss is computed in fp32.
fp16-master    fp16 model, fp32 master weights and AdamW state, no loss scaling (Apex O2
               with ``loss_scale=1``).
mixed-fp16     PyTorch AMP: fp32 weights, ``autocast(fp16)`` with PyTorch's op lists
               (linear / matmul in fp16; softmax, layer norm, the loss in fp32), a
               ``GradScaler`` with PyTorch's defaults (init 2^16, growth interval 2000).
mixed-bf16     ``autocast(bf16)``, fp32 weights, no scaler (bf16 has fp32's range).
bf16           pure bf16 (Apex O3 in bf16): bf16 weights and AdamW state, round to nearest.
bf16-sr        pure bf16 whose optimizer writes (weights, moments) round stochastically
               (Zamirai et al. 2020).
fp8-delayed    Transformer Engine's HYBRID delayed-scaling recipe: every linear layer of the
               blocks is an :class:`fpsim.quant.FP8Linear` (e4m3 forward operands, e5m2
               gradients, per-tensor scales from an amax history of 1024 steps, max, margin
               0: TE's ``DelayedScaling`` defaults), fp32 master weights; the rest of the
               model (embeddings, layer norms, attention's batched matmuls, the tied head)
               under ``autocast(bf16)``, as TE models run.
fp8-blockwise  DeepSeek-V3's fine-grained FP8 (:class:`fpsim.quant.blockwise_fp8.
               BlockwiseFP8Linear`): e4m3 everywhere, 1x128 activation / gradient tiles and
               128x128 weight blocks with online amax / 448 scales, partial sums of 128
               products promoted to an fp32 accumulator (exact partial sums in training; the
               H100 tensor-core model of them is measured apart); rest bf16 autocast.
mxfp8          TE's ``MXFP8BlockScaling``: the block linears are :class:`fpsim.quant.MXLinear`
               (e4m3 elements, one E8M0 scale per 1x32 block along each GEMM's reduction
               dimension, scales rounded up: RCEIL); the rest under ``autocast(bf16)``.
mxfp8-floor    as mxfp8 with the OCP MX specification's scale rule (floor of log2 amax minus
               the element format's emax), which can overflow the block's largest element.
nvfp4          NVIDIA's NVFP4 pretraining recipe (arXiv:2509.25149) on MXLinear: e2m1
               elements, e4m3 scales per 1x16 block and an fp32 per-tensor scale, 16x16 2-D
               weight blocks, a random Hadamard transform on the weight-gradient GEMM's
               operands, stochastic rounding of the gradients; the last block's linears stay
               in bf16 (the recipe keeps its last layers in higher precision).
=============  ==============================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from ..formats import BF16, FP16, FP32, Format

__all__ = ["ABLATIONS", "CONTROLS", "LMRecipe", "LM_RECIPES", "get_lm_recipe", "parse_recipes"]


@dataclass(frozen=True)
class LMRecipe:
    """One recipe of ``fpsim lm``.

    - ``opt_level``: Apex's level for the model's cast ("O0" none, "O2" low-precision model
      with fp32 master weights, "O3" pure), or None for PyTorch AMP (fp32 weights, autocast).
    - ``fmt``: the low-precision format (fp32 for the baseline).
    - ``autocast``: the autocast format (PyTorch AMP), or None.
    - ``grad_scaler``: whether a PyTorch ``GradScaler`` scales the loss.
    - ``update_rounding``: how the optimizer's writes round ("nearest_even", "stochastic").
    """

    name: str
    description: str
    opt_level: str | None
    fmt: Format
    autocast: Format | None = None
    grad_scaler: bool = False
    update_rounding: str = "nearest_even"
    linear: str | None = None  # the block linears' layer (module docstring), None: nn.Linear
    keep_last: int = 0  # how many of the last blocks keep bf16 linears (nvfp4)
    options: tuple[tuple[str, bool], ...] = ()  # MXLinear overrides (the nvfp4 ablations)
    # the matmul accumulation model (fpsim.autograd.accumulate) of the trained model's forward
    # and backward, None: the engine's default ("fp32"); the fp64 shadow keeps its own
    accumulation: str | None = None

    @property
    def master_weights(self) -> bool:
        """Whether the optimizer updates fp32 weights (O0, O2 and autocast recipes)."""
        return self.opt_level != "O3"


LM_RECIPES: dict[str, LMRecipe] = {r.name: r for r in (
    LMRecipe("fp32", "FP32 baseline (sgemm, as NumPy and PyTorch on a CPU)", "O0", FP32,
             accumulation="sgemm"),
    LMRecipe("fp16", "pure FP16 (Apex O3): FP16 weights and AdamW state, no scaling", "O3",
             FP16),
    LMRecipe("fp16-master", "FP16 model, FP32 master weights (Apex O2), no loss scaling",
             "O2", FP16),
    LMRecipe("mixed-fp16", "PyTorch AMP: autocast(fp16), FP32 weights, GradScaler", None,
             FP16, autocast=FP16, grad_scaler=True),
    LMRecipe("mixed-bf16", "PyTorch AMP: autocast(bf16), FP32 weights, no scaler", None,
             BF16, autocast=BF16),
    LMRecipe("bf16", "pure BF16 (Apex O3 in bf16): round to nearest", "O3", BF16),
    LMRecipe("bf16-sr", "pure BF16, optimizer writes rounded stochastically", "O3", BF16,
             update_rounding="stochastic"),
    LMRecipe("fp8-delayed", "TE HYBRID: e4m3 forward, e5m2 gradients, delayed per-tensor "
             "scaling; rest bf16 autocast", None, BF16, autocast=BF16, linear="fp8-delayed"),
    LMRecipe("fp8-blockwise", "DeepSeek-V3: e4m3, 1x128 tiles, 128x128 weight blocks, fp32 "
             "promotion every 128 products; rest bf16 autocast", None, BF16, autocast=BF16,
             linear="fp8-blockwise"),
    LMRecipe("mxfp8", "MXFP8 (e4m3, 1x32 E8M0 scales, RCEIL); rest bf16 autocast", None,
             BF16, autocast=BF16, linear="mxfp8"),
    LMRecipe("mxfp8-floor", "MXFP8 with the OCP floor scale rule; rest bf16 autocast", None,
             BF16, autocast=BF16, linear="mxfp8-floor"),
    LMRecipe("nvfp4", "NVFP4 (16x16 weight blocks, RHT on wgrad, SR gradients), last block "
             "bf16; rest bf16 autocast", None, BF16, autocast=BF16, linear="nvfp4",
             keep_last=1),
)}


def _ablation(name: str, what: str, keep_last: int = 1, **options: bool) -> LMRecipe:
    return LMRecipe(name, f"NVFP4 ablation: {what}", None, BF16, autocast=BF16,
                    linear="nvfp4", keep_last=keep_last, options=tuple(options.items()))


# NVFP4's ablations (run by name with --recipes; not in the default set): each drops one
# element of the recipe
ABLATIONS: dict[str, LMRecipe] = {r.name: r for r in (
    _ablation("nvfp4-no-rht", "no random Hadamard transform on the wgrad operands",
              hadamard=False),
    _ablation("nvfp4-no-sr", "gradients rounded to nearest, not stochastically",
              stochastic_gradients=False),
    _ablation("nvfp4-1d", "weights in 1x16 blocks instead of 16x16 tiles", weight_2d=False),
    _ablation("nvfp4-all", "every block in NVFP4 (no bf16 last block)", keep_last=0),
    _ablation("nvfp4-no-tensor-scale", "no fp32 per-tensor scale (e4m3 block scales only)",
              tensor_scale=False),
)}


# controls (run by name with --recipes; not in the default set)
CONTROLS: dict[str, LMRecipe] = {r.name: r for r in (
    LMRecipe("fp32-dgemm", "FP32 with float64 accumulation (exact products, one rounding "
             "to fp32 per GEMM result)", "O0", FP32, accumulation="fp32"),
)}


def get_lm_recipe(name: str | LMRecipe) -> LMRecipe:
    """The recipe called ``name`` (ValueError listing the valid names otherwise).

    >>> get_lm_recipe("mixed-fp16").grad_scaler
    True
    """
    if isinstance(name, LMRecipe):
        return name
    key = name.strip().lower() if isinstance(name, str) else None
    if key in ABLATIONS:
        return ABLATIONS[key]
    if key in CONTROLS:
        return CONTROLS[key]
    if key not in LM_RECIPES:
        raise ValueError(f"unknown lm recipe {name!r}; valid: "
                         f"{', '.join([*LM_RECIPES, *ABLATIONS, *CONTROLS])}")
    return LM_RECIPES[key]


def parse_recipes(spec: str | None) -> list[str]:
    """``"a,b"`` -> the recipe names in that order (all, in table order, for None or "all");
    ValueError naming an unknown or repeated one.

    >>> parse_recipes("fp32, bf16")
    ['fp32', 'bf16']
    """
    if spec is None or spec.strip().lower() == "all":
        return list(LM_RECIPES)
    names = [s.strip().lower() for s in spec.split(",") if s.strip()]
    if not names:
        raise ValueError(f"--recipes needs recipe names separated by commas, got {spec!r}; "
                         f"valid: {', '.join(LM_RECIPES)}")
    for n in names:
        get_lm_recipe(n)
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"--recipes names {', '.join(dup)} more than once")
    return names
