"""Memory planner for LTX-2.5: which (dp, tp, sp, offload chunk) fits, and which is fastest.

The other families' planners compile their step per candidate split (docs/design.md, "Planner"); this one is
analytic (compiling the 48-block audio-video program on abstract shapes for every split takes minutes on CPU): the
weights per device are exact, summed leaf by leaf from the spec trees with each leaf's shard of
:data:`vidax.models.ltx2.sharding.LTX2_RULES` (bf16 weights, the float32-pinned AdaLN tables, embedders and q/k norm
scales at 4 bytes); the activations are the closed forms below, stated so they can be checked by hand. The ranking,
the table and the recommendation are :mod:`vidax.core.planner`'s.

Phases, per device (the first device also holds the rest of the pipeline: ``always`` = the text connectors, the video
VAE decoder, the audio VAE decoder and the vocoder, every phase):

``text encoder``
    Gemma 4 (12B, ``text_encoder_dtype``) on the first device with every hidden state it returns (``layers + 1`` of
    ``(rows, text_tokens, hidden)`` float32; rows: the prompt, plus the negative prompt with guidance), beside the
    transformer's resident weights (loaded with the pipeline); the encoder is freed after the prompts
    (``text_encoder_residency="auto"`` on accelerators), so it is in no other phase.
``step``
    The transformer program of one guided evaluation: the CFG batch (2 x prompts rows; the STG and modality passes
    run as separate calls of one row each, diffusers' ``LTX2Pipeline`` order, so they do not raise the peak). Weights
    (resident, or the non-block leaves plus ``2 x chunk`` blocks with overlapped offloading, ``1 x chunk`` serial)
    plus, with ``r = rows / dp``, ``S' = ceil(S / sp)``, ``T' = ceil(T / sp)`` (S video, T audio tokens, padded to a
    multiple of sp), ``D`` / ``Da`` the video / audio widths:

    * streams: the block's input and output of both streams, float32: ``2 r (S' D + T' Da) 4``;
    * RoPE tables (float32 cos and sin, split over sp and tp): ``(S' (D + Da) + T' 2 Da) 4 / tp``;
    * the larger of the FFN hidden (``r S' 4D / tp`` float32 and its bf16 copy: 6 bytes) and the video self-attention
      in Ulysses layout (q, k, v and the output for all ``S`` tokens and ``heads / (tp sp)`` heads in the weight
      dtype, plus one 1024-query chunk of float32 scores: ``r (heads / (tp sp)) min(1024, S) S 4``; a fused kernel
      (cuDNN, splash) holds no scores, so this over-counts there).
``vae decode``
    The transformer's weights still on the device; on the first device the untiled decode: the float32 video
    ``F H W 3 4`` plus three feature maps at the decoder's last resolution ``F (H/4) (W/4) C0`` (``C0`` the first
    decoder width; input, output and a residual of its last resnet) in ``vae_dtype``.
``diffusion decode`` (``decoder="diffusion"``, in place of ``vae decode``)
    The transformer's weights still on the device; on the first device the diffusion VAE decoder's weights
    (``vae_dtype``, float32-pinned leaves at 4 bytes) and its stage-5 denoising step, the larger of its two programs
    (:mod:`vidax.models.ltx2.diffusion_decoder`; stages 1-4 peak below it). With ``N = F5 H5 W5`` stage-5 positions
    (the latent grid times the strides: ``121 x 176 x 304`` at 1216x704, 121 frames), ``C5`` its width (256), ``w``
    the weight dtype's bytes and ``q = out_channels p^2`` canvas values per position:

    * the context (float32, held through the loop): ``N C5 4``;
    * the canvas and the prediction (float32): ``2 N q 4``;
    * one diffusion block: ``N C5 (5 x 4 + 4 w)``: the residual in and out, the context projection, the normed input
      and the output projection in float32, q, k, v and the attention output in the weight dtype;
    * the blocked neighbourhood attention: ``3 x SCORE_BUDGET x 4`` (one batch of query blocks' scores,
      probabilities and their masked copy).

    Checked against XLA's buffer assignment of both programs (``memory_analysis``, CPU) in
    ``tests/test_ltx2_planner.py``: 1.0 to 1.3 times what XLA assigns.
``audio decode``
    The audio VAE and vocoder (float32): three feature maps of the vocoder's widest stage (width x samples, float32).

Not counted: the sampler's state (a few latent-sized float32 arrays), the host side (offloaded chunks live in host
memory).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vidax.core.parallel import padded_length
from vidax.core.params import flatten
from vidax.core.planner import (Estimate, PipelinePlan, Split, candidate_splits, default_chunks, format_bytes,
                                recommend)
from vidax.core.sharding import ShardingRules
from vidax.encoders.gemma import GemmaConfig, gemma_specs
from vidax.models.ltx2.audio_vae import LTX2AudioVAEConfig, audio_vae_specs
from vidax.models.ltx2.config import LTX2TransformerConfig
from vidax.models.ltx2.connectors import ConnectorsConfig, connectors_specs
from vidax.models.ltx2.diffusion_decoder import SCORE_BUDGET, LTX2DiffusionDecoderConfig, canvas_shape
from vidax.models.ltx2.diffusion_decoder import diffusion_decoder_specs
from vidax.models.ltx2.family import MAX_FRAMES, MAX_SIDE
from vidax.models.ltx2.sharding import LTX2_RULES
from vidax.models.ltx2.transformer import transformer_specs
from vidax.models.ltx2.vae import LTX2VideoVAEConfig, vae_specs_and_rules
from vidax.models.ltx2.vocoder import LTX2VocoderConfig, LTX2VocoderWithBWEConfig, vocoder_specs_and_rules

#: The padded prompt length (upstream ``LTXGemmaTokenizer``: left-padded to 1024 tokens).
TEXT_TOKENS = 1024
#: What the report says when the diffusion decode is the smallest peak and nothing fits.
DIFFUSION_DECODE_HINT = ("the diffusion decode is that peak (it decodes the whole video at once): plan fewer frames or "
                         "a smaller size, the VAE's decoder (--decoder conv), or in Python the decoders in bfloat16 "
                         "(LTX2Pipeline.from_pretrained(..., vae_dtype='bfloat16'))")
#: One query chunk of the chunked attention (:func:`vidax.core.attention.attention`'s ``query_chunk_size``).
QUERY_CHUNK = 1024

#: Gemma 4 12B's text tower (docs/design.md, "Which Gemma LTX-2.5 uses": hidden 3840, 48 layers as 5 sliding + 1
#: full x 8, 16 heads, head_dim 256 / 8 key-value heads, global head_dim 512 / 1 global key-value head with keys as
#: values, vocabulary 262144); the MLP width 15360 is Gemma 3 12B's (the transcript of the 4 config does not state it).
GEMMA4_12B = GemmaConfig(vocab_size=262144, hidden_size=3840, intermediate_size=15360, num_hidden_layers=48,
                         num_attention_heads=16, num_key_value_heads=8, head_dim=256, global_head_dim=512,
                         num_global_key_value_heads=1, attention_k_eq_v=True,
                         layer_types=(("sliding_attention",) * 5 + ("full_attention",)) * 8)
#: The LTX-2.5 22B transformer: 48 blocks, video 32 heads x 128 (4096), audio 32 x 64 (2048), text 4096 / 2048 wide
#: (the connectors project Gemma's features: ``use_prompt_embeddings`` off), the 2.5 options (gated attention,
#: cross-attention AdaLN with the sigma prompt embedders, split RoPE, keyframe embedding, STG): upstream
#: ``LTXModelConfigurator``'s defaults with ``apply_gated_attention``, ``cross_attention_adaln`` and
#: ``caption_proj_before_connector`` (vidax.models.ltx2.release.transformer_config).
LTX25_TRANSFORMER = LTX2TransformerConfig(
    gated_attn=True, audio_gated_attn=True, cross_attn_mod=True, audio_cross_attn_mod=True, rope_type="split",
    rope_double_precision=False, use_prompt_embeddings=False, use_prompt_adaln_single=True,
    use_keyframes_abs_pos_embedding=True, perturbed_attn=True, cross_attn_timestep_scale_multiplier=1)
#: Its text connectors (``ConnectorsConfig.from_release`` of the V2 feature extractor: per-modality projections of
#: the 49 stacked Gemma states to 4096 / 2048, connectors of 32 x 128 / 32 x 64 heads, 2 blocks each).
LTX25_CONNECTORS = ConnectorsConfig(
    caption_channels=3840, text_proj_in_factor=49, video_connector_num_attention_heads=32,
    video_connector_attention_head_dim=128, audio_connector_num_attention_heads=32,
    audio_connector_attention_head_dim=64, rope_type="split", rope_double_precision=False,
    per_modality_projections=True, proj_bias=True, video_hidden_dim=4096, audio_hidden_dim=2048)


@dataclass(frozen=True)
class LTX2Model:
    """What the planner sizes: the configurations of every component the pipeline loads (no weights).

    Attributes:
      transformer, text_encoder, connectors, vae, audio_vae, vocoder: the components' configurations (``audio_vae``
        and ``vocoder`` None: a model without audio).
      diffusion_decoder: the diffusion VAE decoder's configuration (None: a folder without one; a preset's model
        has the release's, as diffusers' converter states it: the class defaults).
      text_tokens: the padded prompt length.
      folder: the checkpoint folder it was read from (None: a preset's model).
    """

    transformer: LTX2TransformerConfig = LTX25_TRANSFORMER
    text_encoder: GemmaConfig = GEMMA4_12B
    connectors: ConnectorsConfig = LTX25_CONNECTORS
    vae: LTX2VideoVAEConfig = field(default_factory=LTX2VideoVAEConfig)
    audio_vae: LTX2AudioVAEConfig | None = field(default_factory=LTX2AudioVAEConfig)
    vocoder: Any = field(default_factory=LTX2VocoderWithBWEConfig)
    diffusion_decoder: LTX2DiffusionDecoderConfig | None = field(default_factory=LTX2DiffusionDecoderConfig)
    text_tokens: int = TEXT_TOKENS
    folder: str | None = None


#: The released architecture.
ARCHITECTURES: dict[str, LTX2Model] = {"ltx-2.5-22b": LTX2Model()}


def preset_architecture(preset: Any) -> LTX2Model:
    """The released model of a preset (every ``ltx-2.5-22b-*`` preset: LTX-2.5 22B).

    Raises:
      ValueError: a preset the planner does not know.
    """
    name = getattr(preset, "name", preset)
    if not isinstance(name, str) or not name.startswith("ltx-2.5-22b"):
        raise ValueError(f"the planner knows the ltx-2.5-22b-* presets; got {name!r} (pass --checkpoint)")
    return ARCHITECTURES["ltx-2.5-22b"]


def folder_architecture(folder: str | Path) -> LTX2Model:
    """The model of a checkpoint folder (diffusers, release single file or vidax layout), from its configurations;
    no weight is read (:func:`vidax.models.ltx2.layout.resolve_checkpoint`).

    Raises:
      CheckpointError: a folder the family does not read. ValueError: a configuration it does not take.
    """
    from vidax.models.ltx2.layout import resolve_checkpoint

    ckpt = resolve_checkpoint(Path(folder))
    cfg = {name: ckpt.source(name).cfg for name in ("transformer", "text_encoder", "connectors", "vae")}
    audio = {name: ckpt.source(name).cfg for name in ("audio_vae", "vocoder")} if ckpt.has_audio else \
        {"audio_vae": None, "vocoder": None}
    return LTX2Model(**cfg, **audio, diffusion_decoder=ckpt.diffusion_decoder_config(), folder=str(ckpt.folder))


# -- sizes ------------------------------------------------------------------------------------------------------------


def _itemsize(spec, dtype) -> int:
    return 4 if spec.fp32 else np.dtype(dtype).itemsize


def per_device_bytes(specs, dtype: Any, sizes: dict[str, int] | None = None, rules: ShardingRules = LTX2_RULES,
                     prefix: str | None = None, exclude: str | None = None) -> int:
    """Bytes of a spec tree's leaves on one device: each leaf in ``dtype`` (float32-pinned leaves at 4 bytes), its
    sharded dimensions divided (rounded up) by the mesh ``sizes`` (``{"data": dp, "tensor": tp, "sequence": sp}``;
    None: one device) its logical axes map to under ``rules``; only the paths under ``prefix`` / not under
    ``exclude``."""
    sizes = sizes or {}
    total = 0
    for path, spec in flatten(specs):
        if (prefix and not path.startswith(prefix)) or (exclude and path.startswith(exclude)):
            continue
        shape = list(spec.shape)
        for i, axis in enumerate(spec.axes or () if sizes else ()):
            names = rules.mesh_axes(axis) if axis is not None else None
            names = () if names is None else ((names,) if isinstance(names, str) else tuple(names))
            shape[i] = -(-shape[i] // math.prod(sizes.get(n, 1) for n in names))
        total += math.prod(shape) * _itemsize(spec, dtype)
    return total


def parameter_counts(model: LTX2Model) -> dict[str, int]:
    """Parameters by component: ``transformer``, ``blocks`` (its stack), ``fp32`` (its float32-pinned leaves),
    ``connectors``, ``text_encoder``, ``vae`` (the decoder and the statistics the pipeline loads), ``audio``
    (audio VAE and vocoder)."""
    def count(specs, pred=lambda p, s: True):
        return sum(math.prod(s.shape) for p, s in flatten(specs) if pred(p, s))

    t = transformer_specs(model.transformer)
    out = {"transformer": count(t), "blocks": count(t, lambda p, s: p.startswith("blocks/")),
           "fp32": count(t, lambda p, s: s.fp32), "connectors": count(connectors_specs(model.connectors)),
           "text_encoder": count(gemma_specs(model.text_encoder)), "vae": count(_vae_decoder_specs(model)),
           "audio": count(_audio_specs(model)) if model.audio_vae is not None else 0}
    return out


def _vae_decoder_specs(model: LTX2Model):
    specs = vae_specs_and_rules(model.vae)[0]
    return {k: v for k, v in specs.items() if k != "encoder"}


def _audio_specs(model: LTX2Model):
    voc = vocoder_specs_and_rules(model.vocoder)[0]
    a = {k: v for k, v in audio_vae_specs(model.audio_vae).items() if k != "encoder"}
    return {"audio_vae": a, "vocoder": voc}


def token_counts(model: LTX2Model, height: int, width: int, num_frames: int,
                 frame_rate: float = 24.0) -> tuple[tuple[int, int, int], int]:
    """``((F, H, W) latent grid, audio latent frames)``: ``F = (num_frames - 1) / 8 + 1``, ``H, W`` over 32; audio
    ``round(num_frames / frame_rate * sampling_rate / hop_length / audio_scale_factor)`` (diffusers'
    ``LTX2Pipeline``)."""
    t = model.transformer
    st, ss = t.vae_scale_factors[0], t.vae_scale_factors[1]
    grid = ((num_frames - 1) // st + 1, height // ss, width // ss)
    audio = round(num_frames / frame_rate * t.audio_sampling_rate / t.audio_hop_length / t.audio_scale_factor)
    return grid, audio


def step_activation_bytes(cfg: LTX2TransformerConfig, rows: int, tokens: int, audio_tokens: int, dtype: Any,
                          dp: int, tp: int, sp: int) -> dict[str, int]:
    """The step's activations on one device (the module docstring's closed forms): ``streams``, ``ropes``, ``ffn``,
    ``attention`` and ``total`` (= streams + ropes + max(ffn, attention))."""
    r = -(-rows // dp)
    s_pad, t_pad = padded_length(tokens, sp), padded_length(audio_tokens, sp)
    s, t = s_pad // sp, t_pad // sp
    d, da, w = cfg.inner_dim, cfg.audio_inner_dim, np.dtype(dtype).itemsize
    streams = 2 * r * (s * d + t * da) * 4
    ropes = (s * (d + da) + t * 2 * da) * 4 // tp
    ffn = r * s * (4 * d // tp) * 6
    heads = max(1, cfg.num_attention_heads // (tp * sp))
    attn = r * s_pad * heads * cfg.attention_head_dim * w * 4 + r * heads * min(QUERY_CHUNK, s_pad) * s_pad * 4
    return {"streams": streams, "ropes": ropes, "ffn": ffn, "attention": attn,
            "total": streams + ropes + max(ffn, attn)}


def comm_bytes(cfg: LTX2TransformerConfig, rows: int, tokens: int, audio_tokens: int, dtype: Any, dp: int, tp: int,
               sp: int) -> int:
    """Bytes one device sends per transformer call (the cost model's term): per block, tensor parallelism
    all-reduces float32 partial sums of every row-parallel output (6 attentions and 2 FFNs: 4 on each stream's tokens;
    a ring sends ``2 (tp - 1) / tp`` of the buffer); Ulysses sends ``(sp - 1) / sp`` of q, k, v and the output of the
    split-token attentions (video self, audio self, both cross-modal) in the weight dtype."""
    r = -(-rows // dp)
    s, t = padded_length(tokens, sp) // sp, padded_length(audio_tokens, sp) // sp
    d, da, w = cfg.inner_dim, cfg.audio_inner_dim, np.dtype(dtype).itemsize
    reduce = 2 * (tp - 1) / tp * 4 * r * (s * d + t * da) * 4 if tp > 1 else 0.0
    seq = 0.0
    if sp > 1:
        a2a = (sp - 1) / sp * w / tp
        seq = a2a * r * (4 * s * d + 4 * t * da + 2 * (s + t) * da + 2 * (s + t) * da)
    return int(cfg.num_layers * (reduce + seq))


def decode_bytes(model: LTX2Model, grid: tuple[int, int, int], num_frames: int, height: int, width: int,
                 vae_dtype: Any) -> int:
    """The untiled video decode (module docstring): ``F H W 3 4 + 3 F (H/4) (W/4) C0 vae_bytes``."""
    c0 = model.vae.decoder_block_out_channels[0]
    return num_frames * height * width * 3 * 4 + 3 * num_frames * (height // 4) * (width // 4) * c0 * \
        np.dtype(vae_dtype).itemsize


def diffusion_decode_bytes(cfg: LTX2DiffusionDecoderConfig, grid: tuple[int, int, int], dtype: Any) -> dict[str, int]:
    """The diffusion VAE decoder's phase on one device (module docstring): ``weights``, ``context``, ``canvas``,
    ``block``, ``attention`` and ``total`` bytes, for a ``(F, h, w)`` latent grid and weight dtype ``dtype``."""
    _, q, f5, hp, wp = canvas_shape(cfg, (1, cfg.latent_channels, *grid))
    p, c5, w = cfg.patch_size, cfg.decoder_stage_channels[-1], np.dtype(dtype).itemsize
    n = f5 * (hp // p) * (wp // p)
    out = {"weights": per_device_bytes(diffusion_decoder_specs(cfg), dtype), "context": n * c5 * 4,
           "canvas": 2 * f5 * hp * wp * q * 4, "block": n * c5 * (5 * 4 + 4 * w), "attention": 3 * SCORE_BUDGET * 4}
    out["total"] = sum(out.values())
    return out


def audio_decode_bytes(model: LTX2Model, audio_tokens: int) -> int:
    """The vocoder's widest stage, three float32 feature maps: ``max_i (hidden / 2^(i+1)) x frames x prod(factors up
    to i)`` over the first stage (and the bandwidth extender's, at its sample rate), mel frames ``4 x`` the latents."""
    if model.vocoder is None:
        return 0
    stages = [model.vocoder] if isinstance(model.vocoder, LTX2VocoderConfig) else [model.vocoder.vocoder,
                                                                                 model.vocoder.bwe]
    frames = audio_tokens * model.transformer.audio_scale_factor
    best = 0
    for i, st in enumerate(stages):
        length = frames if i == 0 else frames * 3  # the extender runs at 48 / 16 kHz the first stage's rate
        for k, f in enumerate(st.upsample_factors):
            length *= f
            best = max(best, (st.hidden_channels >> (k + 1)) * length)
    return 3 * best * 4


# -- the plan ---------------------------------------------------------------------------------------------------------


def estimate_split(model: LTX2Model, dp: int, tp: int, sp: int, *, rows: int, tokens: int, audio_tokens: int,
                   dtype: Any, chunks: Sequence[int] = (), resident: bool = True, overlap: bool = True,
                   first_device: dict | None = None) -> list[Estimate]:
    """One split's estimates (resident first, then each chunk size); phases ``text encoder``, ``step``, ``vae
    decode`` or ``diffusion decode``, ``audio decode`` (the last two and the first only with ``first_device``:
    ``{"always", "text encoder", "vae decode" or "diffusion decode", "audio decode"}`` bytes)."""
    cfg = model.transformer
    sizes = {"data": dp, "tensor": tp, "sequence": sp}
    specs = transformer_specs(cfg)
    whole = per_device_bytes(specs, dtype, sizes)
    rest = per_device_bytes(specs, dtype, sizes, exclude="blocks/")
    layer = per_device_bytes(specs, dtype, sizes, prefix="blocks/") // cfg.num_layers
    act = step_activation_bytes(cfg, rows, tokens, audio_tokens, dtype, dp, tp, sp)["total"]
    comm = comm_bytes(cfg, rows, tokens, audio_tokens, dtype, dp, tp, sp)
    extra = first_device or {}
    always = extra.get("always", 0)

    def phases(weights: int) -> dict[str, int]:
        out = {"step": weights + act + always}
        if first_device:
            out["text encoder"] = weights + always + extra["text encoder"]
            decode = "diffusion decode" if "diffusion decode" in extra else "vae decode"
            out[decode] = weights + always + extra[decode]
            if extra.get("audio decode"):
                out["audio decode"] = weights + always + extra["audio decode"]
        return out

    out = []
    if resident:
        p = phases(whole)
        out.append(Estimate(Split(dp, tp, sp), peak_bytes=max(p.values()), phases=p, comm_bytes=comm))
    for n in chunks:
        n_chunks = -(-cfg.num_layers // n)
        p = phases(rest + (2 if overlap else 1) * n * layer)
        out.append(Estimate(Split(dp, tp, sp, n), peak_bytes=max(p.values()), phases=p, comm_bytes=comm,
                            transfer_bytes=n_chunks * n * layer, launches=n_chunks))
    return out


def plan_ltx2(model: LTX2Model | LTX2TransformerConfig, *, height: int = 704, width: int = 1216,
              num_frames: int = 121, frame_rate: float = 24.0, dtype: Any = "bfloat16", devices: int = 1,
              memory_bytes: int | None = None, reserve_bytes: int = 0, guided: bool = True, prompts: int = 1,
              chunks: Sequence[int] | None = None, splits: Sequence[tuple[int, int, int]] | None = None,
              attention: str = "auto", overlap: bool = True, model_name: str | None = None,
              offload_if_needed: bool = False, vae_dtype: Any = "float32", text_encoder_dtype: Any = "bfloat16",
              decoder: str = "conv", first_device: bool = True, log: Callable[[str], None] | None = None) -> PipelinePlan:
    """Estimate every candidate split's per-device peak for one generation setting, and recommend one.

    Args:
      model: :class:`LTX2Model`, or a transformer configuration alone (then the transformer's phases only).
      height, width, num_frames, frame_rate: the video (multiples of 32 pixels, ``8k + 1`` frames).
      dtype: the transformer's weight dtype (its AdaLN tables float32 whatever it).
      devices: the mesh size ``dp x tp x sp``; memory_bytes, reserve_bytes: per-device budget and what to keep free.
      guided: classifier-free guidance (2 x prompts rows per call; the dev model's 3.0) or not (the distilled model).
      prompts: prompts per call.
      chunks: offload chunk sizes to try (default :func:`vidax.core.planner.default_chunks` of the blocks and the
        paper rows' 8: for 48 blocks 24, 12, 8, 6, 3, 1); ``()``: none.
      splits: ``(dp, tp, sp)`` candidates (default: tp dividing the heads and FFN widths, dp the batch).
      attention: recorded in the report (the activation model counts chunked scores).
      overlap: two chunk buffers (copy during compute) or one.
      model_name: for the report; offload_if_needed: estimate offloaded splits only if no resident one fits.
      vae_dtype, text_encoder_dtype: of the VAE decoder (and the diffusion decoder) and Gemma (the pipeline's
        defaults: float32, bfloat16).
      decoder: ``"conv"`` (the VAE's decoder) or ``"diffusion"`` (the diffusion VAE decoder: its phase replaces the
        VAE decode).
      first_device: count the text encoder, the connectors, the VAEs and the vocoder on the first device.
      log: progress callback.

    Returns:
      :class:`vidax.core.planner.PipelinePlan`.

    Raises:
      ValueError: a size the model does not take (not a multiple of 32, not ``8k + 1`` frames, empty); no split;
        ``decoder="diffusion"`` for a model without a diffusion decoder.
    """
    t0 = time.perf_counter()
    if height % 32 or width % 32 or height <= 0 or width <= 0 or num_frames < 1 or (num_frames - 1) % 8:
        raise ValueError(f"height and width must be positive multiples of 32 and num_frames 8k + 1; got {height}x"
                         f"{width}, {num_frames} frames")
    if max(height, width) > MAX_SIDE or num_frames > MAX_FRAMES:  # the family's bounds (vidax generate's)
        raise ValueError(f"{height}x{width}, {num_frames} frames is beyond what the pipeline generates (height and "
                         f"width up to {MAX_SIDE}, up to {MAX_FRAMES} frames)")
    if isinstance(model, LTX2TransformerConfig):
        model, first_device = dataclasses.replace(LTX2Model(), transformer=model), False
    if decoder not in ("conv", "diffusion"):
        raise ValueError(f"decoder must be 'conv' or 'diffusion', got {decoder!r}")
    if decoder == "diffusion" and model.diffusion_decoder is None:
        raise ValueError(f"decoder='diffusion': {model.folder or 'this model'} has no diffusion decoder (a "
                         "diffusion_decoder/ folder); plan the VAE's decoder instead (decoder='conv': the presets "
                         "without '-diffusion-decoder')")
    cfg = model.transformer
    grid, audio_tokens = token_counts(model, height, width, num_frames, frame_rate)
    tokens = math.prod(grid)
    rows = prompts * (2 if guided else 1)
    if splits is None:
        splits = [s for s in candidate_splits(devices, rows, cfg.num_attention_heads, cfg.audio_num_attention_heads,
                                              4 * cfg.inner_dim, 4 * cfg.audio_inner_dim)]
    if not splits:
        raise ValueError(f"no (dp, tp, sp) split of {devices} devices runs this model (heads "
                         f"{cfg.num_attention_heads} / {cfg.audio_num_attention_heads}, batch {rows})")
    if chunks is None:  # the halvings of the blocks, and the paper rows' chunk of 8 where it fits
        chunks = sorted(set(default_chunks(cfg.num_layers)) | ({8} if cfg.num_layers > 8 else set()), reverse=True)
    chunks = list(chunks)
    extra, notes = None, []
    if first_device:
        conn = per_device_bytes(connectors_specs(model.connectors), dtype)
        vae_w = per_device_bytes(_vae_decoder_specs(model), vae_dtype)
        audio_w = per_device_bytes(_audio_specs(model), "float32") if model.audio_vae is not None else 0
        gemma = per_device_bytes(gemma_specs(model.text_encoder), text_encoder_dtype)
        te = model.text_encoder
        states = rows * model.text_tokens * te.hidden_size * (te.num_hidden_layers + 1) * 4
        extra = {"always": conn + vae_w + audio_w, "text encoder": gemma + states,
                 "vae decode": decode_bytes(model, grid, num_frames, height, width, vae_dtype),
                 "audio decode": audio_decode_bytes(model, audio_tokens) if model.audio_vae is not None else 0}
        if decoder == "diffusion":
            dd = diffusion_decode_bytes(model.diffusion_decoder, grid, vae_dtype)
            extra["diffusion decode"] = dd["total"]
            del extra["vae decode"]
        notes = [("text encoder", f"Gemma 4 {format_bytes(gemma)} ({np.dtype(text_encoder_dtype)}) and its "
                                  f"{te.num_hidden_layers + 1} hidden states {format_bytes(states)}, freed after the "
                                  "prompts"),
                 ("always", f"connectors {format_bytes(conn)}, VAE decoder {format_bytes(vae_w)}, audio VAE and "
                            f"vocoder {format_bytes(audio_w)}")]
        if decoder == "diffusion":
            notes.append(("diffusion decode", f"the diffusion VAE decoder {format_bytes(dd['weights'])} "
                                              f"({np.dtype(vae_dtype)}, loaded for the decode), its context "
                                              f"{format_bytes(dd['context'])} and one stage-5 step "
                                              f"{format_bytes(dd['block'] + dd['attention'])}"))
    estimates = []
    for resident, sizes in ([(True, []), (False, chunks)] if offload_if_needed else [(True, chunks)]):
        if not resident and any(e.fits for e in estimates):
            break
        for dp, tp, sp in splits:
            est = estimate_split(model, dp, tp, sp, rows=rows, tokens=tokens, audio_tokens=audio_tokens, dtype=dtype,
                                 chunks=sizes, resident=resident, overlap=overlap, first_device=extra)
            for e in est:
                if memory_bytes is not None:
                    e.fits = e.peak_bytes + reserve_bytes <= memory_bytes
            estimates += est
            if log:
                log(f"  dp={dp} tp={tp} sp={sp}: {len(est)} configurations")
    settings = dict(model=model_name, default_model="LTX-2.5 transformer", height=height, width=width,
                    num_frames=num_frames, dtype=str(np.dtype(dtype)), tokens=tokens, text_tokens=model.text_tokens,
                    batch=rows, attention=attention, devices=devices, audio_tokens=audio_tokens,
                    first_device_notes=notes,
                    decode_phase="diffusion decode" if decoder == "diffusion" else "vae decode",
                    decode_hint=DIFFUSION_DECODE_HINT if decoder == "diffusion" else
                    "the VAE decode is that peak: plan fewer frames or a smaller size")
    return PipelinePlan(estimates, recommend(estimates), memory_bytes, reserve_bytes, "analytic",
                        time.perf_counter() - t0, settings,
                        scope="(analytic: the transformer's weights exact per device, its step's activations by the "
                              "closed forms of vidax.models.ltx2.planner; Gemma, the connectors, the VAEs and the "
                              "vocoder on the first device; --reserve-gb keeps room for anything else)")


__all__ = ["ARCHITECTURES", "GEMMA4_12B", "LTX25_CONNECTORS", "LTX25_TRANSFORMER", "LTX2Model", "audio_decode_bytes",
           "comm_bytes", "decode_bytes", "diffusion_decode_bytes", "estimate_split", "folder_architecture",
           "parameter_counts", "per_device_bytes", "plan_ltx2", "preset_architecture", "step_activation_bytes",
           "token_counts"]
