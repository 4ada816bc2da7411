"""Cosmos-Predict2.5 text-, image- and video-to-world (:class:`CosmosPredict25Pipeline`): prompt (and an image or a
clip) in, uint8 frames out.

Follows diffusers 0.42.1 ``pipelines/cosmos/pipeline_cosmos2_5_predict.py`` (``Cosmos2_5_PredictBasePipeline``) for
diffusers and converted folders, and the original repository (nvidia-cosmos/cosmos-predict2.5,
``video2world_model_rectified_flow.py``) for the release's ``.pt`` checkpoints where the two differ (the sampler's
grid and the transformer's timestep; docs/design.md, "Cosmos-Predict2.5"):

1. each prompt in Qwen2.5-VL's chat template with the reference's system message, padded to 512 tokens, through the
   Qwen2.5-VL language model; every layer's hidden state normalised and all concatenated
   (:mod:`vidax.models.cosmos_predict25.text`); the negative prompt defaults to the reference's;
2. image- and video-to-world: the conditioning frames through the Wan2.1 VAE (the posterior mean, normalised by the
   VAE's per-channel statistics): the first 1 (image) or ``num_latent_conditional_frames`` (video, 2 by default)
   latent frames (:mod:`vidax.models.cosmos_predict25.conditioning`);
3. Gaussian latents ``(B, 16, (num_frames - 1) / 4 + 1, H / 8, W / 8)`` (``(B, C, T, H, W)``);
4. at each step the conditioning latent frames replace the noisy ones in the transformer's input, with a condition
   mask channel and (per frame) the timestep ``conditional_frame_timestep`` (1e-4) instead of the noise level; the
   prediction on those frames is replaced by the velocity that leads to them (``noise - condition``);
5. classifier-free guidance as Cosmos writes it: ``cond + s (cond - uncond)`` (both halves in one batch);
6. flow-matching UniPC (:class:`vidax.schedulers.unipc.FlowUniPCMultistepScheduler`) on the folder's sigma grid:
   diffusers' Karras grid of ``num_inference_steps`` points for diffusers folders, the release's ``n + 1``-point
   grid (or the pre-trained checkpoints' shifted grid) for original ones;
7. latents de-normalised and decoded by the Wan2.1 VAE one latent frame at a time; frames ``clip(x / 2 + 0.5, 0, 1)``.

The sampling loop is a host loop around one compiled transformer step (compiled once per run). The sampler state
stays float32. With ``dp * tp * sp > 1`` the transformer runs on a ``(data, tensor, sequence)`` mesh: its
parameters are loaded already sharded; the text encoder and the VAE stay on one device.
"""

from __future__ import annotations

import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.core import wan_vae
from vidax.core.attention import AttentionImpl, ran_label, recording
from vidax.core.compile_cache import enable_for_api
from vidax.core.host_memory import trim_after_compiles
from vidax.core.inputs import check_dtype, check_finite_video, check_guidance, check_seed, prompt_batch
from vidax.core.placement import first_device, mesh_context, parallel_metrics, to_mesh
from vidax.core.progress import Progress, as_progress
from vidax.core.residency import keep_resident
from vidax.core.sharding import optional_mesh
from vidax.models.cosmos_predict25 import block_loop as cp_block_loop
from vidax.models.cosmos_predict25.conditioning import conditioning_pixels
from vidax.models.cosmos_predict25.family import MAX_CONDITIONAL_FRAMES, check_conditioning, check_sizes
from vidax.models.cosmos_predict25.layout import check_tokenizer, resolve_checkpoint
from vidax.models.cosmos_predict25.loading import load_components, make_scheduler, transformer_config, vae_config
from vidax.models.cosmos_predict25.presets import DEFAULT_NEGATIVE_PROMPT, VARIANTS
from vidax.models.cosmos_predict25.sharding import COSMOS_PREDICT25_RULES, check_parallel
from vidax.video import VideoOutput, finish_metrics

#: The timestep of the conditioning latent frames in diffusers' pipeline (``conditional_frame_timestep``; the
#: release's post-trained 2B experiment sets 0.1 of 1000, the same value in the network's units).
CONDITIONAL_FRAME_TIMESTEP = 1e-4


def check_inputs(height: Any, width: Any, num_frames: Any, output_type: str = "uint8") -> None:
    """Sizes and output type, before any compute (:func:`vidax.models.cosmos_predict25.family.check_sizes`).

    Raises:
      ValueError: every problem named with its fix.
    """
    check_sizes(height, width, num_frames)
    if output_type not in ("uint8", "float"):
        raise ValueError(f"output_type must be 'uint8' or 'float', got {output_type!r}")


def guide(pred: jax.Array, gt_velocity: jax.Array, cond_mask: jax.Array, guidance_scale: float | None) -> jax.Array:
    """The step's velocity from the transformer's prediction(s) (float32 ``(B, 16, T, h, w)``).

    On the conditioning frames the prediction is replaced by ``gt_velocity`` (``noise - condition latents``, zero
    elsewhere); with ``guidance_scale`` the prediction is ``[uncond, cond]`` stacked on the batch axis and combined
    as Cosmos does: ``cond + s (cond - uncond)``.
    """
    keep = 1.0 - cond_mask
    if guidance_scale is None:
        return gt_velocity + pred.astype(jnp.float32) * keep
    uncond, cond = jnp.split(pred.astype(jnp.float32), 2)
    uncond, cond = gt_velocity + uncond * keep, gt_velocity + cond * keep
    return cond + guidance_scale * (cond - uncond)


def step_hooks(dtype: Any, guidance_scale: float | None, conditional_frame_timestep: float | None):
    """The pipeline's work around the transformer in a compiled step (``prepare`` in its prologue, ``finish`` in its
    epilogue; :func:`vidax.models.cosmos_predict25.block_loop.compile_step`).

    ``prepare(x, sigma, prompt_embeds, cond_latents, indicator)``: the noisy latents ``x (B, 16, T, h, w)`` with the
    conditioning latents put in on the frames where ``indicator (B, 1, T, 1, 1)`` is 1, the condition mask, and the
    per-frame timestep (``sigma (B,)`` on the noisy frames, ``conditional_frame_timestep`` on the conditioning ones,
    or ``sigma`` everywhere when it is None), in ``dtype``; with guidance the video inputs doubled for the
    ``[negative, prompt]`` batch (the text comes doubled). ``finish(prediction, gt_velocity, indicator)``:
    :func:`guide`.
    """
    rows = 1 if guidance_scale is None else 2

    def prepare(x, sigma, emb, cond_latents, indicator):
        b, _, t, h, w = x.shape
        mask = jnp.broadcast_to(indicator, (b, 1, t, h, w))
        mixed = mask * cond_latents + (1.0 - mask) * x
        ts = jnp.broadcast_to(sigma.astype(jnp.float32).reshape(b, 1, 1, 1, 1), (b, 1, t, 1, 1))
        if conditional_frame_timestep is not None:
            ts = indicator * jnp.float32(conditional_frame_timestep) + (1.0 - indicator) * ts
        double = (lambda a: jnp.concatenate([a] * rows)) if rows > 1 else (lambda a: a)
        return cp_block_loop.TransformerInputs(double(mixed).astype(dtype), double(ts), emb.astype(dtype),
                                               double(mask).astype(dtype))

    def finish(pred, gt_velocity, indicator):
        b, _, t, h, w = gt_velocity.shape
        return guide(pred, gt_velocity, jnp.broadcast_to(indicator, (b, 1, t, h, w)), guidance_scale)

    return prepare, finish


class CosmosPredict25Pipeline:
    """Cosmos-Predict2.5 text-, image- and video-to-world, loaded once from a diffusers, original or converted folder.

    Example::

        pipe = CosmosPredict25Pipeline.from_pretrained("Cosmos-Predict2.5-2B-diffusers", dtype="bfloat16", tp=4)
        out = pipe("a robot arm stacks red cubes on a table", num_frames=93)              # text-to-world
        out = pipe("the robot arm keeps welding", image="first.png")                       # image-to-world
        out = pipe("the excavator drives off", video="clip.mp4")                           # video-to-world
        write_video(out.frames[0], "world.mp4", fps=out.fps)
    """

    def __init__(self, ckpt, transformer_cfg, transformer_params: dict, stacks, vae_cfg, vae_params: dict, text,
                 scheduler, attention: str = "auto", mesh=None, rules=COSMOS_PREDICT25_RULES,
                 offload_overlap: bool = True):
        self.ckpt = ckpt
        self.folder = ckpt.folder
        self.transformer_cfg = transformer_cfg
        self.transformer_params = transformer_params  # without the block stack when it is offloaded
        self.stacks = stacks
        self.offload_overlap = offload_overlap
        self.vae_cfg = vae_cfg
        self.vae_params = vae_params
        self.text = text  # vidax.models.cosmos_predict25.loading.TextEncoder
        self.scheduler = scheduler  # FlowUniPCMultistepScheduler: its states' model_timesteps feed the transformer
        # An original release's variant (also kept by its converted folder): its conditioning frames' timestep.
        self.variant = VARIANTS[ckpt.variant] if ckpt.variant is not None else None
        self.attention = AttentionImpl(attention)
        self.mesh = mesh
        self.rules = rules
        self.load_seconds = 0.0
        self.progress: bool | Progress = True
        self._attention_ran: str | None = None

    @property
    def fps(self) -> int:
        """16: the frame rate of the release's videos."""
        return 16

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, *, variant: str | None = None, dtype: Any = "bfloat16",
                        text_encoder_dtype: Any = "float32", vae_dtype: Any = "float32", attention: str = "auto",
                        dp: int = 1, tp: int = 1, sp: int = 1, devices: list | None = None,
                        text_encoder_residency: str = "auto", block_loop: str = "auto",
                        offload_chunk: int | None = None, offload_overlap: bool = True,
                        progress: bool | Progress = True,
                        compile_cache: bool | str | os.PathLike = True) -> CosmosPredict25Pipeline:
        """Load a Cosmos-Predict2.5 folder (diffusers layout, the original release, or ``vidax convert``'s).

        Args:
          folder: see :mod:`vidax.models.cosmos_predict25.layout`.
          variant: the original release's transformer (``"post-trained"``, ``"pre-trained"``); None: post-trained
            (or the one present). A diffusers or converted folder holds one transformer and ignores it.
          dtype: transformer weight dtype ("bfloat16" or "float32"); norms, the timestep embedder and the
            modulation stay float32.
          text_encoder_dtype: Qwen2.5-VL's weights (float32 by default: it runs once per prompt).
          vae_dtype: VAE dtype.
          attention: attention implementation (:mod:`vidax.core.attention`).
          dp, tp, sp: the transformer's mesh sizes; tp must divide the head count (16 for the 2B, 40 for the 14B).
          devices: the mesh's devices (default all).
          text_encoder_residency: ``"free"`` frees Qwen after each encoding, ``"resident"`` keeps it, ``"auto"``:
            freed on accelerators, kept on the CPU backend.
          block_loop: ``"scan"``, ``"host"`` or ``"auto"`` (host on the CPU backend). Same values either way.
          offload_chunk: keep the blocks in host memory and stream ``offload_chunk`` at a time to the devices (the
            paper's 14B row: 1). None: resident.
          offload_overlap: copy the next chunk while the current one computes.
          progress: show the loading stage.
          compile_cache: JAX's persistent compilation cache (:func:`vidax.core.compile_cache.enable_for_api`).

        Raises:
          CheckpointError: a missing part, tokenizer or variant (named), components that do not fit each other, or
            weights that do not match their configuration.
          ValueError: a bad dtype, mesh or tp, an unknown ``block_loop``, or a bad ``offload_chunk``; all raised before
            any weight is read.
        """
        dtype = check_dtype(dtype)
        text_encoder_dtype = check_dtype(text_encoder_dtype, "text_encoder_dtype")
        vae_dtype = check_dtype(vae_dtype, "vae_dtype")
        t0 = time.perf_counter()
        enable_for_api(compile_cache)
        trim_after_compiles()
        ckpt = resolve_checkpoint(folder, variant=variant)
        check_tokenizer(ckpt)
        tcfg, vcfg = transformer_config(ckpt), vae_config(ckpt)
        mesh = optional_mesh(dp, tp, sp, devices=devices)
        if mesh is not None:
            check_parallel(tcfg, mesh, COSMOS_PREDICT25_RULES)
        plans = cp_block_loop.plans_for(tcfg, offload_chunk, block_loop)
        attention_impl = AttentionImpl(attention)
        tparams, stacks, vparams, text = load_components(
            ckpt, tcfg, vcfg, dtype=dtype, vae_dtype=vae_dtype, text_encoder_dtype=text_encoder_dtype, mesh=mesh,
            rules=COSMOS_PREDICT25_RULES, keep_encoder=keep_resident(text_encoder_residency), progress=progress,
            plans=plans, attention=AttentionImpl.XLA if attention_impl == AttentionImpl.AUTO else attention_impl)
        pipe = cls(ckpt, tcfg, tparams, stacks, vcfg, vparams, text, make_scheduler(ckpt), attention, mesh=mesh,
                   offload_overlap=offload_overlap)
        pipe.load_seconds = time.perf_counter() - t0
        pipe.progress = progress
        return pipe

    # -- stages ----------------------------------------------------------

    @property
    def compute_dtype(self) -> np.dtype:
        """The transformer's weight dtype (``from_pretrained``'s ``dtype``)."""
        return self.transformer_params["proj_out"]["kernel"].dtype

    @property
    def block_loop(self) -> str:
        """``"scan"``, ``"host"`` or ``"offload"``."""
        return cp_block_loop.loop_name(self.stacks)

    def latent_shape(self, batch: int, height: int, width: int, num_frames: int) -> tuple[int, int, int, int, int]:
        """The noise latents' shape ``(B, 16, (F - 1) / 4 + 1, H / 8, W / 8)`` for these sizes."""
        return (batch, self.vae_cfg.z_dim, (num_frames - 1) // 4 + 1, height // 8, width // 8)

    def conditional_frame_timestep(self) -> float | None:
        """The conditioning frames' timestep as the transformer takes it (0..1): diffusers' 1e-4; an original
        release's variant's, scaled as its network scales it (0.1 -> ``float32(0.1) * float32(0.001)``; None: the
        noisy frames' timestep, the pre-trained checkpoints)."""
        if self.variant is not None:
            from vidax.schedulers.unipc import scale_timesteps

            t = self.variant.conditional_frame_timestep
            return None if t is None else float(scale_timesteps(np.float32(t)))
        return CONDITIONAL_FRAME_TIMESTEP

    def encode_condition(self, pixels: np.ndarray, batch: int) -> jax.Array:
        """Conditioning frames ``(3, F, H, W)`` in ``[-1, 1]`` -> normalised latents ``(B, 16, (F - 1) / 4 + 1, h, w)``
        (the posterior mean, as the reference's ``sample_mode="argmax"``)."""
        video = jnp.asarray(pixels[None], self.vae_params_dtype)
        mean, _ = wan_vae.encode(self.vae_params, self.vae_cfg, video)
        z = wan_vae.normalize_latents(self.vae_cfg, mean.astype(jnp.float32))
        return jnp.broadcast_to(z, (batch, *z.shape[1:]))

    @property
    def vae_params_dtype(self):
        return jax.tree_util.tree_leaves(self.vae_params)[0].dtype

    def decode_latents(self, latents: jax.Array, on_chunk=None) -> np.ndarray:
        """``(B, 16, T, h, w)`` diffusion latents -> float32 video ``(B, F, H, W, 3)`` in ``[0, 1]``."""
        z = wan_vae.denormalize_latents(self.vae_cfg, jnp.asarray(latents, jnp.float32))
        video = np.asarray(wan_vae.decode(self.vae_params, self.vae_cfg, z.astype(self.vae_params_dtype),
                                          on_chunk=on_chunk), np.float32)
        check_finite_video(video)
        return np.clip(video.transpose(0, 2, 3, 4, 1) / 2 + 0.5, 0.0, 1.0)

    def transformer_tree(self) -> dict:
        """The whole transformer parameter tree, the stack stacked (a device copy with chunks; tools and tests)."""
        return cp_block_loop.stacked_tree(self.transformer_params, self.stacks)

    def compile_step(self, args: tuple, finish_args: tuple, guidance_scale: float | None,
                     conditional_frame_timestep: float | None):
        """Compile one sampler step's transformer evaluation for these inputs (placed as the call places them).

        ``args``: ``(x (B, 16, T, h, w) float32, sigma (B,) float32, prompt_embeds (B', 512, D), cond_latents
        (B, 16, T, h, w), indicator (B, 1, T, 1, 1))`` with ``B' = 2B`` rows ``[negative, prompt]`` under guidance;
        ``finish_args``: ``(gt_velocity (B, 16, T, h, w), indicator)`` (:func:`step_hooks`).

        Returns:
          ``step(params, args, finish_args) -> float32 (B, 16, T, h, w)``: the step's velocity.
        """
        prepare, finish = step_hooks(self.compute_dtype, guidance_scale, conditional_frame_timestep)
        return cp_block_loop.compile_step(self.transformer_params, self.stacks, args, finish_args,
                                          cfg=self.transformer_cfg, attention=self.attention, prepare=prepare,
                                          finish=finish, mesh=self.mesh, rules=self.rules,
                                          overlap=self.offload_overlap)

    def __call__(
        self,
        prompt: str | list[str],
        negative_prompt: str | list[str] | None = None,
        *,
        image: Any = None,
        last_image: Any = None,
        video: Any = None,
        height: int = 704,
        width: int = 1280,
        num_frames: int = 93,
        num_inference_steps: int = 36,
        guidance_scale: float = 7.0,
        num_latent_conditional_frames: int | None = None,
        seed: int = 0,
        latents: np.ndarray | None = None,
        output_type: str = "uint8",
        progress: bool | Progress | None = None,
    ) -> VideoOutput:
        """Generate worlds: from text, from a first frame (``image``), or continuing a clip (``video``).

        Args:
          prompt: one prompt or a list (batch; video-to-world takes one prompt, as the reference).
          negative_prompt: the unconditional prompt of classifier-free guidance (default: the reference's
            :data:`~vidax.models.cosmos_predict25.presets.DEFAULT_NEGATIVE_PROMPT`).
          image: image-to-world's first frame (a path, a PIL image or a uint8 ``(H, W, 3)`` array), resized to the
            video's size as the reference resizes it.
          last_image: must be None (no last-frame conditioning).
          video: video-to-world's clip (a path, a list of frames or a uint8 ``(T, H, W, 3)`` array): its last
            ``4 (n - 1) + 1`` frames condition the first ``n`` latent frames.
          height, width: pixels, multiples of 16 (704 x 1280, the release's 720p).
          num_frames: ``4k + 1`` frames (93 = 24 latent frames, the model's training length).
          num_inference_steps: sampler steps (36: diffusers' default, the release's 35 on its n+1-point grid).
          guidance_scale: classifier-free guidance (7.0); 1 or less: one evaluation per step, no negative prompt.
          num_latent_conditional_frames: video-to-world's conditioning latent frames, 1 or 2 (default 2).
          seed: PRNG seed of the initial noise.
          latents: explicit initial latents float32 ``(B, 16, T', H/8, W/8)`` instead of noise.
          output_type: "uint8" frames in [0, 255], or "float" frames in [0, 1].
          progress: show progress.

        Returns:
          :class:`vidax.video.VideoOutput` with frames ``(B, F, H, W, 3)`` at 16 fps.

        Raises:
          ValueError: a ``last_image``, both ``image`` and ``video``, a video for several prompts or shorter than the
            conditioning needs, invalid sizes, mismatched prompt batches or latents, a bad seed or guidance scale,
            an unknown output type; unreadable images and clips (:class:`vidax.core.images.ImageError`).
        """
        if last_image is not None:
            raise ValueError("Cosmos-Predict2.5 has no last-frame conditioning: pass image= (the first frame) or "
                             "video= (a clip to continue)")
        check_inputs(height, width, num_frames, output_type)
        task = "v2v" if video is not None else "i2v" if image is not None else "t2v"
        check_conditioning(task, None, num_latent_conditional_frames)
        n_cond = num_latent_conditional_frames or MAX_CONDITIONAL_FRAMES
        prompts, negatives = prompt_batch(prompt, DEFAULT_NEGATIVE_PROMPT if negative_prompt is None
                                          else negative_prompt)
        if video is not None and len(prompts) != 1:
            raise ValueError(f"video-to-world takes one prompt per call (got {len(prompts)}), as the reference")
        seed = check_seed(seed)
        n = int(num_inference_steps)
        if n < 1:
            raise ValueError(f"num_inference_steps must be at least 1, got {num_inference_steps}")
        scale = check_guidance(guidance_scale)
        guided = scale > 1.0
        b = len(prompts)
        shape = self.latent_shape(b, height, width, num_frames)
        if latents is not None and tuple(np.shape(latents)) != shape:
            raise ValueError(f"latents have shape {tuple(np.shape(latents))}, expected {shape} (B, C, T, H, W) for "
                             "these sizes")
        if n_cond > shape[2] and video is not None:
            raise ValueError(f"{n_cond} conditional latent frames for a {num_frames}-frame video ({shape[2]} latent "
                             "frames): generate more frames or pass num_latent_conditional_frames=1")
        pixels, cond_frames = conditioning_pixels(image, video, height, width, n_cond)
        check_parallel(self.transformer_cfg, self.mesh, self.rules, batch=2 * b if guided else b)
        scheduler = self.scheduler
        progress = as_progress(self.progress if progress is None else progress)
        metrics: dict[str, Any] = {"load_s": self.load_seconds, "vae_encode_s": 0.0}

        t0 = time.perf_counter()
        with progress.stage("text encoder"):
            # [negative, prompt] in one batch and one encoding: a freed encoder is loaded once per call (each row
            # is what its prompt gives alone)
            embeds = jnp.asarray(self.text.encode(negatives + prompts if guided else prompts))
            jax.block_until_ready(embeds)
        metrics["text_encoder_s"] = time.perf_counter() - t0

        state = scheduler.set_timesteps(n)
        if latents is None:
            noise = jax.random.normal(jax.random.key(seed), shape, jnp.float32)
        else:
            noise = jnp.asarray(latents, jnp.float32)
        t = shape[2]
        cond_latents = jnp.zeros(shape, jnp.float32)
        if pixels is not None:
            t0 = time.perf_counter()
            with progress.stage("VAE encode"):
                z = self.encode_condition(pixels, b)
                cond_latents = cond_latents.at[:, :, :cond_frames].set(z[:, :, :cond_frames])
                jax.block_until_ready(cond_latents)
            metrics["vae_encode_s"] = time.perf_counter() - t0
        indicator = jnp.broadcast_to((jnp.arange(t) < cond_frames).astype(jnp.float32).reshape(1, 1, t, 1, 1),
                                     (b, 1, t, 1, 1))
        gt_velocity = (noise - cond_latents) * indicator
        cft = self.conditional_frame_timestep()
        model_timesteps = np.asarray(state.model_timesteps, np.float32)
        steps = int(state.num_inference_steps)  # an original release's Karras grid: n + 1
        metrics.update(parallel_metrics(self.mesh, self.rules, self.transformer_cfg.num_attention_heads,
                                        self.attention))
        aux_device = first_device(self.vae_params)
        rules = self.rules
        g = scale if guided else None
        x, cond_m, ind_m, gt_m = to_mesh((noise, cond_latents, indicator, gt_velocity), self.mesh, rules)
        with mesh_context(self.mesh):
            t0 = time.perf_counter()
            emb_m = to_mesh(embeds, self.mesh, rules, split_batch=True)

            def sigma(i):
                return to_mesh(jnp.full((b,), model_timesteps[i], jnp.float32), self.mesh, rules)

            with progress.stage("compiling"), recording() as ran:
                compiled = self.compile_step((x, sigma(0), emb_m, cond_m, ind_m), (gt_m, ind_m), g, cft)
            self._attention_ran = metrics["attention"] = ran_label(ran, self.attention, self._attention_ran)
            metrics["compile_s"] = time.perf_counter() - t0
            metrics.update(cp_block_loop.block_metrics(self.stacks, self.offload_overlap))

            step_times = []
            with progress.stage("denoising", total=steps, unit="step") as stage:
                for i in range(steps):
                    ts = time.perf_counter()
                    v = compiled(self.transformer_params, (x, sigma(i), emb_m, cond_m, ind_m), (gt_m, ind_m))
                    x, state = scheduler.step(state, v, x, i)
                    jax.block_until_ready(x)
                    step_times.append(time.perf_counter() - ts)
                    stage.update()
        metrics["step_s"] = float(np.median(step_times)) if step_times else 0.0
        metrics["sampling_s"] = float(np.sum(step_times))

        t0 = time.perf_counter()
        x = jax.device_put(x, aux_device)
        with progress.stage("VAE decode", total=t, unit="frame") as stage:
            frames = self.decode_latents(x, on_chunk=stage.update)
        metrics["vae_decode_s"] = time.perf_counter() - t0
        if output_type == "uint8":
            frames = np.round(frames * 255.0).astype(np.uint8)
        finish_metrics(metrics, height=height, width=width, num_frames=frames.shape[1], num_inference_steps=steps,
                       fps=self.fps)
        return VideoOutput(frames=frames, fps=self.fps, metrics=metrics, latents=np.asarray(x))


__all__ = ["CONDITIONAL_FRAME_TIMESTEP", "CosmosPredict25Pipeline", "guide"]
