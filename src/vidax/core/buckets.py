"""Size buckets: the output sizes a model family generates at for an image's (or a requested) aspect ratio.

The HunyuanVideo releases (13B image-to-video, 1.5) choose a video's size from a list of buckets of about one area
(``generate_crop_size_list``) by the closest aspect ratio on the image's side of square (``get_closest_ratio``);
:func:`crop_size_buckets` and :func:`closest_bucket` restate the two, and each family gives its base size, stride and
tie rule.
"""

from __future__ import annotations


def crop_size_buckets(base_size: int, stride: int, max_ratio: float = 4.0) -> list[tuple[int, int]]:
    """Every ``(height, width)`` of whole ``stride`` cells whose cell count stays within ``(base_size / stride)^2``,
    aspect ratio at most ``max_ratio``, in the reference's order (``generate_crop_size_list`` of HunyuanVideo-I2V
    and HunyuanVideo-1.5 ``hyvideo/utils/data_utils.py``).

    Raises:
      ValueError: ``base_size < stride``, ``stride < 1`` or ``max_ratio < 1``.
    """
    if base_size < stride or stride < 1 or max_ratio < 1:
        raise ValueError(f"crop_size_buckets: base_size={base_size} must be >= stride={stride} >= 1, "
                         f"max_ratio={max_ratio} >= 1")
    cells = round((base_size / stride) ** 2)
    out = []
    a, b = cells, 1
    while a > 0:
        if max(a, b) / min(a, b) <= max_ratio:
            out.append((a * stride, b * stride))
        if (b + 1) * a <= cells:
            b += 1
        else:
            a -= 1
    return out


def closest_bucket(height: float, width: float, buckets: list[tuple[int, int]], *,
                   wide_takes_equal: bool) -> tuple[int, int]:
    """The bucket whose aspect ratio ``h / w`` (rounded to 5 places) is closest to ``height / width`` among those
    on the same side of square: ratios not above it for a portrait or square size, ratios above it (or, with
    ``wide_takes_equal``, not below it) for a landscape one (``get_closest_ratio``: HunyuanVideo-I2V compares
    ``> 0``, HunyuanVideo-1.5 ``>= 0``). Beyond the most extreme bucket the references fail; the nearest extreme is
    taken.

    Raises:
      ValueError: a non-positive size.
    """
    if not (height > 0 and width > 0):
        raise ValueError(f"size {width}x{height} must be positive")
    aspect = float(height) / float(width)
    diffs = [(i, round(h / w, 5) - aspect) for i, (h, w) in enumerate(buckets)]
    if aspect >= 1:
        side = [(i, d) for i, d in diffs if d <= 0]
    else:
        side = [(i, d) for i, d in diffs if (d >= 0 if wide_takes_equal else d > 0)]
    return buckets[min(side or diffs, key=lambda pair: abs(pair[1]))[0]]
