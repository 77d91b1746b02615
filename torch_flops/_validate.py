"""Argument checks shared by the public entry points, so that the same mistake gets the same error
everywhere: a value of the wrong type is a ``TypeError``, a value of the right type but out of
range is a ``ValueError``; both name the parameter."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["check_bool", "check_choice", "check_depth", "check_int", "check_names"]


def check_int(name: str, value: Any, minimum: int) -> int:
    """``value`` is an ``int`` (not a bool) and ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value}")
    return value


def check_depth(name: str, value: Any) -> int:
    """A module depth: an int >= 0, or -1 for every level (or the innermost modules)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int >= 0, or -1, got {type(value).__name__} {value!r}")
    if value < -1:
        raise ValueError(f"{name} must be an int >= 0, or -1, got {value}")
    return value


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return value


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> Any:
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def check_names(name: str, value: Any, example: str) -> tuple[str, ...]:
    """An iterable of str (a bare str is refused: it would be iterated letter by letter)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be an iterable of names (str), e.g. {example}; got {value!r}")
    names = tuple(value)
    bad = [v for v in names if not isinstance(v, str)]
    if bad:
        raise TypeError(f"{name} must be an iterable of names (str), e.g. {example}; got {bad[0]!r}")
    return names
