"""What every synthetic world shares: the year its claims fall in and the check of its size
and seed."""

from __future__ import annotations

from typing import Final

from amv_calib.exceptions import ConfigError

#: Synthetic timestamps fall in the year from this instant (UTC, epoch seconds).
EPOCH_START: Final = 1_767_225_600  # 2026-01-01T00:00:00Z
YEAR_S: Final = 365 * 24 * 3600


def check_size_seed(n: int, seed: int) -> None:
    """``n`` and ``seed`` are non-negative integers, else a :class:`ConfigError`."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ConfigError(f"n={n!r} must be an integer >= 0")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed={seed!r} must be an integer >= 0")
