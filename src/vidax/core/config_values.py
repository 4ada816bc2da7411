"""Type checks of ``config.json`` values against a configuration dataclass's annotations.

A hand-edited or foreign config with ``"num_attention_heads": "two"`` would otherwise build a configuration
whose arithmetic goes wrong far from the cause (``"two" * 128`` is a string); the checks here name the key.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import types
import typing
from pathlib import Path
from typing import Any

from vidax.checkpoint.errors import CheckpointError


def read_json(path: str | Path) -> dict:
    """A ``config.json``-like file's object.

    Raises:
      CheckpointError: the file is not valid JSON, or holds something other than an object (both named).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return data


def config_values(cls: type, config: dict[str, Any], source: str) -> dict[str, Any]:
    """The entries of ``config`` that are fields of dataclass ``cls``, checked against the fields' annotations.

    Args:
      cls: a configuration dataclass (``int``, ``float``, ``bool``, ``str``, ``None`` unions, tuples and lists
        of those; other annotations are not checked).
      config: a parsed ``config.json``; keys that are not fields are left out (as the reference libraries
        ignore them).
      source: what the config is, for the message (e.g. ``"transformer config"``).

    Raises:
      ValueError: every value whose type does not match its field, named with the expected type.
    """
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in config.items() if k in names}
    problems = [f"{k}={v!r} should be {_describe(hints[k])}" for k, v in values.items()
                if k in hints and not _matches(v, hints[k])]
    if problems:
        raise ValueError(f"{source}: " + "; ".join(problems) + " (fix these values in its config.json)")
    return values


def _matches(value: Any, expected: Any) -> bool:
    origin, args = typing.get_origin(expected), typing.get_args(expected)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if origin in (tuple, list):
        if not isinstance(value, (tuple, list)):
            return False
        items = [a for a in args if a is not Ellipsis]
        return all(_matches(v, items[min(i, len(items) - 1)]) for i, v in enumerate(value)) if items else True
    if origin is typing.Literal:
        return value in args
    if expected is type(None):
        return value is None
    if expected is bool:
        return isinstance(value, bool)
    if expected is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if expected is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if expected is str:
        return isinstance(value, str)
    return True  # (dicts, nested configs, Any: not checked here)


def _describe(expected: Any) -> str:
    origin, args = typing.get_origin(expected), typing.get_args(expected)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if origin in (tuple, list):
        items = [_describe(a) for a in args if a is not Ellipsis]
        return f"a list of {items[0]}s" if items else "a list"
    if expected is type(None):
        return "null"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return names.get(expected, getattr(expected, "__name__", str(expected)))
