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
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:  # configuration files are a few KiB (an index: a few MiB)
        raise CheckpointError(f"{path}: {size:,} bytes is not a configuration file (at most {MAX_JSON_BYTES:,}); "
                              "re-download the checkpoint")
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path}: not UTF-8 text (byte {e.start}); re-download the checkpoint") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from None
    except RecursionError:
        raise CheckpointError(f"{path}: JSON nested too deeply to be a configuration file") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


#: The largest JSON file read as a configuration or index (the released indexes are below 1 MiB).
MAX_JSON_BYTES = 64 << 20


def check_class_name(config: dict[str, Any], expected: str, component: str) -> None:
    """Refuse a ``config.json`` written for another class (another family's transformer behind this family's
    pipeline: a hand-edited ``model_index.json``, two downloads merged), before its keys fail as unrelated value
    errors far from the cause. A config without ``_class_name`` (diffusers' in-memory ``.config``) passes.

    Args:
      config: a parsed ``config.json``.
      expected: the reference library's class name (``"WanTransformer3DModel"``).
      component: the folder the file is in, for the message (``"transformer"``, ``"vae"``).

    Raises:
      ValueError: ``_class_name`` present and not ``expected``; both are named (the found one cut to 80 characters).
    """
    name = config.get("_class_name")
    if name is not None and name != expected:
        raise ValueError(f"{component} config.json is for {str(name)[:80]!r}, not {expected!r}")


def config_values(cls: type, config: dict[str, Any], source: str) -> dict[str, Any]:
    """The entries of ``config`` that are fields of dataclass ``cls``, checked against the fields' annotations.

    Args:
      cls: a configuration dataclass (``int``, ``float``, ``bool``, ``str``, ``None`` unions, tuples and lists
        of those; other annotations are not checked).
      config: a parsed ``config.json``; keys that are not fields are left out (as the reference libraries
        ignore them).
      source: what the config is, for the message (e.g. ``"transformer config"``).

    Raises:
      ValueError: every value whose type does not match its field, named with the expected type, and every size or
        count of :data:`POSITIVE_FIELDS` below 1.
    """
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in config.items() if k in names}
    problems = [f"{k}={v!r} should be {_describe(hints[k])}" for k, v in values.items()
                if k in hints and not _matches(v, hints[k])]
    problems += [f"{k}={v!r} should be a positive integer" for k, v in values.items()
                 if k in POSITIVE_FIELDS and _matches(v, int) and v < 1]
    if problems:
        raise ValueError(f"{source}: " + "; ".join(problems) + " (fix these values in its config.json)")
    return values


#: Sizes and counts (in the reference libraries' names) that are at least 1 in every configuration: a 0 or a
#: negative value would otherwise surface far away (``num_layers: -1`` as an offload-chunk error, 0 heads as a wall
#: of shape mismatches).
POSITIVE_FIELDS = frozenset({
    "num_layers", "num_attention_heads", "attention_head_dim", "num_heads", "num_hidden_layers", "d_model", "d_kv",
    "d_ff", "dim", "ffn_dim", "hidden_size", "intermediate_size", "in_channels", "out_channels", "latent_channels",
    "z_dim", "base_dim", "vocab_size", "patch_size", "patch_size_t", "text_dim", "caption_channels",
    "text_embed_dim", "time_embed_dim", "freq_dim", "image_size", "num_channels", "cross_attention_dim",
    "temporal_compression_ratio", "max_text_seq_length", "sample_height", "sample_width", "sample_frames",
})


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
        items = [a for a in args if a is not Ellipsis]
        plural = {bool: "true/false values", int: "integers", float: "numbers", str: "strings"}
        return f"a list of {plural.get(items[0], _describe(items[0]))}" if items else "a list"
    if expected is type(None):
        return "null"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return names.get(expected, getattr(expected, "__name__", str(expected)))
