"""Memory planner for HunyuanVideo: which (dp, tp, sp, offload chunk) fits, and which is fastest.

As the Wan planner (:mod:`vidax.models.wan.planner`; docs/design.md, "Planner"), the transformer step is compiled for
every candidate split on abstract shapes (no weight read, nothing allocated) exactly as the pipeline compiles it:
resident (:func:`vidax.models.hunyuanvideo.pipeline._step`, both block stacks under ``lax.scan``), or offloaded
(:func:`vidax.models.hunyuanvideo.block_loop.compile_pieces`: prologue, one block program per stack kind at the chunk
size, epilogue); per-device bytes from ``compiled.memory_analysis()``.

Unlike Wan's, this planner also counts the rest of the pipeline, on the first device of the mesh (where the text
encoders and the VAE run) and beside whatever of the transformer stays there:

``text encoder``
    the Llama-3-8B text tower (LLaVA-Llama-3-8B with its CLIP-L/336 vision tower and projector for image-to-video;
    ``text_encoder_dtype``, float32 by default: 30.0 GB) and CLIP-L's text tower (float32), counted from their spec
    trees (:func:`text_encoder_bytes`); on accelerators the pipeline frees them after encoding
    (``text_encoder_residency="auto"``), so they share device memory with the transformer's weights only, not with
    its step (``text_resident=True``: counted in every phase). Their activations (a few hundred tokens) are
    negligible and not counted.
``vae decode``
    the VAE decoder's largest tile program, compiled (:func:`vae_decode_bytes`), plus the decoded tiles it keeps for
    blending and the composed video. The pipeline's default tiles only in time (the reference's default: 17 frames
    at the full frame size, about 62 GiB in XLA:CPU's account at 720p); ``vae_tiling=True`` (the reference's
    ``enable_tiling()``, ``vidax generate --vae-tiling``) tiles space too (256-pixel tiles, about 5 GiB).
VAE weights
    the whole VAE (encoder and decoder, ``vae_dtype``) stays on the first device from loading on: counted in every
    phase there.

The transformer's weights by dtype: every leaf is the weight dtype except the float32-pinned ones
(:func:`parameter_counts`): the AdaLN projections of the 60 blocks alone are 3.4 billion float32 parameters
(13.6 GB) of the 12.8 billion, so a bfloat16 13B transformer is 32.7 GB, not 25.6. Tensor parallelism splits them
(``adaln`` over ``tensor``); offloading streams them with their blocks.

Not counted: the sampler's state (a few latent-sized arrays), the image-to-video VAE encode (one frame, smaller than
a decode tile), and the host side (offloaded chunks live in host memory).

bfloat16 on XLA:CPU (planning for accelerators on the CPU backend): XLA:CPU has no bfloat16 matmul, so it converts
the weights to float32 before each dot, and its loop-invariant code motion hoists that conversion out of the block
loop: the whole stack's weights in float32 become temporaries (the 13B at tp 4: 18.1 GiB per device instead of 8.8).
Accelerators multiply bfloat16 natively and have no such copy, so the planner compiles low-precision steps on CPU
with ``while-loop-invariant-code-motion`` disabled (:func:`step_compiler_options`): each block then converts its own
weights, and the figures are the accelerator's layout of the same program. (A bfloat16 run *on* the CPU backend does
hold the hoisted copies.)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from vidax.core.attention import AttentionImpl, resolve_implementation
from vidax.core.offload import ChunkPlan
from vidax.core.params import abstract_params, flatten
from vidax.core.planner import (Estimate, PipelinePlan, Split, chunk_of, compiled_bytes, compiler_options,
                                format_bytes, joint_comm_bytes, layer_bytes, plan_candidates, planning_devices, recommend,
                                sharded_bytes, step_compiler_options, weight_bytes, with_shardings)
from vidax.core.planner import candidate_splits as _candidate_splits
from vidax.core.planner import default_chunks as _default_chunks
from vidax.core.sharding import make_mesh
from vidax.encoders.clip import CLIPVisionConfig
from vidax.encoders.clip_text import CLIPTextConfig, clip_text_specs
from vidax.encoders.llama import LlamaConfig, llama_specs
from vidax.encoders.llava import LlavaConfig, llava_specs
from vidax.models.hunyuanvideo.config import HunyuanVideoTransformerConfig
from vidax.models.hunyuanvideo.sharding import HUNYUAN_VIDEO_RULES
from vidax.models.hunyuanvideo.transformer import STACKS, num_tokens, transformer_specs
from vidax.models.hunyuanvideo.vae import HunyuanVideoVAEConfig, VAETiling

#: The released text tower: the LLaVA-Llama-3-8B language model (hunyuanvideo-community/HunyuanVideo
#: ``text_encoder/config.json``).
LLAMA_3_8B = LlamaConfig(vocab_size=128320, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                         rms_norm_eps=1e-5, rope_theta=500000.0)
#: openai/clip-vit-large-patch14's text tower (``text_encoder_2``).
CLIP_L_TEXT = CLIPTextConfig(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                             projection_dim=768)
#: The image-to-video text encoder: LLaVA-Llama-3-8B (CLIP-L/336 vision tower, two-layer projector).
LLAVA_LLAMA_3_8B = LlavaConfig(
    text=LLAMA_3_8B, image_token_index=128257, pad_token_id=128258,
    vision=CLIPVisionConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                            image_size=336, patch_size=14, hidden_act="quick_gelu", projection_dim=768))
#: Llama tokens per prompt after the template's crop (``max_sequence_length``).
TEXT_TOKENS = 256
#: Image-to-video: the four assistant-frame tokens the reference drops after the image features.
_I2V_DROPPED = 4
VAE_TEMPORAL, VAE_SPATIAL = 4, 8


@dataclass(frozen=True)
class HunyuanVideoModel:
    """What the planner sizes: the transformer, the VAE and the two text encoders (configurations only).

    Attributes:
      transformer: the diffusion transformer.
      vae: the VAE.
      text_encoder: the Llama text tower (text-to-video) or the LLaVA model (image-to-video).
      text_encoder_2: CLIP's text tower.
    """

    transformer: HunyuanVideoTransformerConfig
    vae: HunyuanVideoVAEConfig = field(default_factory=HunyuanVideoVAEConfig)
    text_encoder: LlamaConfig | LlavaConfig = LLAMA_3_8B
    text_encoder_2: CLIPTextConfig = CLIP_L_TEXT

    @property
    def text_tokens(self) -> int:
        """Text tokens the transformer receives: 256; image-to-video adds the image features kept every k-th
        (``ceil(576 / k)``, k = 2 for ``latent_concat``, 4 for ``token_replace``) and drops 4 (540 and 396)."""
        if not isinstance(self.text_encoder, LlavaConfig):
            return TEXT_TOKENS
        k = 4 if self.transformer.image_condition_type == "token_replace" else 2
        return -(-self.text_encoder.num_image_features // k) + TEXT_TOKENS - _I2V_DROPPED


#: The released models of the presets (``HunyuanVideoPreset.model``).
ARCHITECTURES: dict[str, HunyuanVideoModel] = {
    "HunyuanVideo": HunyuanVideoModel(HunyuanVideoTransformerConfig()),
    "HunyuanVideo-I2V": HunyuanVideoModel(
        HunyuanVideoTransformerConfig(in_channels=33, guidance_embeds=False, image_condition_type="latent_concat"),
        text_encoder=LLAVA_LLAMA_3_8B),
}


def preset_architecture(preset: Any) -> HunyuanVideoModel:
    """The released model of a preset (:data:`vidax.models.hunyuanvideo.presets.PRESETS`).

    Raises:
      ValueError: a preset whose model the planner does not know (the known ones named).
    """
    if preset.model not in ARCHITECTURES:
        raise ValueError(f"the planner knows the models {', '.join(ARCHITECTURES)}; preset {preset.name!r} is "
                         f"{preset.model!r} (pass --checkpoint)")
    return ARCHITECTURES[preset.model]


def folder_architecture(folder: str | Path) -> HunyuanVideoModel:
    """The model of a checkpoint folder, from its configuration files only (any layout).

    Raises:
      CheckpointError: a folder the family does not read (:func:`vidax.models.hunyuanvideo.layout.resolve_checkpoint`).
    """
    from vidax.core.config_values import read_json
    from vidax.models.hunyuanvideo.layout import resolve_checkpoint
    from vidax.models.hunyuanvideo.text import text_encoder_folders

    ckpt = resolve_checkpoint(Path(folder))
    folders = text_encoder_folders(ckpt)
    config = read_json(folders.text_encoder / "config.json")
    text = LlavaConfig.from_dict(config) if folders.kind == "llava" else LlamaConfig.from_dict(config)
    return HunyuanVideoModel(ckpt.transformer_config(), ckpt.vae_config(), text,
                             CLIPTextConfig.from_dict(read_json(folders.text_encoder_2 / "config.json")))


# -- weights ---------------------------------------------------------------------------------------------------------


def parameter_counts(cfg: HunyuanVideoTransformerConfig) -> dict[str, int]:
    """Parameters of a transformer by kind.

    Returns:
      ``{"total", "fp32" (float32-pinned leaves), "adaln" (the blocks' AdaLN projections, all float32), "double",
      "single" (the two block stacks), "resident" (outside the stacks: what stays on the device when offloading)}``.
      The 13B release: 12.82 billion, 3.40 billion of them AdaLN.
    """
    out = dict.fromkeys(("total", "fp32", "adaln", "double", "single", "resident"), 0)
    stacks = {v: k for k, v in STACKS.items()}
    for path, spec in flatten(transformer_specs(cfg)):
        n = math.prod(spec.shape)
        top = path.split("/")[0]
        out["total"] += n
        out["fp32"] += n if spec.fp32 else 0
        out["adaln"] += n if top in stacks and path.split("/")[1] in ("norm1", "norm1_context", "norm") else 0
        out[stacks.get(top, "resident")] += n
    return out


def text_encoder_bytes(model: HunyuanVideoModel, dtype: Any = "float32", clip_dtype: Any = "float32") -> dict:
    """Weight bytes of the text encoders as the pipeline loads them (``load_text_encoders``).

    Returns:
      ``{"text_encoder": Llama (or LLaVA) bytes in ``dtype``, "text_encoder_2": CLIP text bytes in ``clip_dtype``}``
      (norm scales float32). The release in float32: 30.0 GB (7.50 billion parameters: the Llama-3-8B text tower
      without its LM head) and 0.49 GB.
    """
    te = model.text_encoder
    specs = llava_specs(te) if isinstance(te, LlavaConfig) else llama_specs(te)
    return {"text_encoder": weight_bytes(specs, dtype),
            "text_encoder_2": weight_bytes(clip_text_specs(model.text_encoder_2), clip_dtype)}


def vae_bytes(vae: HunyuanVideoVAEConfig, dtype: Any = "float32") -> int:
    """Weight bytes of the whole VAE (encoder and decoder: the pipelines load both)."""
    from vidax.models.hunyuanvideo.vae import vae_specs

    return weight_bytes(vae_specs(vae), dtype)


def _tiling(tiling: VAETiling | bool | None) -> VAETiling:
    from vidax.models.hunyuanvideo import vae as hvae

    return hvae.VAETiling() if tiling is True else (tiling or hvae.DEFAULT_TILING)


def vae_decode_tiles(vae: HunyuanVideoVAEConfig, latent_shape: tuple[int, ...],
                     tiling: VAETiling | bool | None = None) -> dict:
    """How :func:`~vidax.models.hunyuanvideo.vae.decode` cuts ``latent_shape`` latents ``(B, C, T, h, w)`` into
    decoder calls.

    Args:
      tiling: None or False: the pipeline's default (frame tiles at the full frame size); True: the reference's
        ``enable_tiling()`` (also spatial tiles); or a :class:`VAETiling`.

    Returns:
      ``{"tile": (t, h, w) of the largest call, "frame_tiles": frame tiles, "spatial_tiles": calls per frame tile,
      "tile_frames": video frames of the largest call, "spatial": whether space is tiled}``.
    """
    from vidax.models.hunyuanvideo import vae as hvae

    q = _tiling(tiling).resolve(vae)
    _, _, t, h, w = latent_shape
    temporal = _tiling(tiling).temporal and t > q["latent_frames"]
    spatial = _tiling(tiling).spatial and (h > q["latent_height"] or w > q["latent_width"])
    tt = min(t, q["latent_frames"] + 1) if temporal else t
    th, tw = (min(h, q["latent_height"]), min(w, q["latent_width"])) if spatial else (h, w)
    # A frame tile after the first that decodes to one frame is skipped, as the reference skips it.
    starts = range(0, t, q["latent_stride_frames"]) if temporal else range(1)
    frame_tiles = 0
    for i in starts:
        if i > 0 and hvae.decoded_frames(vae, min(tt, t - i)) == 1:
            break
        frame_tiles += 1
    spatial_tiles = (len(range(0, h, q["latent_stride_height"])) * len(range(0, w, q["latent_stride_width"]))
                     if spatial else 1)
    return {"tile": (tt, th, tw), "frame_tiles": frame_tiles, "spatial_tiles": spatial_tiles,
            "tile_frames": hvae.decoded_frames(vae, tt), "spatial": spatial}


def vae_decode_bytes(vae: HunyuanVideoVAEConfig, latent_shape: tuple[int, ...], dtype: Any = "float32",
                     tiling: VAETiling | bool | None = None, options: dict | None = None) -> dict:
    """Device bytes of the VAE decode of ``latent_shape`` latents ``(B, C, T, h, w)``, as
    :func:`~vidax.models.hunyuanvideo.vae.decode` tiles it (:func:`vae_decode_tiles`).

    The largest decoder call is compiled on abstract arguments (the decoder's weights, one tile of latents); the
    rest is arithmetic over float32 video ``(B, 3, frames, H, W)``: while the last frame tile runs, the earlier frame
    tiles' outputs are kept for blending (and, with spatial tiles, the current frame tile's spatial tiles, which
    overlap by ``tile / stride`` per axis); then all frame tiles and the composed video are live together.

    Args:
      tiling: as :func:`vae_decode_tiles`.
      options: XLA options of the compilation.

    Returns:
      :func:`vae_decode_tiles`' keys and ``{"program": bytes of the largest call (arguments, output, temporaries),
      "peak": the decode's peak (the decoder's weights included), "decoder_weights": bytes}``.
    """
    from vidax.models.hunyuanvideo import vae as hvae

    tiles = vae_decode_tiles(vae, latent_shape, tiling)
    q = _tiling(tiling).resolve(vae)
    b, c, t, h, w = latent_shape
    specs = hvae.vae_specs(vae)
    params = {k: v for k, v in abstract_params(specs, dtype).items() if k in hvae.DECODER_PARTS}
    z = jax.ShapeDtypeStruct((b, c, *tiles["tile"]), np.dtype(dtype))
    program = compiled_bytes(hvae._decode_program.lower(params, vae, z).compile(options))
    s = vae.spatial_compression_ratio
    frame = b * vae.out_channels * (h * s) * (w * s) * 4  # one float32 video frame at the full size
    tile_video = tiles["tile_frames"] * frame
    kept = (tiles["frame_tiles"] - 1) * tile_video  # earlier frame tiles, waiting to be blended
    if tiles["spatial"]:
        kept += int(tile_video * (q["sample_height"] / q["stride_height"]) * (q["sample_width"] / q["stride_width"]))
    decoder = weight_bytes({k: v for k, v in specs.items() if k in hvae.DECODER_PARTS}, dtype)
    compose = tiles["frame_tiles"] * tile_video + hvae.decoded_frames(vae, t) * frame + decoder
    return {**tiles, "program": program, "peak": max(program + kept, compose), "decoder_weights": decoder}


# -- splits, chunks, communication ------------------------------------------------------------------------------------


def latent_shape(cfg: HunyuanVideoTransformerConfig, height: int, width: int, num_frames: int,
                 prompts: int = 1) -> tuple[int, int, int, int, int]:
    """The transformer input ``(B, in_channels, T, H / 8, W / 8)`` of ``num_frames`` frames of ``height x width``."""
    return (prompts, cfg.in_channels, (num_frames - 1) // VAE_TEMPORAL + 1, height // VAE_SPATIAL,
            width // VAE_SPATIAL)


def candidate_splits(cfg: HunyuanVideoTransformerConfig, devices: int, batch: int) -> list[tuple[int, int, int]]:
    """Every ``(dp, tp, sp)`` with ``dp * tp * sp == devices`` the model runs: dp divides the transformer batch (2 x
    prompts with true CFG), tp the head count and the MLP width; any sp (both token streams are padded)
    (:func:`vidax.core.planner.candidate_splits`)."""
    return _candidate_splits(devices, batch, cfg.num_attention_heads, cfg.mlp_dim)


def default_chunks(cfg: HunyuanVideoTransformerConfig) -> list[int]:
    """Offload chunk sizes to try, one for both stacks (:func:`vidax.core.planner.default_chunks`; the 13B's 20 and 40
    blocks: 20, 10, 5, 2, 1; 20 is the paper's "20/40")."""
    return _default_chunks(cfg.num_layers, cfg.num_single_layers)


def comm_bytes(cfg: HunyuanVideoTransformerConfig, batch: int, tokens: int, text_tokens: int, dtype, dp: int,
               tp: int, sp: int) -> int:
    """Bytes one device sends per step in the two block stacks (the cost model's communication term): the joint rows
    of video and text tokens through 20 dual-stream and 40 single-stream blocks
    (:func:`vidax.core.planner.joint_comm_bytes`)."""
    return joint_comm_bytes(dim=cfg.dim, heads=cfg.num_attention_heads, dual_layers=cfg.num_layers,
                            single_layers=cfg.num_single_layers, batch=batch, tokens=tokens, text_tokens=text_tokens,
                            dtype=dtype, dp=dp, tp=tp, sp=sp)


# -- compiling the step ----------------------------------------------------------------------------------------------


def _inputs(cfg, mesh, shape, text_tokens, dtype, guided):
    """The step's inputs as the pipeline places them (the text over data where dp divides its batch)."""
    b = shape[0]
    rep = NamedSharding(mesh, PartitionSpec())
    dp = mesh.shape["data"]
    tb = 2 * b if guided else b

    def text(*tail):
        split = dp > 1 and tb % dp == 0
        return NamedSharding(mesh, HUNYUAN_VIDEO_RULES.spec(("batch",) + tail) if split else PartitionSpec())

    return dict(
        x=jax.ShapeDtypeStruct(shape, jnp.float32, sharding=rep),
        t=jax.ShapeDtypeStruct((b,), jnp.float32, sharding=rep),
        context=jax.ShapeDtypeStruct((tb, text_tokens, cfg.text_embed_dim), dtype, sharding=text(None, None)),
        mask=jax.ShapeDtypeStruct((tb, text_tokens), jnp.int32, sharding=text(None)),
        pooled=jax.ShapeDtypeStruct((tb, cfg.pooled_projection_dim), dtype, sharding=text(None)),
        guidance=jax.ShapeDtypeStruct((b,), jnp.float32, sharding=rep) if cfg.guidance_embeds else None,
        true_cfg=jax.ShapeDtypeStruct((), jnp.float32, sharding=rep),
    )


def estimate_split(cfg: HunyuanVideoTransformerConfig, dp: int, tp: int, sp: int, devices: Sequence, *, shape: tuple,
                   text_tokens: int, dtype, guided: bool = False, chunks: Sequence[int] = (), resident: bool = True,
                   attention: str = "chunked", overlap: bool = True,
                   first_device: dict | None = None) -> list[Estimate]:
    """Compile one mesh split (resident and/or at each offload chunk size) and estimate its per-device memory.

    Args:
      cfg: the transformer; dp, tp, sp: the split; devices: ``dp * tp * sp`` devices to compile on.
      shape: the transformer input ``(B, C, T, H, W)``; text_tokens: ``L``; dtype: weight dtype.
      guided: true CFG (the transformer batch is 2B).
      chunks: offload chunk sizes (one per both stacks); resident: also estimate the resident step.
      attention: attention implementation compiled; overlap: count the second chunk buffer.
      first_device: the rest of the pipeline on the first device (:func:`plan_hunyuanvideo`): ``{"always": bytes
        in every phase (VAE weights, kept text encoders), "text encoder": bytes, "vae decode": bytes}``; the
        transformer's weights on that device are added to its two phases here.

    Returns:
      one :class:`~vidax.core.planner.Estimate` per configuration (resident first); phases ``"step"`` or
      ``"prologue"``, ``"chunks"``, ``"epilogue"``, plus ``"text encoder"`` and ``"vae decode"`` with
      ``first_device``.
    """
    from vidax.core.placement import mesh_context
    from vidax.models.hunyuanvideo.block_loop import KINDS, compile_pieces, stack_layers
    from vidax.models.hunyuanvideo.pipeline import _step

    dtype = jnp.dtype(dtype)
    mesh = make_mesh(dp, tp, sp, devices=list(devices))
    specs = transformer_specs(cfg)
    params = with_shardings(abstract_params(specs, dtype), HUNYUAN_VIDEO_RULES.param_shardings(specs, mesh))
    inp = _inputs(cfg, mesh, shape, text_tokens, dtype, guided)
    args = tuple(inp[k] for k in ("x", "t", "context", "mask", "pooled", "guidance", "true_cfg"))
    batch = shape[0] * (2 if guided else 1)
    comm = comm_bytes(cfg, batch, num_tokens(cfg, shape), text_tokens, dtype, dp, tp, sp)
    impl = AttentionImpl(attention)
    options = step_compiler_options(mesh.devices.flat[0].platform, dtype)
    extra = first_device or {}
    always = extra.get("always", 0)

    def rest(weights: int) -> dict:
        """The first device's phases outside the step, beside ``weights`` bytes of the transformer."""
        return {k: weights + always + extra[k] for k in ("text encoder", "vae decode") if k in extra}

    out = []
    with mesh_context(mesh):
        if resident:
            step = jax.jit(_step, static_argnames=("cfg", "attention_impl", "guided", "mesh", "rules"))
            c = step.lower(params, *args, cfg=cfg, attention_impl=impl, guided=guided, mesh=mesh,
                           rules=HUNYUAN_VIDEO_RULES).compile(options)
            phases = {"step": compiled_bytes(c) + always, **rest(sharded_bytes(params))}
            out.append(Estimate(Split(dp, tp, sp), peak_bytes=max(phases.values()), phases=phases, comm_bytes=comm))
        res = {k: v for k, v in params.items() if k not in STACKS.values()}
        r_bytes, in_bytes = sharded_bytes(res), sharded_bytes(inp)

        layers = {kind: layer_bytes(params[STACKS[kind]]) for kind in KINDS}  # one block of a stack, per device
        for n in chunks:
            abstract_chunks = {kind: chunk_of(params[STACKS[kind]], n) for kind in KINDS}
            pro_c, programs, epi_c = compile_pieces(
                res, abstract_chunks, *args, cfg=cfg, attention=impl, guided=guided, mesh=mesh,
                rules=HUNYUAN_VIDEO_RULES, compiler_options=options)
            temb = batch * cfg.dim * 4 // dp * (2 if cfg.image_condition_type == "token_replace" else 1)
            nxt = n * max(layers.values()) if overlap else 0  # the next chunk arriving (of either stack)
            phases = {
                "prologue": compiled_bytes(pro_c) + always,
                "chunks": max(compiled_bytes(p) for p in programs.values()) + r_bytes + in_bytes + temb + nxt + always,
                "epilogue": compiled_bytes(epi_c) + in_bytes + always,
                **rest(r_bytes),
            }
            plans = {kind: ChunkPlan(n_layers, n) for kind, n_layers in zip(KINDS, stack_layers(cfg).values())}
            out.append(Estimate(Split(dp, tp, sp, n), peak_bytes=max(phases.values()), phases=phases, comm_bytes=comm,
                                transfer_bytes=sum(p.padded_layers * layers[k] for k, p in plans.items()),
                                launches=sum(p.num_chunks for p in plans.values())))
    return out


# -- the plan ---------------------------------------------------------------------------------------------------------


#: The planner's result (:class:`vidax.core.planner.PipelinePlan`: the whole pipeline, the report).
HunyuanVideoPlan = PipelinePlan
#: What the report says when no split fits and the VAE decode without spatial tiles is the smallest peak.
DECODE_HINT = "the VAE decode is that peak: decode in spatial tiles, --vae-tiling"


def plan_hunyuanvideo(model: HunyuanVideoModel | HunyuanVideoTransformerConfig, *, height: int, width: int,
                      num_frames: int, dtype="bfloat16", devices: int, memory_bytes: int | None = None,
                      reserve_bytes: int = 0, true_cfg: bool = False, prompts: int = 1,
                      chunks: Sequence[int] | None = None, splits: Sequence[tuple[int, int, int]] | None = None,
                      attention: str = "auto", overlap: bool = True, model_name: str | None = None,
                      offload_if_needed: bool = False, text_encoder_dtype: Any = "float32", vae_dtype: Any = "float32",
                      vae_tiling: VAETiling | bool | None = None, text_resident: bool = False,
                      first_device: bool = True, log: Callable[[str], None] | None = None) -> HunyuanVideoPlan:
    """Estimate every candidate split's per-device peak for one generation setting, and recommend one.

    Args:
      model: the model (:class:`HunyuanVideoModel`), or a transformer configuration alone (then
        ``first_device=False``: the step only).
      height, width, num_frames: the video (pixels, frames); dtype: transformer weight dtype.
      devices: devices of the run (the mesh size, ``dp * tp * sp``).
      memory_bytes: per-device budget; None: report without a fit test.
      reserve_bytes: per-device memory kept free for anything not counted.
      true_cfg: true classifier-free guidance (a negative prompt and ``true_cfg_scale > 1``: the step runs a batch
        of 2 x prompts); the embedded guidance of the release runs one evaluation per step.
      prompts: prompts per call.
      chunks: offload chunk sizes to try, each for both stacks (default :func:`default_chunks`); ``()``: none.
      splits: ``(dp, tp, sp)`` candidates (default :func:`candidate_splits`).
      attention: implementation to compile ("auto": resolved for the compile target's backend).
      overlap: offloading with copy/compute overlap (two chunk buffers) or serial (one).
      model_name: name for the report.
      offload_if_needed: compile the offloaded candidates only if no resident split fits the budget.
      text_encoder_dtype, vae_dtype: the pipeline's (float32 by default).
      vae_tiling: the decode's tiling (None: the pipeline's default, frame tiles only; True: ``enable_tiling()``).
      text_resident: the text encoders stay loaded (``text_encoder_residency="resident"``; the CPU default): counted
        in every phase, not only while encoding.
      first_device: count the text encoders and the VAE on the first device (the module docstring).
      log: progress callback (one line per split).

    Returns:
      :class:`HunyuanVideoPlan`.

    Raises:
      ValueError: fewer devices to compile on than ``devices`` (:func:`vidax.core.planner.planning_devices`); no
        split of ``devices`` the model can run.
    """
    t0 = time.perf_counter()
    if isinstance(model, HunyuanVideoTransformerConfig):
        model, first_device = HunyuanVideoModel(model), False
    cfg = model.transformer
    devs, target = planning_devices(devices)
    shape = latent_shape(cfg, height, width, num_frames, prompts)
    batch = prompts * (2 if true_cfg else 1)
    splits = list(splits) if splits is not None else candidate_splits(cfg, devices, batch)
    if not splits:
        raise ValueError(f"no (dp, tp, sp) split of {devices} devices runs this model (heads "
                         f"{cfg.num_attention_heads}, MLP width {cfg.mlp_dim}, batch {batch})")
    chunks = default_chunks(cfg) if chunks is None else list(chunks)
    impl = resolve_implementation(attention, devs[0].platform)
    text_tokens = model.text_tokens
    extra, notes = None, []
    if first_device:
        text = text_encoder_bytes(model, text_encoder_dtype)
        text_total = sum(text.values())
        vae_w = vae_bytes(model.vae, vae_dtype)
        with jax.default_device(devs[0]):
            decode = vae_decode_bytes(model.vae, (prompts, model.vae.latent_channels, *shape[2:]), vae_dtype,
                                      vae_tiling, compiler_options(devs[0].platform))
        # The decode program's arguments hold the decoder's weights, already among the VAE weights of every phase.
        extra = {"always": vae_w + (text_total if text_resident else 0),
                 "text encoder": 0 if text_resident else text_total,
                 "vae decode": decode["peak"] - decode["decoder_weights"]}
        kind = "LLaVA-Llama" if isinstance(model.text_encoder, LlavaConfig) else "Llama"
        notes = [("text encoders", f"{kind} {format_bytes(text['text_encoder'])} ({np.dtype(text_encoder_dtype)}) + "
                  f"CLIP {format_bytes(text['text_encoder_2'])}, "
                  + ("kept loaded (every phase)" if text_resident else "freed after encoding (their own phase)")),
                 ("VAE", f"weights {format_bytes(vae_w)} ({np.dtype(vae_dtype)}, every phase); decode "
                  f"{format_bytes(decode['peak'])} in tiles of {decode['tile'][0]} latent frames x "
                  f"{decode['tile'][1]}x{decode['tile'][2]} latents"
                  + ("" if vae_tiling else " (no spatial tiles: --vae-tiling for less)"))]
    estimates = plan_candidates(
        splits, lambda dp, tp, sp, **kw: estimate_split(
            cfg, dp, tp, sp, devs, shape=shape, text_tokens=text_tokens, dtype=dtype, guided=true_cfg, attention=impl,
            overlap=overlap, first_device=extra, **kw),
        chunks=chunks, memory_bytes=memory_bytes, reserve_bytes=reserve_bytes, offload_if_needed=offload_if_needed,
        log=log)
    settings = dict(model=model_name, height=height, width=width, num_frames=num_frames, dtype=str(jnp.dtype(dtype)),
                    tokens=num_tokens(cfg, shape), text_tokens=text_tokens, batch=batch, attention=impl.value,
                    devices=devices, vae_tiling=bool(vae_tiling), first_device_notes=notes,
                    default_model="HunyuanVideo transformer", decode_hint=None if vae_tiling else DECODE_HINT)
    return HunyuanVideoPlan(estimates, recommend(estimates), memory_bytes, reserve_bytes, target,
                            time.perf_counter() - t0, settings)


__all__ = ["ARCHITECTURES", "CLIP_L_TEXT", "LLAMA_3_8B", "LLAVA_LLAMA_3_8B", "HunyuanVideoModel", "HunyuanVideoPlan",
           "candidate_splits", "comm_bytes", "default_chunks", "estimate_split", "folder_architecture", "latent_shape",
           "parameter_counts", "plan_hunyuanvideo", "preset_architecture", "step_compiler_options",
           "text_encoder_bytes", "vae_bytes", "vae_decode_bytes", "vae_decode_tiles", "weight_bytes"]
