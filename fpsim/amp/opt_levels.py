"""NVIDIA Apex AMP optimisation levels O0-O3 as a table of properties.

The properties are those ``apex/amp/frontend.py`` sets for each level (``cast_model_type``,
``patch_torch_functions``, ``keep_batchnorm_fp32``, ``master_weights``, ``loss_scale``), with
torch dtypes written as fpsim formats; ``None`` means "not applicable / left to the level's
mechanism" exactly where Apex leaves the property None.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..formats import FP16, FP32, Format
from .scaler import ApexLossScaler

__all__ = ["OptLevel", "OPT_LEVELS", "describe_opt_level", "get_opt_level"]


@dataclass(frozen=True)
class OptLevel:
    """One Apex opt level: its properties and a short explanation.

    >>> from fpsim.amp import OPT_LEVELS
    >>> OPT_LEVELS["O2"].master_weights, OPT_LEVELS["O2"].cast_model_type.name
    (True, 'fp16')
    """

    name: str
    brief: str
    cast_model_type: Format | None
    patch_torch_functions: bool
    keep_batchnorm_fp32: bool | None
    master_weights: bool | None
    loss_scale: float | str
    details: str

    @property
    def dynamic_loss_scale(self) -> bool:
        """Whether the level uses Apex's dynamic loss scaler."""
        return self.loss_scale == "dynamic"

    def make_scaler(self, **kwargs: object) -> ApexLossScaler:
        """The Apex loss scaler this level uses (extra kwargs go to :class:`ApexLossScaler`).

        >>> from fpsim.amp import OPT_LEVELS
        >>> OPT_LEVELS["O3"].make_scaler().get_scale(), OPT_LEVELS["O1"].make_scaler().dynamic
        (1.0, True)
        """
        return ApexLossScaler(loss_scale=self.loss_scale, **kwargs)  # type: ignore[arg-type]


OPT_LEVELS: dict[str, OptLevel] = {
    "O0": OptLevel(
        name="O0",
        brief="Pure FP32 training.",
        cast_model_type=FP32,
        patch_torch_functions=False,
        keep_batchnorm_fp32=None,
        master_weights=False,
        loss_scale=1.0,
        details="The model is checked to hold FP32 parameters and otherwise left alone: no FP16 "
                "arithmetic anywhere. The accuracy baseline for the other levels.",
    ),
    "O1": OptLevel(
        name="O1",
        brief="Insert automatic casts around PyTorch functions and Tensor methods.",
        cast_model_type=None,
        patch_torch_functions=True,
        keep_batchnorm_fp32=None,
        master_weights=None,
        loss_scale="dynamic",
        details="Weights stay FP32. Functions are patched per op: Tensor Core friendly ops "
                "(matmul, convolution) cast their inputs to FP16, ops that need range or "
                "precision (softmax, norms, losses, exp/log) run in FP32, like torch autocast. "
                "The safest level to try first.",
    ),
    "O2": OptLevel(
        name="O2",
        brief="FP16 training with FP32 batchnorm and FP32 master weights.",
        cast_model_type=FP16,
        patch_torch_functions=False,
        keep_batchnorm_fp32=True,
        master_weights=True,
        loss_scale="dynamic",
        details="The model is cast to FP16 except batch norm, which stays FP32; inputs are cast "
                "to FP16 on the way in. The optimizer updates FP32 master copies of the weights "
                "and copies them back into the FP16 model after each step.",
    ),
    "O3": OptLevel(
        name="O3",
        brief="Pure FP16 training.",
        cast_model_type=FP16,
        patch_torch_functions=False,
        keep_batchnorm_fp32=False,
        master_weights=False,
        loss_scale=1.0,
        details="The whole model, batch norm included, is FP16 and no loss scaling is applied: "
                "a speed ceiling, and a demonstration of what goes wrong without the other "
                "techniques (gradient underflow, lost updates).",
    ),
}


def get_opt_level(opt_level: str | OptLevel) -> OptLevel:
    """Look an opt level up by name ("O0".."O3", letter O; lower case accepted).

    >>> get_opt_level("o1").loss_scale
    'dynamic'
    """
    if isinstance(opt_level, OptLevel):
        return opt_level
    if not isinstance(opt_level, str):
        raise TypeError(f"opt_level must be a str such as 'O2', got {type(opt_level).__name__}")
    key = opt_level.strip().upper()
    if key not in OPT_LEVELS:
        hint = " (the letter O, not zero)" if key.startswith("0") else ""
        raise ValueError(
            f"unknown opt_level {opt_level!r}{hint}; valid: {', '.join(OPT_LEVELS)}"
        )
    return OPT_LEVELS[key]


def _show(value: object) -> str:
    if isinstance(value, Format):
        return value.name  # type: ignore[return-value]
    return repr(value)


def describe_opt_level(opt_level: str | OptLevel) -> str:
    """A few lines explaining an Apex opt level and listing its properties.

    >>> print(describe_opt_level("O2"))  # doctest: +NORMALIZE_WHITESPACE
    O2: FP16 training with FP32 batchnorm and FP32 master weights.
      cast_model_type       fp16
      patch_torch_functions False
      keep_batchnorm_fp32   True
      master_weights        True
      loss_scale            'dynamic'
    The model is cast to FP16 except batch norm, which stays FP32; inputs are cast to FP16 on
    the way in. The optimizer updates FP32 master copies of the weights and copies them back
    into the FP16 model after each step.
    """
    lvl = get_opt_level(opt_level)
    props = ("cast_model_type", "patch_torch_functions", "keep_batchnorm_fp32",
             "master_weights", "loss_scale")
    lines = [f"{lvl.name}: {lvl.brief}"]
    lines += [f"  {p:<21} {_show(getattr(lvl, p))}" for p in props]
    # wrap the details at about 90 columns
    words, line = lvl.details.split(), ""
    for w in words:
        if line and len(line) + 1 + len(w) > 90:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    if line:
        lines.append(line)
    return "\n".join(lines)
