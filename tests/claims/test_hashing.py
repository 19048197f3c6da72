"""String hashes and the factorisation of action ids by sorting them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import amv_calib.claims._hashing as hashing
from amv_calib.claims import read_uses
from amv_calib.claims._hashing import factorize_strings

_values = st.lists(st.one_of(st.none(), st.sampled_from(["a0", "a1", "b", "é", "a0 "]),
                             st.text(max_size=4)), max_size=60)


def _chunks(values: list[str | None], cuts: list[int]) -> list[Any]:
    edges = sorted({0, len(values), *(c % (len(values) + 1) for c in cuts)})
    return [pa.array(values[a:b], type=pa.string()) for a, b in zip(edges, edges[1:],
                                                                  strict=False)]


@settings(max_examples=200, deadline=None)
@given(values=_values, cuts=st.lists(st.integers(0, 60), max_size=4))
def test_factorize_strings_is_arrows_dictionary_encoding(values: list[str | None],
                                                         cuts: list[int]) -> None:
    chunks = _chunks(values, cuts)
    got = factorize_strings(chunks)
    assert got is not None
    codes, categories = got
    enc = pa.chunked_array(chunks, type=pa.string()).combine_chunks().dictionary_encode()
    want = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    assert codes.tolist() == want.tolist()
    assert categories.to_pylist() == enc.dictionary.to_pylist()


def test_factorize_strings_refuses_a_hash_shared_by_two_strings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def collide(text: Any) -> Any:  # every present value hashes alike
        return np.where(text.is_valid().to_numpy(zero_copy_only=False), np.uint64(7),
                        np.uint64(0)).astype(np.uint64)

    monkeypatch.setattr(hashing, "arrow_string_hashes", collide)
    assert factorize_strings([pa.array(["x", None, "y"])]) is None
    # repeats of one value under one hash are repeats, not a collision
    codes, cats = factorize_strings([pa.array(["x", None]), pa.array(["x"])]) or ((), None)
    assert list(codes) == [0, -1, 0] and cats.to_pylist() == ["x"]


def test_read_uses_codes_action_ids_alike_after_a_collision(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a collision falls back to Arrow's hash table: the same categorical either way
    log = tmp_path / "d.jsonl"
    lines = [f'{{"time":"2026-01-01T00:00:0{i % 10}Z","action_id":"a{i % 3}",'
             f'"premises":[{{"id":"p","claim_id":"c{i}","p":0.1}}]}}' for i in range(7)]
    log.write_text("\n".join(lines) + "\n")
    plain = read_uses(log).records["action_id"]
    monkeypatch.setattr(hashing, "arrow_string_hashes",
                        lambda text: np.full(len(text), np.uint64(7)))
    fallback = read_uses(log).records["action_id"]
    pd.testing.assert_extension_array_equal(plain, fallback)
    assert list(plain.categories) == ["a0", "a1", "a2"]
