"""Errors raised while reading and translating checkpoints, and short quotes of untrusted values for them."""


class CheckpointError(ValueError):
    """A checkpoint file or folder is missing, corrupt, or does not match the model.

    The message always names the file (or key) and how to fix it.
    """


_SCALARS = (str, bytes, bytearray, bool, int, float, type(None))


def excerpt(value: object, limit: int = 80) -> str:
    """A one-line description of ``value`` from an untrusted file, at most a few times ``limit`` characters.

    Strings and bytes are quoted (``repr``) up to ``limit`` characters of their text, their length
    given past that; numbers are written out unless wider than 256 bits; a list or tuple of at most
    8 such scalars is written out item by item; anything else is named by its type (and length),
    never ``repr``'d whole: a hostile checkpoint's values can be gigabytes long (a 1 GB record
    quoted into an error line), nested past the recursion limit, or ints too long for ``str``.
    Costs O(limit), whatever the value.
    """
    if isinstance(value, (str, bytes, bytearray)):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}... ({len(value)} {'characters' if isinstance(value, str) else 'bytes'})"
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if value.bit_length() <= 256 else f"an integer of {value.bit_length()} bits"
    if type(value) in (tuple, list) and len(value) <= 8 and all(type(v) in _SCALARS for v in value):
        items = ", ".join(excerpt(v, 20) for v in value)
        return f"({items}{',' if len(value) == 1 else ''})" if type(value) is tuple else f"[{items}]"
    try:
        size = f" of length {len(value)}"  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - any object; its length is only a courtesy
        size = ""
    return f"a {type(value).__name__}{size}"


def name_excerpt(name: str, limit: int = 80) -> str:
    """A name from an untrusted file (record, tensor, global) for an error line: unquoted, control
    characters escaped as ``repr`` does (so no name can start a new line), cut to ``limit`` characters."""
    text = repr(name[:limit])[1:-1]
    return text if len(name) <= limit else f"{text}... ({len(name)} characters)"


def clip(message: str, limit: int = 2000) -> str:
    """``message`` cut to ``limit`` characters (a last guard on error lines that quote file contents)."""
    return message if len(message) <= limit else f"{message[:limit]}... ({len(message) - limit} more characters)"
