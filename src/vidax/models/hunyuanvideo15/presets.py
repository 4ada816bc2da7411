"""HunyuanVideo-1.5 presets (the paper's benchmark rows), the release's transformer variants and its size buckets.

The rows of ``paper-table5.tsv``: ``HunyuanVideo-1.5 8.3B (720P)`` T2V 1280x720 and I2V (832x1104 for the table's
portrait example image), ``(480P)`` T2V 832x480 and I2V (544x720): 121 frames, 30 steps, bf16, tp 4.

The sampler settings of each transformer variant are the original repository's (Tencent-Hunyuan/HunyuanVideo-1.5
``hyvideo/commons/__init__.py`` ``PIPELINE_CONFIGS``): classifier-free guidance 6.0 and flow shift 5.0 at 480p, 9.0
for 720p text-to-video, 7.0 for 720p image-to-video; the CFG-distilled variants (``*_distilled``) run without
guidance (1.0) at the same shifts; the step-distilled 480p image-to-video variant runs 12 steps at shift 7.0.
"""

from __future__ import annotations

from dataclasses import dataclass

from vidax.core import buckets

#: The release's bucket base size per resolution (``hunyuan_video_pipeline.py`` ``target_size_config``): the
#: transformer config's ``target_size`` in the diffusers layout.
BUCKET_BASE = {"480p": 640, "720p": 960}
#: Bucket stride: the VAE's 16x spatial compression (patch size 1).
BUCKET_STRIDE = 16


@dataclass(frozen=True)
class Variant:
    """One transformer of the official release (``transformer/<name>/``) and the sampler settings the release runs
    it with.

    Attributes:
      name: the folder name (``"480p_t2v"``, ``"720p_i2v_distilled"``, ``"480p_i2v_step_distilled"``).
      guidance_scale: classifier-free guidance (1.0: one evaluation per step, the CFG-distilled variants).
      flow_shift: the flow-matching schedule's shift.
      num_inference_steps: the release's default steps.
      sparse: trained for the release's sparse (SSTA) attention; vidax runs it with full attention.
    """

    name: str
    guidance_scale: float
    flow_shift: float
    num_inference_steps: int = 50
    sparse: bool = False

    @property
    def resolution(self) -> str:
        """``"480p"`` or ``"720p"``."""
        return self.name.split("_")[0]

    @property
    def task(self) -> str:
        """``"t2v"`` or ``"i2v"``."""
        return self.name.split("_")[1]


#: The release's transformer variants (``PIPELINE_CONFIGS``; the super-resolution transformers are not generators).
VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in [
        Variant("480p_t2v", 6.0, 5.0),
        Variant("480p_i2v", 6.0, 5.0),
        Variant("720p_t2v", 6.0, 9.0),
        Variant("720p_i2v", 6.0, 7.0),
        Variant("480p_t2v_distilled", 1.0, 5.0),
        Variant("480p_i2v_distilled", 1.0, 5.0),
        Variant("720p_t2v_distilled", 1.0, 9.0),
        Variant("720p_i2v_distilled", 1.0, 7.0),
        Variant("720p_t2v_distilled_sparse", 1.0, 9.0, sparse=True),
        Variant("720p_i2v_distilled_sparse", 1.0, 7.0, sparse=True),
        Variant("480p_i2v_step_distilled", 1.0, 7.0, num_inference_steps=12),
    ]
}


def crop_size_buckets(base_size: int, stride: int = BUCKET_STRIDE, max_ratio: float = 4.0) -> list[tuple[int, int]]:
    """The release's size buckets (HunyuanVideo-1.5 ``hyvideo/utils/data_utils.py`` ``generate_crop_size_list``;
    diffusers ``pipelines/hunyuan_video1_5/image_processor.py`` restates it): :func:`vidax.core.buckets.
    crop_size_buckets`.

    Raises:
      ValueError: ``base_size < stride``, ``stride < 1`` or ``max_ratio < 1``.
    """
    return buckets.crop_size_buckets(base_size, stride, max_ratio)


def closest_size(height: float, width: float, base_size: int) -> tuple[int, int]:
    """The bucket ``(height, width)`` closest in aspect ratio to ``height / width`` on its side of square
    (``get_closest_ratio`` of the release, which diffusers' ``HunyuanVideo15ImageProcessor.
    calculate_default_height_width`` calls; landscape among ratios not below it).

    Examples: 720p (base 960), 16:9 -> ``(720, 1280)``; a 1104x832 (height x width) image -> ``(1104, 832)``;
    480p (base 640), 16:9 -> ``(480, 848)``.

    Raises:
      ValueError: a non-positive size.
    """
    return buckets.closest_bucket(height, width, crop_size_buckets(base_size), wide_takes_equal=True)


@dataclass(frozen=True)
class HunyuanVideo15Preset:
    """Generation defaults for one HunyuanVideo-1.5 row of the paper's benchmark table.

    Attributes:
      name: the preset's name (``hunyuanvideo-1.5-720p-t2v``).
      model: the model's name in messages.
      variant: the release's transformer variant (:data:`VARIANTS`) the row runs.
      width, height: output size in pixels (image-to-video: the size for the table's example image; a run with an
        image and no explicit size takes the image's bucket, :func:`closest_size`).
      num_frames: ``4k + 1`` frames (121 = 5 s at 24 fps).
      num_inference_steps: the paper's 30 (the release defaults to 50).
      guidance_scale, flow_shift: the variant's (:class:`Variant`).
      dtype: transformer weight dtype; fps: the written video's rate (24, the release's).
      tp, sp, offload_chunk: the row's mesh split and offloading (none: the 8.3B fits with tp 4).
      task: ``"t2v"`` or ``"i2v"``.
    """

    name: str
    model: str
    variant: str
    width: int
    height: int
    num_frames: int = 121
    num_inference_steps: int = 30
    dtype: str = "bfloat16"
    fps: int = 24
    tp: int = 4
    sp: int = 1
    offload_chunk: int | None = None

    @property
    def task(self) -> str:
        return VARIANTS[self.variant].task

    @property
    def guidance_scale(self) -> float:
        return VARIANTS[self.variant].guidance_scale

    @property
    def flow_shift(self) -> float:
        return VARIANTS[self.variant].flow_shift

    def settings(self) -> dict:
        """The pipeline call's settings of this row."""
        return dict(height=self.height, width=self.width, num_frames=self.num_frames,
                    num_inference_steps=self.num_inference_steps, guidance_scale=self.guidance_scale,
                    flow_shift=self.flow_shift, variant=self.variant)


PRESETS: dict[str, HunyuanVideo15Preset] = {
    p.name: p
    for p in [
        HunyuanVideo15Preset("hunyuanvideo-1.5-720p-t2v", "HunyuanVideo-1.5 8.3B (720P)", "720p_t2v", 1280, 720),
        HunyuanVideo15Preset("hunyuanvideo-1.5-720p-i2v", "HunyuanVideo-1.5 8.3B (720P)", "720p_i2v", 832, 1104),
        HunyuanVideo15Preset("hunyuanvideo-1.5-480p-t2v", "HunyuanVideo-1.5 8.3B (480P)", "480p_t2v", 832, 480),
        HunyuanVideo15Preset("hunyuanvideo-1.5-480p-i2v", "HunyuanVideo-1.5 8.3B (480P)", "480p_i2v", 544, 720),
    ]
}
