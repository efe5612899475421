"""Kubernetes resource quantities ("500m", "16Gi", "1e3") as exact numbers."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from functools import lru_cache

_SUFFIXES: dict[str, Decimal] = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


# Beyond this a quantity means nothing to a scheduler, and turning "1e999999999" into an int
# would take the process hours: such values are refused before any arithmetic.
MAX_EXPONENT = 30


class QuantityError(ValueError):
    pass


def parse_quantity(value: object) -> Decimal:
    """Parse a quantity the way the apiserver does; raise QuantityError when it would not."""
    number = _parse(value)
    if number and number.adjusted() > MAX_EXPONENT:
        raise QuantityError(f"quantity out of range: {value!r}")
    return number


def _parse(value: object) -> Decimal:
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return Decimal(str(value))
    if not isinstance(value, str) or not value or len(value) > 64:
        raise QuantityError(f"not a quantity: {value!r}")
    text = value.strip()
    for suffix in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"):
        if text.endswith(suffix):
            return _number(text[: -len(suffix)], value) * _SUFFIXES[suffix]
    if text[-1] in "numkMGTPE" and not _is_exponent(text):
        return _number(text[:-1], value) * _SUFFIXES[text[-1]]
    return _number(text, value)


def _is_exponent(text: str) -> bool:
    # "1E" is exa, "1e3" / "1E3" is scientific notation
    head, _, tail = text.replace("E", "e").rpartition("e")
    return bool(head) and tail.lstrip("+-").isdigit()


def _number(text: str, original: str) -> Decimal:
    if not text or text[0] not in "+-.0123456789":
        raise QuantityError(f"not a quantity: {original!r}")
    try:
        number = Decimal(text)
    except InvalidOperation:
        raise QuantityError(f"not a quantity: {original!r}") from None
    if not number.is_finite() or number.adjusted() > MAX_EXPONENT:
        raise QuantityError(f"not a quantity: {original!r}")
    return number


@lru_cache(maxsize=4096)
def quantity_of(text: str) -> Decimal | None:
    """A quantity string's value, or None when it is not one; cached, since the same few strings
    ("1", "8", "16Gi") recur on every request."""
    try:
        return parse_quantity(text)
    except QuantityError:
        return None
