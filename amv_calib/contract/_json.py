"""Strict JSON reading: the one parser for every JSON document the product reads from outside.

Python's ``json`` keeps the last of two values given for one key. Another reader of the same
text (a browser, ``jq``, pyarrow) may keep the first, or refuse; an action file with
``"impact_cost_theta": 120.0, ..., "impact_cost_theta": 0.001`` would then mean one thing to
whoever checked it and another to the gate. :func:`loads_strict` refuses such a document,
naming the key. Standard library only: the runtime gate imports it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["DuplicateKeyError", "loads_strict"]


class DuplicateKeyError(ValueError):
    """A JSON object gives one key twice."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(f"key {key!r} appears twice in one object")
            seen.add(key)
    return out


def _refuse_constant(token: str) -> Any:
    raise ValueError(f"non-finite number {token!r} is not allowed")


def loads_strict(data: str | bytes | bytearray, *, allow_nan: bool = True,
                 parse_int: Callable[[str], Any] | None = None) -> Any:
    """``json.loads`` that refuses an object giving one key twice.

    Parameters
    ----------
    data : str or bytes
        The JSON text (bytes are decoded as UTF-8, a BOM refused, as ``json.loads`` does).
    allow_nan : bool, default True
        Accept the tokens ``NaN``, ``Infinity`` and ``-Infinity`` (as ``json.loads`` does);
        False refuses them with a ``ValueError`` naming the token.
    parse_int : callable, optional
        Called with the text of every integer (as ``json.loads``'s own); it may refuse one
        by raising ``ValueError``.

    Raises
    ------
    DuplicateKeyError
        An object gives a key twice (a ``ValueError`` naming the key).
    json.JSONDecodeError, UnicodeDecodeError, RecursionError
        As ``json.loads``: not JSON, not UTF-8, or nested too deeply for the parser.
    """
    if allow_nan:
        return json.loads(data, object_pairs_hook=_no_duplicates, parse_int=parse_int)
    return json.loads(data, object_pairs_hook=_no_duplicates, parse_constant=_refuse_constant,
                      parse_int=parse_int)
