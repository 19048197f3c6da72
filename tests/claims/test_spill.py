"""The label join's temporary columns: what goes in comes back, by window and by position."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

from amv_calib.claims import _spill
from amv_calib.claims._spill import SpilledColumns


@pytest.fixture
def small_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_spill, "WINDOW_ROWS", 7)  # many windows over a few rows


def _filled(blocks: list[int], seed: int = 0) -> tuple[SpilledColumns, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    spill = SpilledColumns(("a", "b"))
    whole: dict[str, list[np.ndarray]] = {"a": [], "b": []}
    for n in blocks:
        block = {"a": rng.normal(size=n), "b": np.where(rng.random(n) < 0.2, np.nan,
                                                         rng.random(n))}
        spill.append(block)
        for k in whole:
            whole[k].append(block[k])
    spill.finish_writing()
    return spill, {k: np.concatenate(v) for k, v in whole.items()}


@pytest.mark.usefixtures("small_windows")
def test_columns_come_back_whole_by_window_and_by_position() -> None:
    spill, want = _filled([5, 0, 13, 1, 30])
    assert spill.n_rows == 49
    for k in ("a", "b"):
        got = np.concatenate([v for _, v in spill.windows(k)])
        np.testing.assert_array_equal(got, want[k])  # NaN where NaN, bit for bit
        assert [lo for lo, _ in spill.windows(k)] == list(range(0, 49, 7))
    rng = np.random.default_rng(1)
    for _ in range(20):  # ascending, repeats allowed (a soft label's two rows)
        pos = np.sort(rng.integers(0, 49, int(rng.integers(0, 60))))
        np.testing.assert_array_equal(spill.take("b", pos), want["b"][pos])
    np.testing.assert_array_equal(spill.read("a", 40, 100), want["a"][40:])
    assert spill.read("a", 10, 10).size == 0


def test_take_refuses_positions_out_of_order_or_range() -> None:
    spill, _ = _filled([10])
    with pytest.raises(ValueError, match="ascend"):
        spill.take("a", np.array([3, 2]))
    with pytest.raises(ValueError, match="ascend"):
        spill.take("a", np.array([10]))


def test_blocks_of_unequal_columns_are_refused() -> None:
    spill = SpilledColumns(("a", "b"))
    with pytest.raises(ValueError, match="different lengths"):
        spill.append({"a": np.zeros(3), "b": np.zeros(2)})


def test_the_folder_goes_with_the_object() -> None:
    spill, _ = _filled([4])
    folder = spill._folder
    assert os.path.isdir(folder)
    del spill
    gc.collect()
    assert not os.path.exists(folder)


def test_a_failed_write_names_the_folder_and_what_to_do(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    import errno

    class FullDisk:
        def tofile(self, fh: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

    spill = SpilledColumns(("a",))
    monkeypatch.setattr(np, "ascontiguousarray", lambda *a, **k: FullDisk())
    with pytest.raises(OSError, match="point TMPDIR at a disk with room") as info:
        spill.append({"a": np.zeros(3)})
    assert info.value.errno == errno.ENOSPC and spill._folder in str(info.value)
    assert spill.n_rows == 0
