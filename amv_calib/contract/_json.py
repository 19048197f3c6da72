"""Strict JSON reading: the one parser for every JSON document the product reads from outside.

Python's ``json`` keeps the last of two values given for one key. Another reader of the same
text (a browser, ``jq``, pyarrow) may keep the first, or refuse; an action file with
``"impact_cost_theta": 120.0, ..., "impact_cost_theta": 0.001`` would then mean one thing to
whoever checked it and another to the gate. :func:`loads_strict` refuses such a document,
naming the key. Standard library only: the runtime gate imports it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

__all__ = ["DuplicateKeyError", "loads_line", "loads_strict", "lone_surrogate",
           "surrogate_message"]

#: A ``\u`` escape of a UTF-16 surrogate (D800-DFFF) in JSON text: a cheap filter for the
#: texts whose strings must be checked (:func:`loads_line`). An escaped backslash before it
#: (``"\\ud800"``) also matches: the check of the strings then finds nothing.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")
#: A surrogate code point in a Python string.
_SURROGATE = re.compile("[\ud800-\udfff]")


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


def lone_surrogate(obj: Any) -> str | None:
    """A string (key or value, at any depth) of a parsed JSON value that holds a surrogate
    code point, or None: ``json`` joins a valid pair (``"\\ud83d\\ude00"``) into one
    character and leaves a lone ``"\\ud800"`` as it is, which no UTF-8 text (and no Arrow
    string) can hold."""
    stack = [obj]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if _SURROGATE.search(v):
                return v
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return None


def loads_line(data: str | bytes | bytearray) -> Any:
    """One line of a JSON-lines data file, by the strict rule every reader of it applies.

    RFC 8259 JSON: :func:`loads_strict` without ``NaN``/``Infinity`` literals, the bytes
    valid UTF-8 (a leading byte order mark ignored, as RFC 8259 allows), and no string
    holding a lone surrogate escape (``"\\ud800"``: valid JSON syntax, but no Unicode
    text, so no Arrow string either). A number out of float range is not refused here
    (``1e400`` reads as ``inf``, a 401-digit integer as an ``int``): the reader of a field
    converts it (to ``inf``), and the field's check rejects it.

    Raises
    ------
    ValueError
        Any of these broken (``UnicodeDecodeError`` and ``json.JSONDecodeError`` are
        ``ValueError`` too), naming what broke it.
    RecursionError
        Nested too deeply for the parser.
    """
    text = bytes(data).decode("utf-8-sig") if isinstance(data, (bytes, bytearray)) \
        else data.removeprefix("\ufeff")
    obj = loads_strict(text, allow_nan=False)
    if _SURROGATE_ESCAPE.search(text):
        bad = lone_surrogate(obj)
        if bad is not None:
            raise ValueError(surrogate_message(bad))
    return obj


def surrogate_message(text: str) -> str:
    """The reason given for a string :func:`lone_surrogate` found."""
    shown = text.encode("ascii", "backslashreplace").decode("ascii")
    return (f"a string holds a lone surrogate escape, so it is not Unicode text: "
            f"\"{shown[:60]}\"")
