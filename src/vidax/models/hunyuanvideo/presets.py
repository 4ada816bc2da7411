"""HunyuanVideo 13B presets (the paper's benchmark rows) and the image-to-video size buckets of the original release.

The rows of ``paper-table5.tsv``: ``HunyuanVideo 13B T2V`` (1280x720, 129 frames, 50 steps, bf16, tp 4, offload chunk
20/40: the 20 dual-stream blocks in one chunk, the 40 single-stream blocks in two) and ``HunyuanVideo 13B I2V``
(832x1088 for the table's portrait example image: the size follows the image's aspect ratio).

Sampler settings follow the original repository (Tencent-Hunyuan/HunyuanVideo ``sample_video.py`` /
HunyuanVideo-I2V ``scripts/run_sample_image2video_*.sh``): flow shift 7.0 for 720p text-to-video, 17.0 for
image-to-video (the release's default "dynamic" script; its ``--i2v-stability`` script uses 7.0), embedded guidance
6.0, no true classifier-free guidance.
"""

from __future__ import annotations

from dataclasses import dataclass

from vidax.core import buckets

#: The original release's image-to-video bucket base sizes per ``--i2v-resolution`` (HunyuanVideo-I2V
#: ``hyvideo/inference.py``: 720p -> 960, 540p -> 720, 360p -> 480).
I2V_BUCKET_BASE = {"720p": 960, "540p": 720, "360p": 480}


def crop_size_buckets(base_size: int = 960, patch_size: int = 32, max_ratio: float = 4.0) -> list[tuple[int, int]]:
    """The original release's size buckets (HunyuanVideo-I2V ``hyvideo/utils/data_utils.py``
    ``generate_crop_size_list``, whose pairs ``hyvideo/inference.py`` reads as ``(height, width)``), widest-first:
    :func:`vidax.core.buckets.crop_size_buckets` with a stride of ``patch_size``.

    Raises:
      ValueError: ``base_size < patch_size``, ``patch_size < 1`` or ``max_ratio < 1``.
    """
    return buckets.crop_size_buckets(base_size, patch_size, max_ratio)


def size_for_image(image_width: int, image_height: int, base_size: int = 960) -> tuple[int, int]:
    """The ``(height, width)`` the original release generates for an image of this size: the bucket whose aspect ratio
    is closest to the image's, on the image's side of square (HunyuanVideo-I2V ``get_closest_ratio``, landscape
    among ratios strictly above it; :func:`vidax.core.buckets.closest_bucket`).

    Example: a 1088x832 (height x width) portrait image at 720p (base 960) -> ``(1088, 832)``;
    720x1280 -> ``(704, 1248)``.

    Raises:
      ValueError: a non-positive image size.
    """
    if image_width < 1 or image_height < 1:
        raise ValueError(f"image size {image_width}x{image_height} must be positive")
    return buckets.closest_bucket(image_height, image_width, crop_size_buckets(base_size, 32), wide_takes_equal=False)


@dataclass(frozen=True)
class HunyuanVideoPreset:
    """Generation defaults for one HunyuanVideo row of the paper's benchmark table.

    Attributes:
      width, height: output size in pixels (image-to-video: the size for the table's example image; a run with an
        image and no explicit size takes the bucket of :func:`size_for_image` at ``i2v_resolution``).
      num_frames: ``4k + 1`` frames (129 = 5.3 s at 24 fps).
      num_inference_steps, guidance_scale, flow_shift: sampler settings (``guidance_scale`` is the embedded
        guidance of the guidance-distilled model, not classifier-free guidance).
      dtype: transformer weight dtype.
      fps: frames per second of the written video (24, the release's).
      tp, sp, offload_chunk: the row's mesh split and offloading (blocks per streamed chunk, for both stacks).
      task: ``"t2v"`` or ``"i2v"``.
      vae_tiling: decode in spatial tiles too (the reference's ``enable_tiling()``, which diffusers' HunyuanVideo
        examples call): at 720p x 129 frames the decode with frame tiles only peaks near 64 GiB (``vidax plan``).
    """

    name: str
    model: str
    width: int
    height: int
    num_frames: int = 129
    num_inference_steps: int = 50
    guidance_scale: float = 6.0
    flow_shift: float = 7.0
    dtype: str = "bfloat16"
    fps: int = 24
    tp: int = 1
    sp: int = 1
    offload_chunk: int | None = None
    task: str = "t2v"
    vae_tiling: bool = True

    def settings(self) -> dict:
        """The pipeline call's settings of this row."""
        return dict(height=self.height, width=self.width, num_frames=self.num_frames,
                    num_inference_steps=self.num_inference_steps, guidance_scale=self.guidance_scale,
                    flow_shift=self.flow_shift, vae_tiling=self.vae_tiling)


PRESETS: dict[str, HunyuanVideoPreset] = {
    p.name: p
    for p in [
        HunyuanVideoPreset("hunyuanvideo-t2v-720p", "HunyuanVideo", 1280, 720, tp=4, offload_chunk=20),
        HunyuanVideoPreset("hunyuanvideo-i2v-720p", "HunyuanVideo-I2V", 832, 1088, flow_shift=17.0, tp=4,
                           offload_chunk=20, task="i2v"),
    ]
}
