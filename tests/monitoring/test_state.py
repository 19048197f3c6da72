"""The monitor state's key hashes and membership test, against independent computations."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from amv_calib.claims.engine import hash_strings, sort_keys
from amv_calib.monitoring._state import hash_rows, is_in

_M64 = (1 << 64) - 1


def _reference_hash(text: str) -> int:
    """FNV-1a 64 of the UTF-8 bytes, then splitmix64's finaliser, in plain Python."""
    h = 0xCBF29CE484222325
    for byte in text.encode("utf-8"):
        h = ((h ^ byte) * 0x100000001B3) & _M64
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _M64
    h ^= h >> 31
    return h or 1


WORDS = ["", "a", "c74406", "action-0000001", "naïve ✓", "x" * 300, "=cmd|' /C calc'!A0"]


def test_hash_strings_by_hand() -> None:
    got = hash_strings(pd.Series(WORDS, dtype=object))
    assert got.dtype == np.uint64
    assert [int(v) for v in got] == [_reference_hash(w) for w in WORDS]
    # FNV-1a's published value of "a" before the finaliser, to pin the reference itself
    h = ((0xCBF29CE484222325 ^ ord("a")) * 0x100000001B3) & _M64
    assert h == 0xAF63DC4C8601EC8C


@pytest.mark.parametrize("spelling", ["object", "str", "category", "arrow-sliced"],
                         ids=["object", "str", "category", "arrow-sliced"])
def test_hash_strings_agree_across_spellings_and_missing_is_zero(spelling: str) -> None:
    values = [*WORDS, None, "a", None, "c74406"]
    expected = [0 if v is None else _reference_hash(v) for v in values]
    if spelling == "object":
        series = pd.Series([np.nan if v is None else v for v in values], dtype=object)
    elif spelling == "str":
        series = pd.Series(values, dtype="str")
    elif spelling == "category":
        series = pd.Series(values, dtype="category")
    else:  # a slice of a chunked Arrow column: the offsets do not start at zero
        arr = pa.chunked_array([pa.array(["pad", "pad2"] + values[:5]), pa.array(values[5:])])
        series = pd.Series(pd.arrays.ArrowExtensionArray(arr)).iloc[2:]
    assert [int(v) for v in hash_strings(series)] == expected


def test_hash_strings_of_nothing() -> None:
    assert hash_strings(pd.Series([], dtype=object)).shape == (0,)
    assert hash_strings(pd.Series([None, None], dtype=object)).tolist() == [0, 0]
    assert hash_strings(pd.Series(["", ""], dtype="category")).tolist() == \
        [_reference_hash("")] * 2


@pytest.mark.parametrize(("n_keys", "n_among"), [(0, 5), (50, 0), (1_000, 20_000),
                                                 (20_000, 1_000)],
                         ids=["no-keys", "empty-among", "few-keys", "many-keys"])
def test_is_in_equals_numpys(n_keys: int, n_among: int) -> None:
    rng = np.random.default_rng(n_keys + n_among)
    among = rng.integers(0, 2**64, n_among, dtype=np.uint64, endpoint=False)
    among = np.concatenate([among, among[: n_among // 3]])  # repeated keys
    keys = np.concatenate([
        rng.choice(among, n_keys // 2) if len(among) else np.zeros(0, np.uint64),
        rng.integers(0, 2**64, n_keys - n_keys // 2, dtype=np.uint64, endpoint=False),
        np.array([np.iinfo(np.uint64).max, 0], dtype=np.uint64)[: min(n_keys, 2)]])
    got = is_in(keys, among)
    assert got.dtype == bool and got.shape == keys.shape
    np.testing.assert_array_equal(got, np.isin(keys, among))
    if n_keys and n_among:
        assert 0 < got.sum() < len(keys)


@pytest.mark.parametrize("kind", ["hashes", "few-distinct", "one-byte-differs", "tiny"])
def test_sort_keys_is_numpys_stable_argsort(kind: str) -> None:
    rng = np.random.default_rng(len(kind))
    keys = {"hashes": rng.integers(0, 2**64, 50_000, dtype=np.uint64, endpoint=False),
            "few-distinct": rng.integers(0, 7, 50_000).astype(np.uint64),
            # every byte but one the same: the passes over equal bytes are skipped
            "one-byte-differs": (np.uint64(0xAB00CDEF01234567)
                                 | (rng.integers(0, 256, 5_000).astype(np.uint64)
                                    << np.uint64(48))),
            "tiny": np.array([np.iinfo(np.uint64).max, 0, 5], dtype=np.uint64)}[kind]
    sorted_keys, order = sort_keys(keys)
    expected = np.argsort(keys, kind="stable")
    np.testing.assert_array_equal(order, expected)
    np.testing.assert_array_equal(sorted_keys, keys[expected])
    assert sort_keys(keys[:1])[1].tolist() == [0] and len(sort_keys(keys[:0])[0]) == 0


def _reference_mix(h: int) -> int:
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _M64
    return h ^ (h >> 31)


def test_hash_rows_by_hand() -> None:
    claim = hash_strings(pd.Series(["c1", "c2", None], dtype=object))
    action = hash_strings(pd.Series([None, "a9", "a9"], dtype=object))
    t_us = np.array([-5, 1_798_761_600_000_000, 0], dtype=np.int64)
    violated = np.array([True, False, True])
    got = hash_rows([claim, action, t_us, violated])
    for i in range(3):
        h = 0
        for v in (int(claim[i]), int(action[i]), int(t_us[i]) & _M64, int(violated[i])):
            h = _reference_mix(((h * 0x9E3779B97F4A7C15) & _M64) ^ v)
        assert int(got[i]) == h


def test_hash_rows_tell_rows_apart() -> None:
    rng = np.random.default_rng(5)
    cols = [rng.integers(0, 50, 20_000), rng.integers(0, 50, 20_000),
            rng.integers(0, 2, 20_000)]
    rows = np.stack(cols, axis=1)
    distinct = len(np.unique(rows, axis=0))
    got = hash_rows(cols)
    assert len(np.unique(got)) == distinct  # equal rows equal, different rows different
    # the order of the columns counts: (a, b) is not (b, a)
    assert not np.array_equal(hash_rows([cols[0], cols[1]]), hash_rows([cols[1], cols[0]]))
    assert hash_rows([]).shape == (0,)
