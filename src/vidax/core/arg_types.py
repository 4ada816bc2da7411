"""Parsers of command-line values, shared by the CLI's common flags and the families' own settings.

Each takes the flag's text and returns the value, or raises ``argparse.ArgumentTypeError`` (argparse then prints
``vidax generate: error: argument --flag: <message>`` and exits 2) or ``ValueError`` (argparse's "invalid <name>
value"; each function's ``__name__`` reads as the expected type).
"""

from __future__ import annotations

import argparse
import math


def positive_int(text: str) -> int:
    """An integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def finite_float(text: str) -> float:
    """A finite number (``nan`` and ``inf`` refused)."""
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be zero or positive, got {text}")
    return value


def fps(text: str) -> int:
    """Frames per second: an integer from 1 to 1000."""
    value = positive_int(text)
    if value > 1000:
        raise argparse.ArgumentTypeError(f"must be at most 1000 frames per second, got {text}")
    return value


def seed(text: str) -> int:
    """A noise seed in ``[0, 2**32)`` (:func:`vidax.core.inputs.check_seed`)."""
    from vidax.core.inputs import check_seed

    value = int(text)  # (a ValueError here: argparse's "invalid seed value")
    try:
        return check_seed(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def directory(text: str) -> str:
    """A directory path that is not empty text."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: pass a directory, or --no-compile-cache to turn the cache off")
    return text


def timesteps(text: str) -> tuple[float, ...]:
    """Comma-separated timesteps in ``[0, 1000]`` (``1000,993,987``)."""
    items = text.strip().rstrip(",").split(",")
    if any(not v.strip() for v in items):  # "1000,,5": a missing value, not two steps
        raise argparse.ArgumentTypeError(f"must be comma-separated numbers in [0, 1000], got {text!r}")
    values = tuple(float(v) for v in items)
    if not values or not all(math.isfinite(v) and 0 <= v <= 1000 for v in values):
        raise argparse.ArgumentTypeError(f"must be comma-separated numbers in [0, 1000], got {text!r}")
    return values


def fraction(text: str) -> float:
    """A number in ``[0, 1]``."""
    value = finite_float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 1, got {text}")
    return value


#: The most devices ``vidax plan --devices`` simulates on the host's CPU (each is an XLA CPU device with its own
#: threads; 4096 plan in about 20 s, 65536 exhausted the host's threads).
MAX_PLANNED_DEVICES = 4096


def device_count(text: str) -> int:
    """A device count from 1 to :data:`MAX_PLANNED_DEVICES`."""
    value = positive_int(text)
    if value > MAX_PLANNED_DEVICES:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_PLANNED_DEVICES} (the devices are simulated on this "
                                         f"host's CPU), got {text}")
    return value


def chunk_sizes(text: str) -> list[int]:
    """Comma-separated offload chunk sizes (positive integers up to 1024 blocks), or ``none`` (an empty list)."""
    if text.strip().lower() == "none":
        return []
    items = [v.strip() for v in text.split(",") if v.strip()]
    if not items or any(not (v.isascii() and v.isdigit() and len(v) <= 4 and 1 <= int(v) <= 1024) for v in items):
        raise argparse.ArgumentTypeError(f"must be comma-separated block counts from 1 to 1024 (e.g. 8,4) or "
                                         f"'none', got {text[:80]!r}")
    return [int(v) for v in items]


# argparse reports a type function's ValueError as "invalid <name> value"; these names read as the expected type.
positive_int.__name__ = "positive integer"
finite_float.__name__ = positive_float.__name__ = non_negative_float.__name__ = fraction.__name__ = "number"
seed.__name__ = "seed"
fps.__name__ = "frame rate"
timesteps.__name__ = "timesteps"
device_count.__name__ = "device count"
chunk_sizes.__name__ = "chunk sizes"
