"""The exception module's one check of a string option."""

from __future__ import annotations

import pytest

from amv_calib.exceptions import ConfigError, check_choice


@pytest.mark.parametrize(
    ("choices", "message"),
    [(("a",), "x='z' must be 'a'"),
     (("a", "b"), "x='z' must be 'a' or 'b'"),
     (("a", "b", "c"), "x='z' must be 'a', 'b' or 'c'")],
    ids=["one", "two", "three"],
)
def test_check_choice_names_the_field_the_value_and_the_choices(
        choices: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$"):
        check_choice("x", "z", choices)
    check_choice("x", choices[-1], choices)  # a choice passes


def test_check_choice_raises_the_given_error() -> None:
    with pytest.raises(ConfigError, match="mode=None must be 'a' or 'b'"):
        check_choice("mode", None, ("a", "b"), ConfigError)
