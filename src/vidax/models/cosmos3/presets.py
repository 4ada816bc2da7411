"""Cosmos3 presets: the paper's benchmark rows.

The rows of ``paper-table5.tsv``: ``Cosmos3 Nano (16B)`` text-to-video, 1280x704, 93 frames, 35 steps, bf16, tp 4,
no offloading; ``Cosmos3 Edge (4B)`` text-to-video, 832x480, 121 frames, 35 steps, bf16, tp 4, no offloading. The
paper's parameter counts count both streams (understanding and generation weights per layer).

The sampler is the folder's (:mod:`vidax.models.cosmos3.schedule`): Nano's Karras flow grid as its diffusers folder
configures it, Edge's native flow grid where its ``model_index.json`` sets ``use_native_flow_schedule``. Guidance
6.0 and 24 fps are diffusers' ``Cosmos3OmniPipeline`` defaults (the model is told the rate: the duration sentence and
the fps modulation of the temporal positions).
"""

from __future__ import annotations

from dataclasses import dataclass

#: diffusers' ``Cosmos3OmniPipeline.__call__`` defaults.
DEFAULT_GUIDANCE_SCALE = 6.0
DEFAULT_FPS = 24.0
DEFAULT_STEPS = 35


@dataclass(frozen=True)
class Cosmos3Preset:
    """Generation defaults for one Cosmos3 row of the paper's benchmark table.

    Attributes:
      name: the preset's name (``cosmos3-nano-t2v``).
      model: the model's name in messages.
      width, height: output size in pixels.
      num_frames: ``4k + 1`` frames.
      num_inference_steps: the paper's 35 (diffusers' default).
      guidance_scale: 6.0 (diffusers' default; ``uncond + s (cond - uncond)``).
      dtype: transformer weight dtype.
      frame_rate: the rate the model is told and the video is written at (24).
      tp, sp, offload_chunk: the row's mesh split and offloading.
      task: ``"t2v"``.
    """

    name: str
    model: str
    width: int
    height: int
    num_frames: int
    num_inference_steps: int = DEFAULT_STEPS
    guidance_scale: float = DEFAULT_GUIDANCE_SCALE
    dtype: str = "bfloat16"
    frame_rate: float = DEFAULT_FPS
    tp: int = 4
    sp: int = 1
    offload_chunk: int | None = None
    task: str = "t2v"

    @property
    def fps(self) -> float:
        return self.frame_rate

    def settings(self) -> dict:
        """The pipeline call's settings of this row."""
        return dict(height=self.height, width=self.width, num_frames=self.num_frames,
                    num_inference_steps=self.num_inference_steps, guidance_scale=self.guidance_scale,
                    fps=self.frame_rate)


PRESETS: dict[str, Cosmos3Preset] = {
    p.name: p
    for p in [
        Cosmos3Preset("cosmos3-nano-t2v", "Cosmos3 Nano (16B)", width=1280, height=704, num_frames=93),
        Cosmos3Preset("cosmos3-edge-t2v", "Cosmos3 Edge (4B)", width=832, height=480, num_frames=121),
    ]
}
