"""Checks for the values of server-side settings (`EnvironmentKind.from_config`)."""

from __future__ import annotations


def whole_number(setting: str, value: object, least: int = 0, most: int | None = None) -> int:
    """`value` (an int, or its text from `--set` / a YAML file) as an int in [least, most]; ValueError naming `setting`.

    Booleans, fractions and signs are refused: `True` is not a count.
    """
    text = value.strip() if isinstance(value, str) else str(value)
    number = int(text) if text.isascii() and text.isdecimal() and not isinstance(value, bool) else None
    if number is None or number < least or (most is not None and number > most):
        bounds = f"from {least} to {most}" if most is not None else f"of at least {least}"
        raise ValueError(f"{setting} must be a whole number {bounds}, not {value!r}")
    return number
