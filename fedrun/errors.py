"""Errors a user can fix. The CLI prints their message (no traceback) and exits with 2."""

from __future__ import annotations

from typing import Any, Iterable

SHOWN_CHARS = 300  # of a refused value in its error message (paths and URIs stay whole)


class FedrunError(Exception):
    """Base class: an error caused by the user's input, with a message that says how to fix it."""


class ConfigError(FedrunError):
    """A config field holds a value that is not allowed."""

    def __init__(self, field: str, value: Any, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        shown = repr(value)
        if len(shown) > SHOWN_CHARS:  # a 600-character name: its start and its size are enough
            shown = f"{shown[:SHOWN_CHARS]}… ({len(str(value))} characters)"
        super().__init__(f"{field}={shown} is not allowed: expected {allowed}.")

    def __reduce__(self) -> tuple[type, tuple[str, Any, str]]:  # pickled by its fields (fedrun.track.recorder)
        return ConfigError, (self.field, self.value, self.allowed)

    def prefixed(self, group: str) -> "ConfigError":
        field = self.field if self.field.startswith(group + ".") else f"{group}.{self.field}"
        return ConfigError(field, self.value, self.allowed)


class DataError(FedrunError):
    """A data file is missing, corrupt or malformed, or the data left after filtering is unusable."""


def check(ok: bool, field: str, value: Any, allowed: str) -> None:
    """Raise ConfigError(field, value, allowed) unless ok."""
    if not ok:
        raise ConfigError(field, value, allowed)


SEED_LIMIT = 2 ** 32  # every random stream is keyed by a seed's low 32 bits (``fedrun.core.seeding.derive_seed``)


def check_seed(field: str, value: int) -> None:
    """One rule for every seed: an integer in [0, 2^32). A larger one would name a different run while giving the
    same numbers as its low 32 bits (the streams read those), so it is refused, not wrapped."""
    check(0 <= value < SEED_LIMIT, field, value, "an integer in [0, 2^32): every seed keys 32-bit streams")


def check_choice(field: str, value: Any, choices: Iterable[Any]) -> None:
    choices = list(choices)
    check(value in choices, field, value, "one of " + ", ".join(map(str, choices)))


def check_positive(field: str, value: float, *, allow_zero: bool = False) -> None:
    ok = value >= 0 if allow_zero else value > 0
    check(ok, field, value, "a number >= 0" if allow_zero else "a number > 0")


def check_fraction(field: str, value: float, *, closed_low: bool = True, closed_high: bool = False) -> None:
    lo_ok = value >= 0 if closed_low else value > 0
    hi_ok = value <= 1 if closed_high else value < 1
    lo, hi = ("[" if closed_low else "("), ("]" if closed_high else ")")
    check(lo_ok and hi_ok, field, value, f"a number in {lo}0, 1{hi}")
