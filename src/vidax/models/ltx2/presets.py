"""LTX-2.5 presets: the paper's benchmark rows.

The four ``LTX-2.5 22B`` rows of ``paper-table5.tsv``: the dev model (30 steps) and the distilled one (8 steps), each
with the convolutional VAE decoder and with the diffusion VAE decoder; text-to-video, 1216x704, 121 frames, bf16
transformer weights with float32 AdaLN tables ("bf16+fp32-adaln"), tensor-parallel 4, blocks streamed from host
memory 8 at a time ("chunk8").

Guidance: diffusers 0.42.1 ``LTX2Pipeline.__call__`` defaults (``guidance_scale=3.0``, ``frame_rate=24.0``,
``num_inference_steps=30``); the distilled model runs without classifier-free guidance (``guidance_scale=1.0``, its
8-step fixed schedule: diffusers' ``DISTILLED_SIGMA_VALUES``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: diffusers ``LTX2Pipeline.__call__``'s defaults.
DEFAULT_GUIDANCE_SCALE = 3.0
DEFAULT_STEPS = 30
DEFAULT_FRAME_RATE = 24.0
#: The distilled model's step count (diffusers' ``DISTILLED_SIGMA_VALUES``: 8 sigmas) and guidance (none).
DISTILLED_STEPS = 8
DISTILLED_GUIDANCE_SCALE = 1.0


@dataclass(frozen=True)
class LTX2Preset:
    """Generation defaults for one LTX-2.5 row of the paper's benchmark table.

    Attributes:
      name: the preset's name (``ltx-2.5-22b-dev``).
      model: the model's name in messages (the table's).
      width, height: output size in pixels (multiples of 32).
      num_frames: ``8k + 1`` frames.
      num_inference_steps: 30 (dev) or 8 (distilled).
      guidance_scale: 3.0 (dev) or 1.0 (distilled).
      dtype: transformer weight dtype (bf16; the AdaLN tables stay float32 whatever the dtype).
      frame_rate: the rate the model is told and the video is written at (24).
      decoder: ``"conv"`` (the VAE's convolutional decoder) or ``"diffusion"`` (LTX-2.5's diffusion VAE decoder).
      tp, sp, offload_chunk: the row's mesh split and block streaming.
      task: ``"t2v"``.
    """

    name: str
    model: str
    width: int = 1216
    height: int = 704
    num_frames: int = 121
    num_inference_steps: int = DEFAULT_STEPS
    guidance_scale: float = DEFAULT_GUIDANCE_SCALE
    dtype: str = "bfloat16"
    frame_rate: float = DEFAULT_FRAME_RATE
    decoder: str = "conv"
    tp: int = 4
    sp: int = 1
    offload_chunk: int | None = 8
    task: str = "t2v"

    @property
    def fps(self) -> float:
        return self.frame_rate

    @property
    def distilled(self) -> bool:
        return self.num_inference_steps == DISTILLED_STEPS

    def settings(self) -> dict:
        """The pipeline call's settings of this row (``decoder`` only when the diffusion decoder is asked for)."""
        out = dict(height=self.height, width=self.width, num_frames=self.num_frames,
                   num_inference_steps=self.num_inference_steps, guidance_scale=self.guidance_scale,
                   frame_rate=self.frame_rate)
        if self.decoder != "conv":
            out["decoder"] = self.decoder
        return out


def _rows() -> list[LTX2Preset]:
    rows = []
    for kind, steps, guidance in (("dev", DEFAULT_STEPS, DEFAULT_GUIDANCE_SCALE),
                                  ("distilled", DISTILLED_STEPS, DISTILLED_GUIDANCE_SCALE)):
        rows.append(LTX2Preset(f"ltx-2.5-22b-{kind}", f"LTX-2.5 22B ({kind})", num_inference_steps=steps,
                               guidance_scale=guidance))
        rows.append(LTX2Preset(f"ltx-2.5-22b-{kind}-diffusion-decoder",
                               f"LTX-2.5 22B ({kind}), diffusion VAE decoder", num_inference_steps=steps,
                               guidance_scale=guidance, decoder="diffusion"))
    return rows


PRESETS: dict[str, LTX2Preset] = {p.name: p for p in _rows()}
