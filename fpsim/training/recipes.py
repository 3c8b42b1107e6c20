"""The precision recipes of the demo, each an Apex opt level with overrides.

============  =======  ===============================================================
name          level    weights / gradients / master copy / loss scale
============  =======  ===============================================================
fp32          O0       fp32 everything; no scaling.
fp16          O3       fp16 weights, activations, gradients and optimizer state; no
                       master copy, no loss scaling ("pure fp16").
fp16-master   O2       fp16 model, fp32 master weights, loss scale 1 (no scaling).
mixed-fp16    O2       fp16 model, fp32 master weights, dynamic loss scaling
                       (Micikevicius et al.'s mixed precision; Apex O2).
mixed-bf16    O2       bf16 model, fp32 master weights, no loss scaling (bf16 has fp32's
                       exponent range).
bf16          O3       pure bf16: bf16 weights and optimizer state, no master copy, no
                       scaling, round to nearest even.
bf16-sr       O3       pure bf16 whose optimizer writes (weights, momentum) round
                       stochastically (Gupta et al. 2015; Zamirai et al. 2020).
============  =======  ===============================================================

``loss_scale`` overrides the recipe's scaling: ``"none"`` (a static scale of 1),
``"dynamic"`` (Apex's dynamic scaler) or a number (a static scale).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..formats import BF16, FP16, FP32, Format

__all__ = ["PRECISIONS", "Recipe", "get_recipe", "parse_loss_scale"]


@dataclass(frozen=True)
class Recipe:
    """One precision recipe: an Apex opt level, its low-precision format and loss scale."""

    name: str
    opt_level: str
    fmt: Format
    loss_scale: float | str
    description: str
    update_rounding: str = "nearest_even"  # how the optimizer's writes round (bf16-sr)

    @property
    def master_weights(self) -> bool:
        """Whether the optimizer keeps fp32 master weights."""
        return self.opt_level == "O2"


PRECISIONS: dict[str, Recipe] = {
    "fp32": Recipe("fp32", "O0", FP32, 1.0, "FP32 baseline"),
    "fp16": Recipe("fp16", "O3", FP16, 1.0,
                   "pure FP16: FP16 weights and optimizer state, no master copy, no scaling"),
    "fp16-master": Recipe("fp16-master", "O2", FP16, 1.0,
                          "FP16 model with FP32 master weights, no loss scaling"),
    "mixed-fp16": Recipe("mixed-fp16", "O2", FP16, "dynamic",
                         "FP16 mixed precision: FP32 master weights, dynamic loss scaling"),
    "mixed-bf16": Recipe("mixed-bf16", "O2", BF16, 1.0,
                         "BF16 mixed precision: FP32 master weights, no loss scaling"),
    "bf16": Recipe("bf16", "O3", BF16, 1.0,
                   "pure BF16: BF16 weights and optimizer state, no master copy, round to "
                   "nearest"),
    "bf16-sr": Recipe("bf16-sr", "O3", BF16, 1.0,
                      "pure BF16 with stochastic rounding of the weight update",
                      update_rounding="stochastic"),
}


def get_recipe(name: str | Recipe) -> Recipe:
    """The recipe called ``name`` (ValueError listing the valid names otherwise).

    >>> get_recipe("mixed-fp16").opt_level
    'O2'
    """
    if isinstance(name, Recipe):
        return name
    if not isinstance(name, str) or name.strip().lower() not in PRECISIONS:
        raise ValueError(f"unknown precision {name!r}; valid: {', '.join(PRECISIONS)}")
    return PRECISIONS[name.strip().lower()]


def parse_loss_scale(value: str | float | None) -> float | str | None:
    """``"none"`` -> 1.0 (no scaling), ``"dynamic"``, a positive number (string or float) ->
    float, None -> None (the recipe's default).

    >>> parse_loss_scale("none"), parse_loss_scale("dynamic"), parse_loss_scale("1024")
    (1.0, 'dynamic', 1024.0)
    """
    if value is None:
        return None
    if isinstance(value, str):
        key = value.strip().lower()
        if key == "none":
            return 1.0
        if key == "dynamic":
            return "dynamic"
        try:
            value = float(key)
        except ValueError:
            raise ValueError(f"loss scale must be 'none', 'dynamic' or a positive number, got "
                             f"{value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"loss scale must be 'none', 'dynamic' or a number, got {value!r}")
    v = float(value)
    if not (v > 0 and v < float("inf")):
        raise ValueError(f"loss scale must be positive and finite, got {value!r}")
    return v
