"""Ranges and choices a config value must lie in, declared on a parameter's type: ``batch_size: Positive``.

:mod:`retrieval_zoo.config_check` reads them from the ``Annotated`` types of every ``_target_``'s parameters and
rejects a value outside, naming the key, before anything is loaded; a constructor need not check them again.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Annotated


@dataclass(frozen=True)
class AtLeast:
    """A lower bound on a number (inclusive)."""

    minimum: float

    def accepts(self, value: object) -> bool:
        """Whether ``value`` is at least :attr:`minimum` (a non-number is left to the type check)."""
        return not isinstance(value, int | float) or value >= self.minimum

    def __str__(self) -> str:
        return f"≥ {self.minimum:g}"


Positive = Annotated[int, AtLeast(1)]  # a count that must be at least 1 (batch sizes, depths)
NonNegative = Annotated[int, AtLeast(0)]  # a count that may be 0 (held-out queries, workers)


def require_choice(name: str, value: object, choices: object) -> None:
    """``value`` must be one of the values of the ``Literal`` type ``choices`` (what config_check also enforces).

    Raises:
        ValueError: Naming ``name``, the allowed values and ``value``.
    """
    allowed = typing.get_args(choices)
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, not {value!r}")
