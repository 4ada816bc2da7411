"""Cosmos-Predict2.5 presets (the paper's benchmark rows), the original release's checkpoints and their samplers.

The rows of ``paper-table5.tsv``: ``Cosmos-Predict2.5 2B`` and ``Cosmos-Predict2.5 14B`` text-to-world, 1280x704,
93 frames, 35 steps, bf16, tp 4 (the 14B offloaded with chunk 1: its 93-frame context does not fit resident at any
split of a 32 GB chip).

The release (nvidia/Cosmos-Predict2.5-2B and -14B on the Hugging Face hub) publishes EMA ``.pt`` transformers under
``base/post-trained/`` and ``base/pre-trained/``; the original repository (nvidia-cosmos/cosmos-predict2.5,
``imaginaire/utils/checkpoint_db.py``) names the training experiment of each, whose model config sets the sampler:
the 2B post-trained one (``...-Note-rf_with_edm_ckpt``, ``SFT_2B_RF.py``) samples on the Karras grid
(``use_kerras_sigma_at_inference``) with its conditioning frames at timestep 0.1 (of 1000); the pre-trained ones keep
the defaults: the shifted linear grid (shift 5, the sampler's default) and conditioning frames at the noisy frames'
timestep (``conditional_frame_timestep = -1``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The reference negative prompt (diffusers ``pipeline_cosmos2_5_predict.DEFAULT_NEGATIVE_PROMPT``; the original
#: ``cosmos_predict2/config.py`` holds the same text).
DEFAULT_NEGATIVE_PROMPT = (
    "The video captures a series of frames showing ugly scenes, static with no motion, motion blur, "
    "over-saturation, shaky footage, low resolution, grainy texture, pixelated images, poorly lit areas, "
    "underexposed and overexposed scenes, poor color balance, washed out colors, choppy sequences, "
    "jerky movements, low frame rate, artifacting, color banding, unnatural transitions, outdated special effects, "
    "fake elements, unconvincing visuals, poorly edited content, jump cuts, visual noise, and flickering. "
    "Overall, the video is of poor quality."
)


@dataclass(frozen=True)
class Variant:
    """One transformer of the original release and the sampler its experiment configures.

    Attributes:
      name: ``"post-trained"`` or ``"pre-trained"`` (the release's ``base/<name>/`` folder).
      karras: the Karras sigma grid (sigma_max 200, sigma_min 0.01, rho 7, ``num_steps + 1`` points) instead of
        the shifted linear grid.
      flow_shift: the shifted linear grid's shift (unused on the Karras grid).
      conditional_frame_timestep: the timestep of the conditioning latent frames in the sampler's 0-1000 units (the
        experiment's value; the network scales it by its ``timestep_scale`` 0.001); None: the noisy frames'
        timestep (the experiment's -1).
    """

    name: str
    karras: bool
    flow_shift: float = 5.0
    conditional_frame_timestep: float | None = None

    def scheduler_config(self) -> dict:
        """The sampler as a ``scheduler_config.json`` (:func:`vidax.schedulers.scheduler_from_config`, with vidax's
        own keys ``sigma_grid`` and ``model_timesteps_type``): what an original release samples with, and what
        ``vidax convert`` writes for it. The Karras grid of the repository (``num_steps + 1`` points, sigma 0.01 to
        200) or the shifted linear grid; the transformer given the truncated timesteps x 0.001 either way."""
        base = {"_class_name": "UniPCMultistepScheduler", "num_train_timesteps": 1000, "solver_order": 2,
                "solver_type": "bh2", "lower_order_final": True, "final_sigmas_type": "zero",
                "prediction_type": "flow_prediction", "use_flow_sigmas": True,
                "model_timesteps_type": "scaled_timesteps"}
        if self.karras:
            return {**base, "use_karras_sigmas": True, "sigma_grid": "cosmos", "sigma_min": 0.01, "sigma_max": 200.0,
                    "flow_shift": 1.0}
        return {**base, "use_karras_sigmas": False, "sigma_grid": "wan", "flow_shift": self.flow_shift}


#: The release's checkpoints by the uuid in their file name (``base/<variant>/<uuid>_ema_bf16.pt``). The 14B
#: post-trained one is not in the original repository's checkpoint table (its snapshot of 2025-10-06): it is run as
#: the 2B post-trained one is.
CHECKPOINTS: dict[str, tuple[str, str]] = {
    "81edfebe-bd6a-4039-8c1d-737df1a790bf": ("2B", "post-trained"),
    "d20b7120-df3e-4911-919d-db6e08bad31c": ("2B", "pre-trained"),
    "e21d2a49-4747-44c8-ba44-9f6f9243715f": ("14B", "post-trained"),
    "54937b8c-29de-4f04-862c-e67b04ec41e8": ("14B", "pre-trained"),
}

VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in [
        Variant("post-trained", karras=True, conditional_frame_timestep=0.1),
        Variant("pre-trained", karras=False, flow_shift=5.0, conditional_frame_timestep=None),
    ]
}


@dataclass(frozen=True)
class CosmosPredict25Preset:
    """Generation defaults for one Cosmos-Predict2.5 row of the paper's benchmark table.

    Attributes:
      name: the preset's name (``cosmos-predict2.5-2b-t2v``).
      model: the model's name in messages.
      width, height: output size in pixels (1280x704, the release's 720p).
      num_frames: ``4k + 1`` frames (93 = 24 latent frames, the model's training length).
      num_inference_steps: the paper's 35.
      guidance_scale: 7.0 (the release's and diffusers' default; Cosmos' rule ``cond + w (cond - uncond)``).
      dtype: transformer weight dtype; fps: the written video's rate (16, the release's).
      tp, sp, offload_chunk: the row's mesh split and offloading.
      task: ``"t2v"``.
    """

    name: str
    model: str
    width: int = 1280
    height: int = 704
    num_frames: int = 93
    num_inference_steps: int = 35
    guidance_scale: float = 7.0
    dtype: str = "bfloat16"
    fps: int = 16
    tp: int = 4
    sp: int = 1
    offload_chunk: int | None = None
    task: str = "t2v"

    def settings(self) -> dict:
        """The pipeline call's settings of this row."""
        return dict(height=self.height, width=self.width, num_frames=self.num_frames,
                    num_inference_steps=self.num_inference_steps, guidance_scale=self.guidance_scale)


PRESETS: dict[str, CosmosPredict25Preset] = {
    p.name: p
    for p in [
        CosmosPredict25Preset("cosmos-predict2.5-2b-t2v", "Cosmos-Predict2.5 2B"),
        CosmosPredict25Preset("cosmos-predict2.5-14b-t2v", "Cosmos-Predict2.5 14B", offload_chunk=1),
    ]
}
