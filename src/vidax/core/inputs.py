"""Checks of a generation call's arguments, shared by every pipeline and run before any compute.

Each raises an error that names the argument and the fix. Sizes and frame counts are per family (the
``check_inputs`` of each pipeline module); what is checked here is common to all of them: the prompt
batch, the seed, guidance scales, weight dtypes, and the decoded video's values.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

#: Seeds are drawn with ``jax.random.key(seed)``, which keeps 32 bits without ``jax_enable_x64``: a larger seed
#: would silently give the noise of ``seed mod 2**32``, so seeds are limited to ``[0, SEED_LIMIT)``.
SEED_LIMIT = 2**32
#: Weight dtypes a pipeline runs (norms, embedders and AdaLN tables stay float32 whichever is chosen).
WEIGHT_DTYPES = ("bfloat16", "float32")


def prompt_batch(prompt: Any, negative_prompt: Any = None) -> tuple[list[str], list[str]]:
    """``(prompts, negatives)`` as lists of equal length, from a prompt or a list of prompts.

    Args:
      prompt: a string or a non-empty list/tuple of strings (the batch).
      negative_prompt: None (``""`` for every prompt, as diffusers), a string (used for every prompt), or
        one string per prompt.

    Raises:
      ValueError: an empty batch, a prompt or negative prompt that is not a string, or a different number
        of negative prompts than prompts.
    """
    prompts = _strings(prompt, "prompt")
    if negative_prompt is None:
        negatives = [""] * len(prompts)
    elif isinstance(negative_prompt, str):
        negatives = [check_text(negative_prompt, "negative_prompt")] * len(prompts)
    else:
        negatives = _strings(negative_prompt, "negative_prompt")
    if len(negatives) != len(prompts):
        raise ValueError(f"{len(negatives)} negative prompts for {len(prompts)} prompts; pass one per prompt")
    return prompts, negatives


def _strings(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{name} must be a string or a list of strings, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{name} is an empty list: pass at least one string")
    bad = [i for i, v in enumerate(value) if not isinstance(v, str)]
    if bad:
        raise ValueError(f"{name}[{bad[0]}] is {type(value[bad[0]]).__name__}, not a string")
    for v in value:
        check_text(v, name)
    return list(value)


def check_text(text: str, what: str) -> str:
    """``text`` if it is valid Unicode; a prompt from a shell holding bytes that are not UTF-8 arrives with lone
    surrogates (Python's ``surrogateescape``), which no tokenizer takes.

    Raises:
      ValueError: naming ``what`` and the byte position.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{what} holds bytes that are not UTF-8 (at character {e.start}); pass UTF-8 text") from None
    return text


def is_integer(value: Any) -> bool:
    """Whether ``value`` is an integer (Python or NumPy), booleans excluded."""
    return not isinstance(value, bool) and isinstance(value, numbers.Integral)


def integer_problems(**values: Any) -> list[str]:
    """One message per keyword whose value is not an integer (e.g. ``height=32.0``), for a size check to list."""
    return [f"{name}={v!r} must be an integer" for name, v in values.items() if not is_integer(v)]


def check_video_sizes(height: Any, width: Any, num_frames: Any, *, temporal: int, multiple: int,
                      release_frames: int, why: str = "") -> None:
    """Sizes of a video model whose VAE compresses time ``temporal``x after the first frame and whose latent grid
    needs pixel sizes in multiples of ``multiple``: ``num_frames = temporal * k + 1``, height and width positive
    multiples of ``multiple`` (None: chosen later, e.g. from an image).

    Args:
      release_frames: the release's frame count, named in the message.
      why: what makes ``multiple`` the multiple (e.g. ``" (the VAE's 16x compression)"``), for the message.

    Raises:
      ValueError: every problem, with the nearest valid values.
    """
    given = {k: v for k, v in (("num_frames", num_frames), ("height", height), ("width", width)) if v is not None}
    problems = integer_problems(**given)
    if is_integer(num_frames) and (num_frames < 1 or (num_frames - 1) % temporal):
        lo = max(1, (int(num_frames) - 1) // temporal * temporal + 1)
        problems.append(f"num_frames={num_frames} must be of the form {temporal}k+1 (the VAE compresses time "
                        f"{temporal}x after the first frame; {release_frames} for the release): use {lo} or "
                        f"{lo + temporal}")
    for name, v in (("height", height), ("width", width)):
        if v is not None and is_integer(v) and (v < multiple or v % multiple):
            lo = int(v) // multiple * multiple
            problems.append(f"{name}={v} must be a positive multiple of {multiple}{why}: use "
                            + (f"{lo} or {lo + multiple}" if lo >= multiple else f"{multiple}"))
    if problems:
        raise ValueError("; ".join(problems))


def check_seed(seed: Any) -> int:
    """The seed as an ``int`` in ``[0, SEED_LIMIT)``.

    Raises:
      ValueError: not an integer (floats and booleans included), negative, or ``2**32`` or more.
    """
    if not is_integer(seed):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    seed = int(seed)
    if seed < 0:
        raise ValueError(f"seed={seed} is negative; use a seed in [0, 2**32 - 1]")
    if seed >= SEED_LIMIT:
        raise ValueError(f"seed={seed} is outside [0, 2**32 - 1]: JAX seeds have 32 bits (this one would repeat the "
                         f"noise of seed {seed % SEED_LIMIT}); use a seed in that range")
    return seed


def check_guidance(value: Any, name: str = "guidance_scale") -> float:
    """A guidance scale as a finite ``float`` (at 1 or below guidance is off, as in diffusers).

    Raises:
      ValueError: not a real number, or NaN / infinite.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(float(value)):
        raise ValueError(f"{name}={value} is not finite; use a finite scale (e.g. 5.0; 1.0 or below turns CFG off)")
    return float(value)


def check_dtype(dtype: Any, name: str = "dtype") -> np.dtype:
    """A weight dtype (``"bfloat16"``, ``"float32"``, or the NumPy / JAX dtype objects) as a NumPy dtype.

    Raises:
      ValueError: any other dtype (float16 included: the families run in bf16 or fp32), or no dtype at all.
    """
    import jax.numpy as jnp

    try:
        resolved = np.dtype(jnp.dtype(dtype))
    except TypeError:
        resolved = None
    if resolved is None or resolved.name not in WEIGHT_DTYPES:
        raise ValueError(f"{name}={dtype!r} is not supported; use one of {', '.join(WEIGHT_DTYPES)}")
    return resolved


def check_finite_video(video: np.ndarray) -> None:
    """Raise if a decoded video holds NaN (or infinite) values, instead of writing black frames.

    One summed pass over the array (NaN and infinities propagate into the float64 sum); only a sum that is
    not finite is checked element by element (huge finite values can overflow a sum).

    Raises:
      FloatingPointError: non-finite values, with what usually causes them.
    """
    if not math.isfinite(float(np.sum(video, dtype=np.float64))) and not np.isfinite(video).all():
        raise FloatingPointError(
            "the generated video holds NaN or infinite values (it would be written as black frames): the weights or a "
            "configuration value produce non-finite numbers (vidax inspect checks names, shapes and dtypes, not "
            "values); try dtype float32 if the run was bfloat16")
