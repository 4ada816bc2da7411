"""Memory planner for HunyuanVideo-1.5: which (dp, tp, sp, offload chunk) fits, and which is fastest.

As the other planners (docs/design.md, "Planner"; the shared parts in :mod:`vidax.core.planner`), the transformer step
is compiled for every candidate split on abstract shapes (no weight read, nothing allocated) exactly as the pipeline
compiles it (:func:`vidax.models.hunyuanvideo15.pipeline.step_hooks` around the transformer): resident
(:func:`vidax.models.hunyuanvideo15.block_loop.compile_whole`, the 54 blocks under ``lax.scan``), or offloaded
(:func:`~vidax.models.hunyuanvideo15.block_loop.compile_pieces`: prologue, one block program at the chunk size,
epilogue); per-device bytes from ``compiled.memory_analysis()``. With classifier-free guidance (``guidance_scale >
1``: the released 480p/720p variants' 6.0) the step runs a batch of 2 x prompts; the CFG-distilled variants
(guidance 1) run one evaluation.

The rest of the pipeline is counted on the first device of the mesh (where the encoders and the VAE run), beside
whatever of the transformer stays there:

``text encoder``
    Qwen2.5-VL-7B's language model (7.07 billion parameters, ``text_encoder_dtype``, float32 by default: 28.3 GB) and
    the byT5 glyph encoder (byt5-small with the Glyph-SDXL-v2 vocabulary); image-to-video also holds the SigLIP tower
    here (loaded with the pipeline, first used after the prompts). On accelerators the pipeline frees the encoders
    after each use (``text_encoder_residency="auto"``), so they share device memory with the transformer's weights
    only, not with its step (``text_resident=True``: counted in every phase). Their activations (1,108 tokens, a few
    hundred MB) are not counted.
``image encoder``, ``vae encode`` (image-to-video)
    SigLIP so400m (its 729 tokens; freed after use), then the VAE encoder's one program over the first frame at the
    video's size (compiled; the reference never tiles its encode).
``vae decode``
    the VAE decoder's largest tile program, compiled, with the pipeline's default tiling (the original's 256-pixel
    tiles, overlap 0.125: :data:`vidax.models.hunyuanvideo15.pipeline.DEFAULT_TILING`; every tile holds all the
    frames), while the earlier tiles' outputs wait; then the blending program (compiled) over all tiles and the
    composed video.
VAE weights
    the decoder (text-to-video) or the whole VAE (image-to-video), ``vae_dtype``, from loading on: every phase.

Not counted: the sampler's state (a few latent-sized float32 arrays), the host side (offloaded chunks live in host
memory).
"""

from __future__ import annotations

import dataclasses
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
from vidax.core.params import abstract_params
from vidax.core.planner import (Estimate, PipelinePlan, Split, candidate_splits, chunk_of, compiled_bytes,
                                compiler_options, default_chunks, format_bytes, joint_comm_bytes, layer_bytes,
                                plan_candidates, planning_devices, recommend, sharded_bytes, step_compiler_options,
                                weight_bytes, with_shardings)
from vidax.core.sharding import make_mesh
from vidax.encoders.byt5 import BYT5_SMALL, GLYPH_MAX_LENGTH
from vidax.encoders.llama import LlamaConfig, llama_specs
from vidax.encoders.qwen2_5_vl import config_from_dict
from vidax.encoders.siglip import SiglipVisionConfig, siglip_specs
from vidax.encoders.t5 import T5Config, t5_specs
from vidax.models.hunyuanvideo15 import vae as hvae
from vidax.models.hunyuanvideo15.config import TARGET_SIZES, HunyuanVideo15TransformerConfig
from vidax.models.hunyuanvideo15.presets import VARIANTS
from vidax.models.hunyuanvideo15.sharding import HUNYUAN_VIDEO15_RULES
from vidax.models.hunyuanvideo15.text import TOKENIZER_MAX_LENGTH
from vidax.models.hunyuanvideo15.transformer import STACK, num_tokens, transformer_specs

#: The released text tower: Qwen2.5-VL-7B-Instruct's language model (its ``config.json``; diffusers'
#: ``text_encoder/`` holds the same as a ``Qwen2_5_VLTextModel``).
QWEN2_5_VL_7B: LlamaConfig = config_from_dict({
    "model_type": "qwen2_5_vl_text", "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944,
    "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-6,
    "max_position_embeddings": 128000, "rope_theta": 1000000.0,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}, "Qwen2.5-VL-7B-Instruct")
#: The glyph encoder: google/byt5-small's encoder with Glyph-SDXL-v2's vocabulary (byt5-small's 384 rows resized to
#: the glyph tokenizer's 1510 tokens; diffusers' ``text_encoder_2/config.json``).
BYT5_GLYPH: T5Config = dataclasses.replace(BYT5_SMALL, vocab_size=1510)
#: The image encoder: google/siglip-so400m-patch14-384's vision tower (FLUX.1-Redux-dev's), without its pooling head.
SIGLIP_SO400M = SiglipVisionConfig(vision_use_head=False)


@dataclass(frozen=True)
class HunyuanVideo15Model:
    """What the planner sizes: the transformer, the VAE and the encoders (configurations only).

    Attributes:
      transformer: the diffusion transformer.
      vae: the VAE.
      text_encoder: Qwen2.5-VL's language model; text_encoder_2: the byT5 glyph encoder.
      image_encoder: SigLIP (image-to-video), or None (text-to-video).
      folder, variant: the checkpoint folder and the release's variant it was read from (None: a preset's model).
    """

    transformer: HunyuanVideo15TransformerConfig
    vae: hvae.HunyuanVideo15VAEConfig = field(default_factory=hvae.HunyuanVideo15VAEConfig)
    text_encoder: LlamaConfig = QWEN2_5_VL_7B
    text_encoder_2: T5Config = BYT5_GLYPH
    image_encoder: SiglipVisionConfig | None = None
    folder: str | None = None
    variant: str | None = None

    @property
    def task(self) -> str:
        """``"i2v"`` with an image encoder, else ``"t2v"``."""
        return "t2v" if self.image_encoder is None else "i2v"

    @property
    def image_tokens(self) -> int:
        """SigLIP tokens the transformer's image stream takes (729 for image-to-video; none for text-to-video, whose
        pipeline passes no image stream)."""
        return 0 if self.image_encoder is None else self.image_encoder.num_positions

    @property
    def text_tokens(self) -> int:
        """Context tokens of every block: 1000 Qwen + 256 byT5 (+ 729 image tokens for image-to-video)."""
        return TOKENIZER_MAX_LENGTH + GLYPH_MAX_LENGTH + self.image_tokens


def _variant_model(name: str) -> HunyuanVideo15Model:
    v = VARIANTS[name]
    cfg = HunyuanVideo15TransformerConfig(target_size=TARGET_SIZES[v.resolution], task_type=v.task,
                                          use_meanflow=name == "480p_i2v_step_distilled")
    return HunyuanVideo15Model(cfg, image_encoder=SIGLIP_SO400M if v.task == "i2v" else None, variant=name)


#: The release's transformer variants (:data:`vidax.models.hunyuanvideo15.presets.VARIANTS`) as the planner sizes
#: them: one 8.3B architecture (the step-distilled one adds the MeanFlow embedder), image-to-video with SigLIP.
ARCHITECTURES: dict[str, HunyuanVideo15Model] = {name: _variant_model(name) for name in VARIANTS}


def preset_architecture(preset: Any) -> HunyuanVideo15Model:
    """The released model of a preset (:data:`vidax.models.hunyuanvideo15.presets.PRESETS`: its ``variant``).

    Raises:
      ValueError: a preset of a variant the planner does not know (the known ones named).
    """
    if getattr(preset, "variant", None) not in ARCHITECTURES:
        raise ValueError(f"the planner knows the variants {', '.join(ARCHITECTURES)}; preset {preset.name!r} is "
                         f"{getattr(preset, 'variant', None)!r} (pass --checkpoint)")
    return ARCHITECTURES[preset.variant]


def _glyph_config(ckpt) -> T5Config:
    """The byT5 encoder's configuration: ``text_encoder_2/config.json``; the official release's byt5-small config with
    the vocabulary of its Glyph-SDXL-v2 weights (the embedding's rows, read from the checkpoint's header)."""
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.core.config_values import read_json
    from vidax.encoders.byt5 import WRAPPED_PREFIX
    from vidax.models.hunyuanvideo15.layout import ORIGINAL

    cfg = T5Config.from_dict(read_json(ckpt.text_encoder_2 / "config.json"))
    if ckpt.layout != ORIGINAL:
        return cfg
    reader = CheckpointReader(ckpt.glyph_weights)
    keys = reader.keys()
    prefix = WRAPPED_PREFIX if any(k.startswith(WRAPPED_PREFIX) for k in keys) else ""
    return dataclasses.replace(cfg, vocab_size=reader.shape(prefix + "embed_tokens.weight")[0])


def folder_architecture(folder: str | Path, variant: str | None = None) -> HunyuanVideo15Model:
    """The model of a checkpoint folder, from its configuration files (and an original glyph checkpoint's header)
    only, any layout.

    Args:
      variant: an official release's transformer variant (None: the folder's default, its 720p text-to-video one
        or the first present).

    Raises:
      CheckpointError: a folder the family does not read (:func:`vidax.models.hunyuanvideo15.layout.
        resolve_checkpoint`), or a configuration it does not take.
    """
    from vidax.core.config_values import read_json
    from vidax.models.hunyuanvideo15.layout import resolve_checkpoint
    from vidax.models.hunyuanvideo15.loading import transformer_config, vae_config

    ckpt = resolve_checkpoint(Path(folder), variant=variant)
    text = config_from_dict(read_json(ckpt.text_encoder / "config.json"), str(ckpt.text_encoder / "config.json"))
    image = (SiglipVisionConfig.from_dict(read_json(ckpt.image_encoder / "config.json"))
             if ckpt.image_encoder is not None else None)
    return HunyuanVideo15Model(transformer_config(ckpt), vae_config(ckpt), text, _glyph_config(ckpt), image,
                               folder=str(ckpt.folder), variant=ckpt.variant)


def for_call(model: HunyuanVideo15Model, call: dict | None) -> HunyuanVideo15Model:
    """The model a run's settings select: a folder of the release's variants read again for the call's ``variant``
    when it is another than the one read (the registry's ``architecture`` hook sees the folder only); a diffusers
    folder holds one transformer and is returned as it is."""
    variant = (call or {}).get("variant")
    if model.folder is not None and model.variant is not None and variant is not None and variant != model.variant:
        return folder_architecture(model.folder, variant)
    return model


# -- weights ---------------------------------------------------------------------------------------------------------


def parameter_counts(cfg: HunyuanVideo15TransformerConfig) -> dict[str, int]:
    """Parameters of a transformer by kind.

    Returns:
      ``{"total", "fp32" (float32-pinned leaves), "adaln" (the blocks' AdaLN projections, all float32), "blocks" (the
      stack), "resident" (outside the stack: what stays on the device when offloading)}``. The release: 8.33 billion,
      2.72 billion of them AdaLN.
    """
    import math

    from vidax.core.params import flatten

    out = dict.fromkeys(("total", "fp32", "adaln", "blocks", "resident"), 0)
    for path, spec in flatten(transformer_specs(cfg)):
        n = math.prod(spec.shape)
        parts = path.split("/")
        out["total"] += n
        out["fp32"] += n if spec.fp32 else 0
        out["adaln"] += n if parts[0] == STACK and parts[1] in ("norm1", "norm1_context") else 0
        out["blocks" if parts[0] == STACK else "resident"] += n
    return out


def encoder_bytes(model: HunyuanVideo15Model, text_encoder_dtype: Any = "float32",
                  image_encoder_dtype: Any = "float32") -> dict[str, int]:
    """Weight bytes of the encoders as the pipeline loads them (:mod:`vidax.models.hunyuanvideo15.loading`).

    Returns:
      ``{"text_encoder": Qwen2.5-VL's language model, "text_encoder_2": byT5 (both in ``text_encoder_dtype``, norms
      float32), "image_encoder": SigLIP in ``image_encoder_dtype`` (0 for text-to-video)}``. The release in float32:
      28.3 GB (7.07 billion parameters: the language model without its LM head), 0.88 GB and 1.65 GB.
    """
    image = 0 if model.image_encoder is None else weight_bytes(siglip_specs(model.image_encoder), image_encoder_dtype)
    return {"text_encoder": weight_bytes(llama_specs(model.text_encoder), text_encoder_dtype),
            "text_encoder_2": weight_bytes(t5_specs(model.text_encoder_2), text_encoder_dtype),
            "image_encoder": image}


def _vae_specs(vae: hvae.HunyuanVideo15VAEConfig, parts: Sequence[str]):
    from vidax.models.hunyuanvideo15.vae_keymap import vae_specs

    return {k: v for k, v in vae_specs(vae).items() if k in parts}


def vae_bytes(model: HunyuanVideo15Model, dtype: Any = "float32") -> int:
    """Weight bytes of the VAE as the pipeline loads it: the decoder for text-to-video, the whole VAE for
    image-to-video."""
    parts = hvae.DECODER_PARTS if model.task == "t2v" else hvae.ENCODER_PARTS + hvae.DECODER_PARTS
    return weight_bytes(_vae_specs(model.vae, parts), dtype)


# -- the VAE ---------------------------------------------------------------------------------------------------------


def _tiling(tiling: Any) -> hvae.VAETiling | None:
    """The pipeline's reading of its ``vae_tiling`` argument: None / True: the default tiles; False: one call."""
    from vidax.models.hunyuanvideo15.pipeline import DEFAULT_TILING

    return DEFAULT_TILING if tiling in (None, True) else (tiling or None)


def vae_decode_tiles(vae: hvae.HunyuanVideo15VAEConfig, latent_shape: tuple[int, ...], tiling: Any = None) -> dict:
    """How :func:`~vidax.models.hunyuanvideo15.vae.decode` cuts ``latent_shape`` latents ``(B, C, t, h, w)`` into
    decoder calls (every call holds all ``t`` latent frames: the reference tiles space only).

    Args:
      tiling: as the pipeline's ``vae_tiling``: None / True: :data:`~vidax.models.hunyuanvideo15.pipeline.
        DEFAULT_TILING`; False: one call; or a :class:`~vidax.models.hunyuanvideo15.vae.VAETiling`.

    Returns:
      ``{"tiles": [(rows of tiles) [(t, th, tw), ...]], "tile": the largest call's (t, th, tw), "calls": decoder
      calls, "spatial": whether space is tiled, "blend", "keep": the blending's pixels per axis (spatial only)}``.
    """
    tiling = _tiling(tiling)
    _, _, t, h, w = latent_shape
    if tiling is not None:
        q = tiling.resolve(vae)
        lh, lw = q["latent_height"], q["latent_width"]
        if w > lw or h > lh:
            rows = [[(t, min(lh, h - i), min(lw, w - j)) for j in range(0, w, q["latent_stride_width"])]
                    for i in range(0, h, q["latent_stride_height"])]
            return {"tiles": rows, "tile": (t, min(lh, h), min(lw, w)), "calls": sum(map(len, rows)),
                    "spatial": True, "blend": (q["blend_height"], q["blend_width"]),
                    "keep": (q["keep_height"], q["keep_width"])}
    return {"tiles": [[(t, h, w)]], "tile": (t, h, w), "calls": 1, "spatial": False}


def vae_decode_bytes(vae: hvae.HunyuanVideo15VAEConfig, latent_shape: tuple[int, ...], dtype: Any = "float32",
                     tiling: Any = None, options: dict | None = None) -> dict:
    """Device bytes of the VAE decode of ``latent_shape`` latents ``(B, C, t, h, w)`` as
    :func:`~vidax.models.hunyuanvideo15.vae.decode` runs it (:func:`vae_decode_tiles`).

    Compiled on abstract arguments: the decoder's program at the largest tile (its arguments hold the decoder's
    weights) and, with spatial tiles, the blending program over all tiles (its arguments: every tile's float32
    output; its output: the video). While the last tile decodes, the earlier tiles' outputs are kept (counted with
    the largest tile's program, a bound).

    Args:
      tiling: as :func:`vae_decode_tiles`; options: XLA options of the compilations.

    Returns:
      :func:`vae_decode_tiles`' keys and ``{"program": bytes of the largest call, "compose": bytes of the blending
      program (0 untiled), "peak": the decode's peak (the decoder's weights included), "decoder_weights": bytes}``.
    """
    tiles = vae_decode_tiles(vae, latent_shape, tiling)
    b, c = latent_shape[:2]
    params = abstract_params(_vae_specs(vae, hvae.DECODER_PARTS), dtype)
    z = jax.ShapeDtypeStruct((b, c, *tiles["tile"]), np.dtype("float32"))
    program = compiled_bytes(hvae._decode_program.lower(params, vae, z).compile(options))
    s = vae.spatial_compression_ratio

    def out_bytes(tile):
        t, th, tw = tile
        return b * vae.out_channels * hvae.decoded_frames(vae, t) * (th * s) * (tw * s) * 4

    outputs = [out_bytes(tile) for row in tiles["tiles"] for tile in row]
    decoder = weight_bytes(_vae_specs(vae, hvae.DECODER_PARTS), dtype)
    compose = 0
    if tiles["spatial"]:
        rows = [[jax.ShapeDtypeStruct((b, vae.out_channels, hvae.decoded_frames(vae, t), th * s, tw * s), jnp.float32)
                 for t, th, tw in row] for row in tiles["tiles"]]
        compose = compiled_bytes(hvae._compose.lower(rows, blend=tiles["blend"], keep=tiles["keep"]).compile(options))
    peak = max(program + sum(outputs[:-1]), compose + decoder)
    return {**tiles, "program": program, "compose": compose, "peak": peak, "decoder_weights": decoder}


def vae_encode_bytes(vae: hvae.HunyuanVideo15VAEConfig, image_shape: tuple[int, ...], dtype: Any = "float32",
                     options: dict | None = None) -> dict:
    """Device bytes of image-to-video's VAE encode: one encoder call over the first frame ``(B, 3, 1, H, W)`` at the
    video's size (compiled; the pipelines never tile it).

    Returns:
      ``{"program": bytes (the encoder's weights among its arguments), "encoder_weights": bytes}``.
    """
    params = abstract_params(_vae_specs(vae, hvae.ENCODER_PARTS), dtype)
    x = jax.ShapeDtypeStruct(image_shape, np.dtype("float32"))
    program = compiled_bytes(hvae._encode_program.lower(params, vae, x).compile(options))
    return {"program": program, "encoder_weights": weight_bytes(_vae_specs(vae, hvae.ENCODER_PARTS), dtype)}


# -- the step ---------------------------------------------------------------------------------------------------------


def latent_shape(model: HunyuanVideo15Model, height: int, width: int, num_frames: int,
                 prompts: int = 1) -> tuple[int, int, int, int, int]:
    """The noise latents ``(B, 32, (F - 1) / 4 + 1, H / 16, W / 16)`` of ``num_frames`` frames of ``height x width``
    (the transformer takes them with the 33 condition channels: 65)."""
    vae = model.vae
    s = vae.spatial_compression_ratio
    return (prompts, vae.latent_channels, hvae.latent_frames(vae, num_frames), height // s, width // s)


def comm_bytes(model: HunyuanVideo15Model, batch: int, tokens: int, dtype, dp: int, tp: int, sp: int) -> int:
    """Bytes one device sends per step in the block stack (the cost model's communication term): the joint rows of
    video and context tokens through the 54 dual-stream blocks (:func:`vidax.core.planner.joint_comm_bytes`)."""
    cfg = model.transformer
    return joint_comm_bytes(dim=cfg.dim, heads=cfg.num_attention_heads, dual_layers=cfg.num_layers, single_layers=0,
                            batch=batch, tokens=tokens, text_tokens=model.text_tokens, dtype=dtype, dp=dp, tp=tp,
                            sp=sp)


def step_inputs(model: HunyuanVideo15Model, mesh, shape: tuple[int, ...], guided: bool) -> tuple:
    """The pipeline step's arguments as it places them (:meth:`~vidax.models.hunyuanvideo15.pipeline.
    HunyuanVideo15Pipeline.compile_step`): ``(x, timestep, prompt_embeds, prompt_embeds_mask, prompt_embeds_2,
    prompt_embeds_mask_2, cond, image_embeds or None, timestep_r or None)``, abstract; the text inputs hold 2B rows
    with guidance, split over ``data`` where dp divides them; the rest replicated."""
    cfg = model.transformer
    b, c = shape[:2]
    tb = 2 * b if guided else b
    rep = NamedSharding(mesh, PartitionSpec())
    dp = mesh.shape["data"]
    split = dp > 1 and tb % dp == 0

    def text(*tail):
        return NamedSharding(mesh, HUNYUAN_VIDEO15_RULES.spec(("batch",) + tail) if split else PartitionSpec())

    f32, i32 = jnp.float32, jnp.int32
    qwen, glyph = TOKENIZER_MAX_LENGTH, GLYPH_MAX_LENGTH
    image = (jax.ShapeDtypeStruct((b, model.image_tokens, cfg.image_embed_dim), f32, sharding=rep)
             if model.image_tokens else None)
    return (jax.ShapeDtypeStruct(shape, f32, sharding=rep), jax.ShapeDtypeStruct((b,), f32, sharding=rep),
            jax.ShapeDtypeStruct((tb, qwen, cfg.text_embed_dim), f32, sharding=text(None, None)),
            jax.ShapeDtypeStruct((tb, qwen), i32, sharding=text(None)),
            jax.ShapeDtypeStruct((tb, glyph, cfg.text_embed_2_dim), f32, sharding=text(None, None)),
            jax.ShapeDtypeStruct((tb, glyph), i32, sharding=text(None)),
            jax.ShapeDtypeStruct((b, c + 1, *shape[2:]), f32, sharding=rep), image,
            jax.ShapeDtypeStruct((b,), f32, sharding=rep) if cfg.use_meanflow else None)


def estimate_split(model: HunyuanVideo15Model, dp: int, tp: int, sp: int, devices: Sequence, *, shape: tuple, dtype,
                   guided: bool = True, chunks: Sequence[int] = (), resident: bool = True,
                   attention: str = "chunked", overlap: bool = True,
                   first_device: dict | None = None) -> list[Estimate]:
    """Compile one mesh split (resident and/or at each offload chunk size) and estimate its per-device memory.

    Args:
      model: the model; dp, tp, sp: the split; devices: ``dp * tp * sp`` devices to compile on.
      shape: the noise latents ``(B, 32, T, H, W)``; dtype: transformer weight dtype.
      guided: classifier-free guidance (the transformer batch is 2B).
      chunks: offload chunk sizes; resident: also estimate the resident step.
      attention: attention implementation compiled; overlap: count the second chunk buffer.
      first_device: the rest of the pipeline on the first device (:func:`plan_hunyuanvideo15`): ``{"always": bytes
        in every phase, phase: bytes}`` for its phases (``"text encoder"``, ``"image encoder"``, ``"vae encode"``,
        ``"vae decode"``); the transformer's weights on that device are added to each here.

    Returns:
      one :class:`~vidax.core.planner.Estimate` per configuration (resident first); phases ``"step"`` or
      ``"prologue"``, ``"chunks"``, ``"epilogue"``, plus the first device's.
    """
    from vidax.core.placement import mesh_context
    from vidax.models.hunyuanvideo15.block_loop import compile_pieces, compile_whole
    from vidax.models.hunyuanvideo15.pipeline import Guider, step_hooks

    cfg = model.transformer
    dtype = jnp.dtype(dtype)
    mesh = make_mesh(dp, tp, sp, devices=list(devices))
    specs = transformer_specs(cfg)
    params = with_shardings(abstract_params(specs, dtype), HUNYUAN_VIDEO15_RULES.param_shardings(specs, mesh))
    args = step_inputs(model, mesh, shape, guided)
    prepare, finish = step_hooks(dtype, Guider({}, 6.0) if guided else None)
    batch = shape[0] * (2 if guided else 1)
    comm = comm_bytes(model, batch, num_tokens(cfg, shape), dtype, dp, tp, sp)
    options = step_compiler_options(mesh.devices.flat[0].platform, dtype)
    common = dict(cfg=cfg, attention=AttentionImpl(attention), prepare=prepare, finish=finish, mesh=mesh,
                  rules=HUNYUAN_VIDEO15_RULES, compiler_options=options)
    extra = dict(first_device or {})
    always = extra.pop("always", 0)

    def rest(weights: int) -> dict:
        """The first device's phases outside the step, beside ``weights`` bytes of the transformer."""
        return {k: weights + always + v for k, v in extra.items()}

    out = []
    with mesh_context(mesh):
        if resident:
            c = compile_whole(params, args, **common)  # as measure_resident_peak compiles it
            phases = {"step": compiled_bytes(c) + always, **rest(sharded_bytes(params))}
            out.append(Estimate(Split(dp, tp, sp), peak_bytes=max(phases.values()), phases=phases, comm_bytes=comm))
        res = {k: v for k, v in params.items() if k != STACK}
        r_bytes, in_bytes = sharded_bytes(res), sharded_bytes([a for a in args if a is not None])
        layer = layer_bytes(params[STACK])  # one block, per device
        for n in chunks:
            pro_c, program, epi_c = compile_pieces(res, chunk_of(params[STACK], n), args, **common)
            phases = {
                "prologue": compiled_bytes(pro_c) + always,
                "chunks": compiled_bytes(program) + r_bytes + in_bytes + (n * layer if overlap else 0) + always,
                "epilogue": compiled_bytes(epi_c) + in_bytes + always,
                **rest(r_bytes),
            }
            plan = ChunkPlan(cfg.num_layers, n)
            out.append(Estimate(Split(dp, tp, sp, n), peak_bytes=max(phases.values()), phases=phases, comm_bytes=comm,
                                transfer_bytes=plan.padded_layers * layer, launches=plan.num_chunks))
    return out


def measure_resident_peak(model: HunyuanVideo15Model, shape: tuple, dtype="float32", guided: bool = True,
                          attention: str = "chunked") -> dict:
    """The resident step on one device, compiled as :func:`estimate_split` compiles it for ``dp = tp = sp = 1``, run
    on random weights and inputs; its peak measured by :func:`vidax.core.planner.measure_peak` (a resident-set-size
    delta on the CPU backend: run it in a fresh process started with ``MALLOC_MMAP_THRESHOLD_=65536``).

    Returns:
      ``{"estimate": compiled bytes, "measured": peak bytes, "runtime_overhead", "device_peak"}``.
    """
    from vidax.core.placement import mesh_context
    from vidax.core.planner import measure_peak
    from vidax.models.hunyuanvideo15.block_loop import compile_whole
    from vidax.models.hunyuanvideo15.pipeline import Guider, step_hooks

    cfg = model.transformer
    dtype = jnp.dtype(dtype)
    mesh = make_mesh(1, 1, 1, devices=jax.local_devices()[:1])
    specs = transformer_specs(cfg)
    params = with_shardings(abstract_params(specs, dtype), HUNYUAN_VIDEO15_RULES.param_shardings(specs, mesh))
    args = step_inputs(model, mesh, shape, guided)
    prepare, finish = step_hooks(dtype, Guider({}, 6.0) if guided else None)
    with mesh_context(mesh):
        compiled = compile_whole(params, args, cfg=cfg, attention=AttentionImpl(attention), prepare=prepare,
                                 finish=finish, mesh=mesh, rules=HUNYUAN_VIDEO15_RULES,
                                 compiler_options=step_compiler_options(mesh.devices.flat[0].platform, dtype))
        return measure_peak(compiled, (params, args, ()))


# -- the plan ---------------------------------------------------------------------------------------------------------


def plan_hunyuanvideo15(model: HunyuanVideo15Model | HunyuanVideo15TransformerConfig, *, height: int, width: int,
                        num_frames: int, dtype="bfloat16", devices: int, memory_bytes: int | None = None,
                        reserve_bytes: int = 0, guided: bool = True, prompts: int = 1,
                        chunks: Sequence[int] | None = None, splits: Sequence[tuple[int, int, int]] | None = None,
                        attention: str = "auto", overlap: bool = True, model_name: str | None = None,
                        offload_if_needed: bool = False, text_encoder_dtype: Any = "float32",
                        image_encoder_dtype: Any = "float32", vae_dtype: Any = "float32", vae_tiling: Any = None,
                        text_resident: bool = False, first_device: bool = True,
                        log: Callable[[str], None] | None = None) -> PipelinePlan:
    """Estimate every candidate split's per-device peak for one generation setting, and recommend one.

    Args:
      model: the model (:class:`HunyuanVideo15Model`), or a transformer configuration alone (then
        ``first_device=False``: the step only).
      height, width, num_frames: the video (pixels, frames); dtype: transformer weight dtype.
      devices: devices of the run (the mesh size, ``dp * tp * sp``).
      memory_bytes: per-device budget; None: report without a fit test.
      reserve_bytes: per-device memory kept free for anything not counted.
      guided: classifier-free guidance (``guidance_scale > 1``: a batch of 2 x prompts; the CFG-distilled variants
        run with 1: one evaluation).
      prompts: prompts per call.
      chunks: offload chunk sizes to try (default :func:`vidax.core.planner.default_chunks`: 27, 9, 3, 1 for the 54
        blocks); ``()``: none.
      splits: ``(dp, tp, sp)`` candidates (default :func:`vidax.core.planner.candidate_splits`).
      attention: implementation to compile ("auto": resolved for the compile target's backend).
      overlap: offloading with copy/compute overlap (two chunk buffers) or serial (one).
      model_name: name for the report.
      offload_if_needed: compile the offloaded candidates only if no resident split fits the budget.
      text_encoder_dtype, image_encoder_dtype, vae_dtype: the pipeline's (float32 by default).
      vae_tiling: the decode's tiling, as the pipeline's ``vae_tiling`` (None: the original's 256-pixel tiles).
      text_resident: the encoders stay loaded (``text_encoder_residency="resident"``; the CPU default): counted in
        every phase, not only in their own.
      first_device: count the encoders and the VAE on the first device (the module docstring).
      log: progress callback (one line per split).

    Returns:
      :class:`vidax.core.planner.PipelinePlan`.

    Raises:
      ValueError: sizes the model does not take; fewer devices to compile on than ``devices``
        (:func:`vidax.core.planner.planning_devices`); no split of ``devices`` the model can run.
    """
    from vidax.models.hunyuanvideo15.family import check_sizes

    t0 = time.perf_counter()
    check_sizes(height, width, num_frames)
    if isinstance(model, HunyuanVideo15TransformerConfig):
        model, first_device = HunyuanVideo15Model(model), False
    cfg = model.transformer
    devs, target = planning_devices(devices)
    shape = latent_shape(model, height, width, num_frames, prompts)
    batch = prompts * (2 if guided else 1)
    splits = (list(splits) if splits is not None
              else candidate_splits(devices, batch, cfg.num_attention_heads, cfg.mlp_dim))
    if not splits:
        raise ValueError(f"no (dp, tp, sp) split of {devices} devices runs this model (heads "
                         f"{cfg.num_attention_heads}, MLP width {cfg.mlp_dim}, batch {batch})")
    chunks = default_chunks(cfg.num_layers) if chunks is None else list(chunks)
    impl = resolve_implementation(attention, devs[0].platform)
    extra, notes = None, []
    if first_device:
        enc = encoder_bytes(model, text_encoder_dtype, image_encoder_dtype)
        text = enc["text_encoder"] + enc["text_encoder_2"]
        vae_w = vae_bytes(model, vae_dtype)
        options = compiler_options(devs[0].platform)
        with jax.default_device(devs[0]):
            decode = vae_decode_bytes(model.vae, shape, vae_dtype, vae_tiling, options)
            encode = (vae_encode_bytes(model.vae, (prompts, model.vae.in_channels, 1, height, width), vae_dtype,
                                       options) if model.task == "i2v" else None)
        kept = text + enc["image_encoder"] if text_resident else 0
        # The programs' arguments hold the VAE weights they use, already among the VAE weights of every phase.
        extra = {"always": vae_w + kept,
                 "text encoder": 0 if text_resident else text + enc["image_encoder"],
                 "vae decode": decode["peak"] - decode["decoder_weights"]}
        if encode is not None:
            extra["image encoder"] = 0 if text_resident else enc["image_encoder"]
            extra["vae encode"] = encode["program"] - encode["encoder_weights"]
        t = decode["tile"]
        notes = [("text encoders", f"Qwen2.5-VL {format_bytes(enc['text_encoder'])} + byT5 "
                  f"{format_bytes(enc['text_encoder_2'])} ({np.dtype(text_encoder_dtype)})"
                  + (f", SigLIP {format_bytes(enc['image_encoder'])} (loaded with them, used after)"
                     if model.task == "i2v" else "") + ", "
                  + ("kept loaded (every phase)" if text_resident else "freed after use (their own phase)")),
                 ("VAE", f"{'decoder' if model.task == 't2v' else 'encoder and decoder'} weights {format_bytes(vae_w)} "
                  f"({np.dtype(vae_dtype)}, every phase); decode {format_bytes(decode['peak'])}: "
                  + (f"{decode['calls']} tiles of {t[0]} latent frames x {t[1]}x{t[2]} latents"
                     if decode["spatial"] else f"one call of {t[0]} latent frames x {t[1]}x{t[2]} latents")
                  + (f"; image encode {format_bytes(encode['program'])}" if encode is not None else ""))]
    estimates = plan_candidates(
        splits, lambda dp, tp, sp, **kw: estimate_split(
            model, dp, tp, sp, devs, shape=shape, dtype=dtype, guided=guided, attention=impl, overlap=overlap,
            first_device=extra, **kw),
        chunks=chunks, memory_bytes=memory_bytes, reserve_bytes=reserve_bytes, offload_if_needed=offload_if_needed,
        log=log)
    settings = dict(model=model_name, default_model="HunyuanVideo-1.5 transformer", height=height, width=width,
                    num_frames=num_frames, dtype=str(jnp.dtype(dtype)), tokens=num_tokens(cfg, shape),
                    text_tokens=model.text_tokens, batch=batch, attention=impl.value, devices=devices,
                    task=model.task, first_device_notes=notes,
                    decode_hint="the VAE decode is that peak: smaller tiles, vae_tiling=VAETiling(128, 128, 0.25) "
                                "(the original's below 21 GB)")
    return PipelinePlan(estimates, recommend(estimates), memory_bytes, reserve_bytes, target,
                        time.perf_counter() - t0, settings)


__all__ = ["ARCHITECTURES", "BYT5_GLYPH", "QWEN2_5_VL_7B", "SIGLIP_SO400M", "HunyuanVideo15Model", "comm_bytes",
           "encoder_bytes", "estimate_split", "folder_architecture", "for_call", "latent_shape",
           "measure_resident_peak", "parameter_counts",
           "plan_hunyuanvideo15", "preset_architecture", "step_inputs", "vae_bytes", "vae_decode_bytes",
           "vae_decode_tiles", "vae_encode_bytes"]
