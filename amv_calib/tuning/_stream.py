"""The counter-based answer stream of replays: every verifier answer is drawn from a
uniform keyed by ``(seed, instance_id, verifier_id, premise_id, call_index)``, so every
policy that calls the same verifier on the same premise sees the same answer (common random
numbers) and a replay is byte-identical for identical inputs.

numpy and the standard library only.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Final, cast

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    pass


FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]
U64Array = NDArray[np.uint64]

_MASK64: Final = (1 << 64) - 1
_GOLDEN: Final = 0x9E3779B97F4A7C15
_M1: Final = 0xBF58476D1CE4E5B9
_M2: Final = 0x94D049BB133111EB


# -- the counter-based answer stream ---------------------------------------------------------


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(),
                          "little")


def _mix_int(x: int) -> int:
    x &= _MASK64
    x = ((x ^ (x >> 30)) * _M1) & _MASK64
    x = ((x ^ (x >> 27)) * _M2) & _MASK64
    return x ^ (x >> 31)


def _mix(x: U64Array) -> U64Array:
    # splitmix64's finaliser; uint64 array arithmetic wraps modulo 2**64 silently.
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(_M1)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(_M2)
    return cast(U64Array, x ^ (x >> np.uint64(31)))


def _stream_key(inst: U64Array, pair: U64Array) -> U64Array:
    # key(i, v, j) = mix(h(instance_id) + phi * mix(h(verifier_id \x1f premise_id)))
    return _mix(inst + np.uint64(_GOLDEN) * _mix(pair))


def _check_seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not (
        0 <= int(seed) <= _MASK64
    ):
        raise ValueError(f"seed={seed!r} must be an integer in [0, 2**64)")
    return int(seed)


def answer_uniform(
    seed: int, instance_id: str, verifier_id: str, premise_id: str, call_index: int
) -> float:
    """The uniform number behind one verifier answer, in plain Python.

    ``u = mix(mix(key XOR mix(seed + phi)) + (call_index + 1) * phi) / 2**64`` (top 53 bits)
    with ``key = mix(h(instance_id) + phi * mix(h(verifier_id \\x1f premise_id)))``, where
    ``h`` is the first 8 bytes (little-endian) of blake2b, ``mix`` is splitmix64's finaliser
    and ``phi = 0x9E3779B97F4A7C15`` (all modulo 2**64). The answer is correct iff ``u < r``.
    :func:`stream_uniform` is the vectorised twin.
    """
    s = _mix_int(_check_seed(seed) + _GOLDEN)
    key = _mix_int(
        _hash64(instance_id) + _GOLDEN * _mix_int(_hash64(f"{verifier_id}\x1f{premise_id}"))
    )
    x = _mix_int(key ^ s)
    x = _mix_int(x + (int(call_index) + 1) * _GOLDEN)
    return (x >> 11) * 2.0**-53


def stream_uniform(keys: U64Array, seed: int, call_index: IntArray | int) -> FloatArray:
    """Vectorised :func:`answer_uniform` from precomputed stream keys."""
    s = np.uint64(_mix_int(_check_seed(seed) + _GOLDEN))
    k = np.atleast_1d(np.asarray(keys, dtype=np.uint64))
    c = np.broadcast_to(np.asarray(call_index, dtype=np.uint64), k.shape)
    x = _mix(k ^ s)
    x = _mix(x + (c + np.uint64(1)) * np.uint64(_GOLDEN))
    return (x >> np.uint64(11)).astype(np.float64) * 2.0**-53

