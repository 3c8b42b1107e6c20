"""ZeRO's stages (Rajbhandari et al. 2020), one vocabulary for the memory calculator
(:mod:`fpsim.memory`) and the simulated engine (:class:`fpsim.distributed.ZeroEngine`):
0 the baseline (every rank keeps everything), 1 the optimizer states partitioned (P_os), 2 the
gradients too (P_os+g), 3 the parameters too (P_os+g+p)."""

from __future__ import annotations

from .checks import as_int_in

__all__ = ["STAGE_NAMES", "ZERO_STAGES", "as_zero_stage"]

ZERO_STAGES = (0, 1, 2, 3)
STAGE_NAMES = {0: "baseline", 1: "P_os", 2: "P_os+g", 3: "P_os+g+p"}


def as_zero_stage(stage) -> int:
    """``stage`` as one of :data:`ZERO_STAGES`: what ``range()`` takes (a TypeError for other
    types: 2.0 is not stage 2), else a ValueError naming the valid stages.

    >>> as_zero_stage(2)
    2
    >>> as_zero_stage(4)
    Traceback (most recent call last):
    ...
    ValueError: unknown ZeRO stage 4; valid: 0 (baseline), 1 (P_os), 2 (P_os+g), 3 (P_os+g+p)
    """
    return as_int_in("stage", stage, ZERO_STAGES, "unknown ZeRO stage {!r}",
                     lambda s: f"{s} ({STAGE_NAMES[s]})")
