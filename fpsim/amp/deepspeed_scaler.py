"""DeepSpeed's fp16 dynamic loss scaler (with hysteresis) behind the GradScaler interface.

Follows ``deepspeed/runtime/fp16/loss_scaler.py`` ``DynamicLossScaler.update_scale`` as in
microsoft/DeepSpeed commit 0336518 (the version with ``consecutive_hysteresis``, exposed in the
config since v0.9.3, PR #3553, and ``raise_error_at_min_scale``, PR #1958). Defaults are the
fp16 config defaults (``initial_scale_power`` 16, ``loss_scale_window`` 1000, ``hysteresis`` 2,
``min_loss_scale`` 1), not the class's own (2**32, hysteresis 1).

The rule, per iteration (``cur_iter`` counts every iteration, skipped or not):

- overflow: if ``hysteresis == 1`` or the counter ``cur_hysteresis == 1`` the scale becomes
  ``max(scale / scale_factor, min_scale)`` (at ``min_scale`` already: an error), else the
  counter drops by one and the scale is kept; either way the step is skipped and
  ``last_overflow_iter = cur_iter``. The counter is NOT refilled by the halving, so after the
  hysteresis is used up every further overflow halves the scale.
- no overflow: with ``consecutive_hysteresis`` the counter is refilled at once; the scale is
  multiplied by ``scale_factor`` when ``(cur_iter - last_overflow_iter) % scale_window == 0``,
  i.e. on every ``scale_window``-th good iteration since the last overflow (also counting from
  the start, where ``last_overflow_iter = -1``), and (without ``consecutive_hysteresis``) only
  then is the hysteresis counter refilled.

Newer DeepSpeed (deepspeedai/DeepSpeed master, 2025) grows one iteration later: on the good
iteration after ``scale_window`` stable ones (``stable_interval = cur_iter - last_overflow_iter
- 1 > 0`` and ``% scale_window == 0``); choose it with ``window_rule="stable_interval"``.
"""

from __future__ import annotations

from typing import Any

from ..checks import as_int
from .scaler import ScalerBase, check_flag, check_positive

__all__ = ["DynamicLossScaler", "WINDOW_RULES"]

WINDOW_RULES = ("modulo", "stable_interval")


class DynamicLossScaler(ScalerBase):
    """DeepSpeed's dynamic loss scaler: :meth:`update_scale` is DeepSpeed's rule; ``scale`` /
    ``unscale_`` / ``step`` / ``update`` follow :class:`~fpsim.amp.GradScaler` (``update()``
    calls ``update_scale(found_inf)``; overflowing steps are always skipped). The scale is a
    Python float, unscaling multiplies by float32(1/scale) as DeepSpeed's fp32
    ``grad.mul_(1. / scale)`` does. FP16 gradients are refused (DeepSpeed unscales its fp32
    master gradients).

    >>> from fpsim.amp import DynamicLossScaler
    >>> s = DynamicLossScaler(init_scale=8.0, scale_window=2, hysteresis=2)
    >>> for overflow in [True, True, False, False]:
    ...     s.update_scale(overflow)
    ...     print(s.cur_scale, s.cur_hysteresis)
    8.0 1
    4.0 1
    4.0 1
    8.0 2
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        scale_window: int = 1000,
        hysteresis: int = 2,
        min_scale: float = 1,
        scale_factor: float = 2.0,
        consecutive_hysteresis: bool = False,
        raise_error_at_min_scale: bool = True,
        window_rule: str = "modulo",
        enabled: bool = True,
    ) -> None:
        super().__init__(enabled)
        self.cur_scale = check_positive("init_scale", init_scale)
        self.scale_window = as_int("scale_window", scale_window, 1)
        self.delayed_shift = as_int("hysteresis", hysteresis, 1)
        self.cur_hysteresis = self.delayed_shift
        self.min_scale = check_positive("min_scale", min_scale)
        self.scale_factor = check_positive("scale_factor", scale_factor)
        if not self.scale_factor > 1.0:
            raise ValueError(f"scale_factor must be > 1, got {scale_factor!r}")
        self.consecutive_hysteresis = check_flag("consecutive_hysteresis", consecutive_hysteresis)
        self.raise_error_at_min_scale = check_flag("raise_error_at_min_scale",
                                              raise_error_at_min_scale)
        if window_rule not in WINDOW_RULES:
            raise ValueError(
                f"unknown window_rule {window_rule!r}; valid: {', '.join(WINDOW_RULES)}"
            )
        self.window_rule = window_rule
        self.cur_iter = 0
        self.last_overflow_iter = -1
        self.dynamic = True

    @property
    def hysteresis(self) -> int:
        """The configured hysteresis (DeepSpeed's ``delayed_shift``)."""
        return self.delayed_shift

    @property
    def loss_scale(self) -> float:
        """The current scale (DeepSpeed's property name)."""
        return self.cur_scale

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        return self.cur_scale if self._enabled else 1.0

    def _scale_factor(self) -> float:
        return self.cur_scale

    def _set_scale(self, value: float) -> None:
        self.cur_scale = check_positive("new_scale", value)

    def _grows(self) -> bool:
        since = self.cur_iter - self.last_overflow_iter
        if self.window_rule == "modulo":
            return since % self.scale_window == 0
        stable = since - 1
        return stable > 0 and stable % self.scale_window == 0

    def update_scale(self, overflow: bool) -> None:
        """DeepSpeed's ``update_scale(overflow)`` for one iteration."""
        if overflow:
            if self.delayed_shift == 1 or self.cur_hysteresis == 1:
                if self.cur_scale == self.min_scale and self.raise_error_at_min_scale:
                    raise RuntimeError(
                        "Current loss scale already at minimum - cannot decrease scale anymore. "
                        "Exiting run."
                    )
                self.cur_scale = float(max(self.cur_scale / self.scale_factor, self.min_scale))
            else:
                self.cur_hysteresis -= 1
            self.last_overflow_iter = self.cur_iter
        else:
            if self.consecutive_hysteresis:
                self.cur_hysteresis = self.delayed_shift
            if self._grows():
                if not self.consecutive_hysteresis:
                    self.cur_hysteresis = self.delayed_shift
                self.cur_scale *= self.scale_factor
        self.cur_iter += 1

    def _apply_update(self, found_inf: bool) -> dict[str, Any]:
        self.update_scale(found_inf)
        return {"hysteresis": self.cur_hysteresis}

    def state_dict(self) -> dict[str, Any]:
        """The scaler's counters and settings (DeepSpeed pickles the scaler object)."""
        return {
            "cur_scale": self.cur_scale,
            "cur_iter": self.cur_iter,
            "last_overflow_iter": self.last_overflow_iter,
            "cur_hysteresis": self.cur_hysteresis,
            "scale_factor": self.scale_factor,
            "scale_window": self.scale_window,
            "min_scale": self.min_scale,
            "delayed_shift": self.delayed_shift,
            "consecutive_hysteresis": self.consecutive_hysteresis,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""
        self.cur_scale = float(state_dict["cur_scale"])
        self.cur_iter = int(state_dict["cur_iter"])
        self.last_overflow_iter = int(state_dict["last_overflow_iter"])
        self.cur_hysteresis = int(state_dict["cur_hysteresis"])
        self.scale_factor = float(state_dict["scale_factor"])
        self.scale_window = int(state_dict["scale_window"])
        self.min_scale = float(state_dict["min_scale"])
        self.delayed_shift = int(state_dict["delayed_shift"])
        self.consecutive_hysteresis = bool(state_dict["consecutive_hysteresis"])
