"""The one rule for a premise's memory kind (``premise_memory_kind``, ``check_memory_kind``),
on the hand-worked corpus every reader of a kind is held to (``tests/kind_corpus.py``)."""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest
from kind_corpus import CASES, IDS

from amv_calib.contract import (
    MEMORY_KIND_FIELDS,
    MEMORY_KIND_MAX_CHARS,
    check_memory_kind,
    premise_memory_kind,
)
from amv_calib.contract._features import KIND_WHITESPACE


@pytest.mark.parametrize(("fields", "verdict"), [c[1:] for c in CASES], ids=IDS)
def test_premise_memory_kind_gives_each_verdict(fields: dict[str, Any],
                                                verdict: tuple[str, Any]) -> None:
    premise = {"id": "p1", "source_trust_score": 0.5, **fields}
    what, expected = verdict
    if what == "error":
        with pytest.raises(ValueError, match=expected):
            premise_memory_kind(premise)
    else:
        assert premise_memory_kind(premise) == expected


def test_the_spellings_are_checked_snake_first() -> None:
    assert MEMORY_KIND_FIELDS == ("memory_kind", "memoryKind")
    # both bad: the snake_case one is named
    with pytest.raises(ValueError, match=r"^memory_kind=1 "):
        premise_memory_kind({"memory_kind": 1, "memoryKind": "  "})


def test_other_keys_are_not_read() -> None:
    # the contract's rule reads the premise's own two fields, not a nested claim's
    assert premise_memory_kind({"claim": {"memory_kind": "event"}, "kind": "x",
                                "memory_kind_evaluated_as": "other"}) is None


@pytest.mark.parametrize(("value", "field", "message"), [
    (None, "memory_kind", r"^memory_kind=None is not a string"),
    (7, "claim column memory_kind", r"^claim column memory_kind=7 is not a string"),
    ("", "memoryKind", r"^memoryKind='' is blank"),
    ("x" * (MEMORY_KIND_MAX_CHARS + 1), "memory_kind", r"has 65 characters, more than 64$"),
], ids=["none", "number-named-field", "empty", "too-long"])
def test_check_memory_kind_names_the_field(value: Any, field: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_memory_kind(value, field)


def test_check_memory_kind_returns_the_value_itself() -> None:
    kind = "pr\u00e9f\u00e9rence"
    assert check_memory_kind(kind) is kind


def test_the_whitespace_is_unicode_white_space() -> None:
    # Unicode's White_Space property (PropList.txt), which JavaScript's \p{White_Space}
    # reads: Python's str.isspace() less the four information separators U+001C..U+001F
    isspace = {chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()}
    assert KIND_WHITESPACE == isspace - {"\x1c", "\x1d", "\x1e", "\x1f"}
    assert len(KIND_WHITESPACE) == 25
    assert "\ufeff" not in KIND_WHITESPACE and "\u200b" not in KIND_WHITESPACE


def test_the_messages_quote_a_long_kind_shortened() -> None:
    with pytest.raises(ValueError) as info:
        check_memory_kind("ab" * 40)
    assert str(info.value) == f"memory_kind={'ab' * 20!r}... has 80 characters, more than 64"
    assert re.search("ab" * 21, str(info.value)) is None
