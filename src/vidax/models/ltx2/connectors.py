"""LTX-2's text path after the Gemma encoder: feature extraction and the video / audio text connectors.

Follows diffusers 0.42.1 ``pipelines/ltx2/connectors.py`` (``LTX2TextConnectors``,
``LTX2ConnectorTransformer1d``, ``LTX2TransformerBlock1d``, ``LTX2RotaryPosEmbed1d``, ``per_token_rms_norm``,
``per_layer_masked_mean_norm``) and upstream Lightricks/LTX-2 ``ltx-core`` ``text_encoders/gemma/``
(``feature_extractor.py``: ``FeatureExtractorV1`` / ``FeatureExtractorV2``; ``embeddings_processor.py``;
``embeddings_connector.py``: ``Embeddings1DConnector``). Upstream is the reference where they differ: the
normalisations read the attention mask (diffusers' LTX-2.0 one rebuilds it from the lengths and a padding side),
and the rescale is ``sqrt(projection output width / text encoder width)`` (diffusers reads
``video_hidden_dim`` / ``audio_hidden_dim`` / ``caption_channels`` from its config, the numbers its projections are
built from, so for a diffusers folder the two agree).

Features (``hidden_states``: every Gemma hidden state, ``(layers, B, L, D)``, :func:`vidax.encoders.gemma.encode`):

* LTX-2.3 / 2.5 (``per_modality_projections``; upstream ``FeatureExtractorV2``): each token of each layer divided
  by its RMS over ``D`` (eps 1e-6), padding zeroed, times ``sqrt(out / D)`` for each modality's projection of
  width ``out`` (``video_hidden_dim``, ``audio_hidden_dim``), then that projection.
* LTX-2.0 (``FeatureExtractorV1``): per sample and layer, ``8 (x - mean) / (max - min + 1e-6)`` over the valid
  tokens, padding zeroed, one projection for both modalities.

The features are flattened ``(D, layers)``-major as the reference flattens ``stack(hidden_states, -1)``; the
projection is applied as an einsum over the unflattened kernel so the ``L x D*layers`` matrix is never built.

Connector (one for video, one for audio; each a 1D transformer): the valid tokens are moved to the front in
their order (a stable sort on the mask: upstream ``_compute_right_pad_order``), the rest of the sequence is
filled with the learnable registers by absolute position (register ``t % R`` at position ``t``), then, with no
attention mask, ``num_layers`` pre-norm blocks (parameter-free RMSNorm; self-attention with RMSNorm'd q/k over all
heads, 1D RoPE on positions ``t / base_seq_len`` and an optional per-head gate ``2 sigmoid(.)``; a GELU-tanh MLP
of width ``4 D``) and a final parameter-free RMSNorm. Every output position is valid (the returned mask is ones).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.keymap import KeyMap, Rule, linear as linear_rules, norm as norm_rules, rules
from vidax.core.attention import AttentionImpl, attention
from vidax.core.config_values import read_json
from vidax.core.layers import linear
from vidax.core.params import ParamSpec, SpecTree, linear_spec

ROPE_TYPES = ("interleaved", "split")
EPS = 1e-6


@dataclass(frozen=True)
class ConnectorsConfig:
    """``LTX2TextConnectors``' configuration (its ``config.json`` keys and defaults)."""

    caption_channels: int = 3840
    text_proj_in_factor: int = 49
    video_connector_num_attention_heads: int = 30
    video_connector_attention_head_dim: int = 128
    video_connector_num_layers: int = 2
    video_connector_num_learnable_registers: int | None = 128
    video_gated_attn: bool = False
    audio_connector_num_attention_heads: int = 30
    audio_connector_attention_head_dim: int = 128
    audio_connector_num_layers: int = 2
    audio_connector_num_learnable_registers: int | None = 128
    audio_gated_attn: bool = False
    connector_rope_base_seq_len: int = 4096
    rope_theta: float = 10000.0
    rope_double_precision: bool = True
    rope_type: str = "interleaved"
    per_modality_projections: bool = False
    video_hidden_dim: int = 4096
    audio_hidden_dim: int = 2048
    proj_bias: bool = False

    def __post_init__(self):
        bounds = {"caption_channels": 1 << 20, "text_proj_in_factor": 1 << 20, "connector_rope_base_seq_len": 1 << 20,
                  "video_hidden_dim": 1 << 16, "audio_hidden_dim": 1 << 16}
        for m in ("video", "audio"):
            bounds.update({f"{m}_connector_num_attention_heads": 1024, f"{m}_connector_attention_head_dim": 1024,
                           f"{m}_connector_num_layers": 256, f"{m}_connector_num_learnable_registers": 1 << 16})
        for name, top in bounds.items():  # bounded before any per-layer or per-register work
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and 0 < v <= top):
                raise ValueError(f"connectors config: {name}={v!r} must be an integer in 1..{top}")
        if not (isinstance(self.rope_theta, (int, float)) and not isinstance(self.rope_theta, bool)
                and math.isfinite(self.rope_theta) and self.rope_theta > 0):
            raise ValueError(f"connectors config: rope_theta={self.rope_theta!r} must be a finite positive number")
        if self.rope_type not in ROPE_TYPES:
            raise ValueError(f"connectors config: rope_type {self.rope_type!r} is not one of {ROPE_TYPES}")
        for m in ("video", "audio"):
            regs = getattr(self, f"{m}_connector_num_learnable_registers")
            if not regs:
                raise ValueError(f"connectors config: {m} connector without learnable registers is not supported "
                                 "(every LTX-2 release has them)")
            if self.width(m) != self.proj_width(m):
                raise ValueError(f"connectors config: the {m} projection gives {self.proj_width(m)} channels but its "
                                 f"connector is {self.width(m)} wide")

    def heads(self, m: str) -> int:
        return getattr(self, f"{m}_connector_num_attention_heads")

    def width(self, m: str) -> int:
        """Connector width ``heads * head_dim`` of modality ``m`` (``"video"`` / ``"audio"``)."""
        return self.heads(m) * getattr(self, f"{m}_connector_attention_head_dim")

    def proj_width(self, m: str) -> int:
        return getattr(self, f"{m}_hidden_dim") if self.per_modality_projections else self.caption_channels

    def registers(self, m: str) -> int:
        return getattr(self, f"{m}_connector_num_learnable_registers")

    def layers(self, m: str) -> int:
        return getattr(self, f"{m}_connector_num_layers")

    def gated(self, m: str) -> bool:
        return getattr(self, f"{m}_gated_attn")

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> ConnectorsConfig:
        """Build from the ``connectors/config.json`` dict; unknown keys (``_class_name``, ...) are ignored.

        Raises:
          ValueError: an unsupported setting.
        """
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in config.items() if k in names})

    @classmethod
    def from_release(cls, transformer: dict[str, Any], text_hidden_size: int, text_num_layers: int) -> ConnectorsConfig:
        """Build from a release checkpoint's metadata, as upstream ltx-core builds its ``EmbeddingsProcessor``
        (``Embeddings1DConnectorConfigurator``, ``AudioEmbeddings1DConnectorConfigurator``,
        ``_create_feature_extractor``).

        Args:
          transformer: the ``config["transformer"]`` dict of the file's ``config`` metadata.
          text_hidden_size, text_num_layers: the Gemma text config's ``hidden_size`` and ``num_hidden_layers``.

        Raises:
          ValueError: a setting diffusers' connectors cannot express (``connector_ff_bias`` false, a multi-axis
            ``connector_positional_embedding_max_pos``, a partial V2 configuration), named.
        """
        t = transformer
        v2_keys = {"caption_proj_before_connector": True, "caption_projection_first_linear": False,
                   "caption_proj_input_norm": False, "caption_projection_second_linear": False}
        present = {k for k in v2_keys if k in t}
        if present and (present != set(v2_keys) or any(t[k] != v2_keys[k] for k in v2_keys)):
            raise ValueError(f"release connectors: unknown feature-extractor configuration "
                             f"{ {k: t.get(k) for k in v2_keys} }")
        if not t.get("connector_ff_bias", True):
            raise ValueError("release connectors: connector_ff_bias=false is not supported")
        max_pos = list(t.get("connector_positional_embedding_max_pos", [1]))
        if len(max_pos) != 1:
            raise ValueError(f"release connectors: connector_positional_embedding_max_pos {max_pos} is not 1D")
        gated = bool(t.get("connector_apply_gated_attention", False))
        video = {"heads": t.get("connector_num_attention_heads", 30), "dim": t.get("connector_attention_head_dim", 128),
                 "layers": t.get("connector_num_layers", 2)}
        audio = {"heads": t.get("audio_connector_num_attention_heads", video["heads"]),
                 "dim": t.get("audio_connector_attention_head_dim", video["dim"]),
                 "layers": t.get("audio_connector_num_layers", video["layers"])}
        kw = dict(caption_channels=int(text_hidden_size), text_proj_in_factor=int(text_num_layers) + 1,
                  connector_rope_base_seq_len=int(max_pos[0]), rope_theta=10000.0,
                  rope_double_precision=t.get("frequencies_precision", False) == "float64",
                  rope_type=str(t.get("rope_type", "split")), per_modality_projections=bool(present),
                  video_gated_attn=gated, audio_gated_attn=gated, proj_bias=bool(present))
        for m, c in (("video", video), ("audio", audio)):
            kw.update({f"{m}_connector_num_attention_heads": c["heads"], f"{m}_connector_attention_head_dim": c["dim"],
                       f"{m}_connector_num_layers": c["layers"], f"{m}_connector_num_learnable_registers": 128})
        if present:
            kw["video_hidden_dim"] = t["num_attention_heads"] * t["attention_head_dim"]
            kw["audio_hidden_dim"] = t["audio_num_attention_heads"] * t["audio_attention_head_dim"]
        return cls(**kw)


# --------------------------------------------------------------------------- parameters


def _connector_specs(cfg: ConnectorsConfig, m: str) -> dict:
    d, n, h = cfg.width(m), cfg.layers(m), cfg.heads(m)
    attn = {name: linear_spec(d, d, ("embed", "heads"), layers=n) for name in ("to_q", "to_k", "to_v")}
    attn["to_out"] = linear_spec(d, d, ("heads", "embed"), layers=n)
    attn["norm_q"] = {"scale": ParamSpec((n, d), fp32=True, axes=("layers", None))}
    attn["norm_k"] = {"scale": ParamSpec((n, d), fp32=True, axes=("layers", None))}
    if cfg.gated(m):
        attn["to_gate_logits"] = linear_spec(d, h, ("embed", None), layers=n)
    return {
        "learnable_registers": ParamSpec((cfg.registers(m), d), axes=(None, "embed")),
        "blocks": {"attn1": attn,
                   "ff": {"proj_in": linear_spec(d, 4 * d, ("embed", "mlp"), layers=n),
                          "proj_out": linear_spec(4 * d, d, ("mlp", "embed"), layers=n)}},
    }


def connectors_specs(cfg: ConnectorsConfig) -> SpecTree:
    """Spec tree: the projection(s) (``text_proj_in``, or ``video_text_proj_in`` + ``audio_text_proj_in``) and the
    ``video_connector`` / ``audio_connector`` (blocks stacked)."""
    flat = cfg.caption_channels * cfg.text_proj_in_factor
    specs: SpecTree = {}
    if cfg.per_modality_projections:
        for m in ("video", "audio"):
            specs[f"{m}_text_proj_in"] = linear_spec(flat, cfg.proj_width(m), ("embed", None), bias=cfg.proj_bias)
    else:
        specs["text_proj_in"] = linear_spec(flat, cfg.caption_channels, ("embed", None), bias=cfg.proj_bias)
    for m in ("video", "audio"):
        specs[f"{m}_connector"] = _connector_specs(cfg, m)
    return specs


def connectors_keymap(cfg: ConnectorsConfig) -> KeyMap:
    """Key map of diffusers' ``connectors/`` folder (``LTX2TextConnectors.save_pretrained``)."""
    groups: list = []
    if cfg.per_modality_projections:
        for m in ("video", "audio"):
            groups.append(linear_rules(f"{m}_text_proj_in", f"{m}_text_proj_in", bias=cfg.proj_bias))
    else:
        groups.append(linear_rules("text_proj_in", "text_proj_in", bias=cfg.proj_bias))
    for m in ("video", "audio"):
        c, b = f"{m}_connector", f"{m}_connector.transformer_blocks.{{i}}"
        groups.append(Rule(f"{c}.learnable_registers", f"{c}/learnable_registers"))
        names = ["to_q", "to_k", "to_v"] + (["to_gate_logits"] if cfg.gated(m) else [])
        groups += [linear_rules(f"{b}.attn1.{n}", f"{c}/blocks/attn1/{n}") for n in names]
        groups.append(linear_rules(f"{b}.attn1.to_out.0", f"{c}/blocks/attn1/to_out"))
        groups += [norm_rules(f"{b}.attn1.{n}", f"{c}/blocks/attn1/{n}", bias=False) for n in ("norm_q", "norm_k")]
        groups.append(linear_rules(f"{b}.ff.net.0.proj", f"{c}/blocks/ff/proj_in"))
        groups.append(linear_rules(f"{b}.ff.net.2", f"{c}/blocks/ff/proj_out"))
    return KeyMap(rules(*groups))


#: Upstream names (release checkpoint, ltx-core ``EMBEDDINGS_PROCESSOR_KEY_OPS``) of the projections.
RELEASE_PROJECTIONS = {"text_proj_in": "text_embedding_projection.aggregate_embed",
                       "video_text_proj_in": "text_embedding_projection.video_aggregate_embed",
                       "audio_text_proj_in": "text_embedding_projection.audio_aggregate_embed"}


def connectors_release_keymap(cfg: ConnectorsConfig) -> KeyMap:
    """Key map of the connectors inside a release checkpoint (upstream names: ``text_embedding_projection.*``,
    ``model.diffusion_model.{video,audio}_embeddings_connector.transformer_1d_blocks.{i}.attn1.{q,k}_norm`` ...;
    diffusers' ``scripts/convert_ltx2_to_diffusers.py`` renames them). Every other tensor of the file (the
    transformer's) is ignored: the map is strict about the connectors' own parameters only."""
    ours = connectors_keymap(cfg)
    out = []
    for r in ours.rules:
        key = r.key
        for name, theirs in RELEASE_PROJECTIONS.items():
            if key.startswith(f"{name}."):
                key = theirs + key[len(name):]
        for m in ("video", "audio"):
            if key.startswith(f"{m}_connector."):
                key = f"model.diffusion_model.{m}_embeddings_connector." + key[len(f"{m}_connector."):]
        for ours_name, theirs in ((".transformer_blocks.", ".transformer_1d_blocks."),
                                  (".attn1.norm_q.", ".attn1.q_norm."), (".attn1.norm_k.", ".attn1.k_norm.")):
            key = key.replace(ours_name, theirs)
        out.append(Rule(key, r.path, r.layout))
    return KeyMap(out, ignore=[r".*"])


def load_connectors(folder: str | Path, dtype: Any = np.float32, **load_kwargs) -> tuple[dict, ConnectorsConfig]:
    """Load diffusers' ``connectors/`` folder strictly.

    Raises:
      CheckpointError: no ``config.json``, or weights that do not match it (all listed).
      ValueError: an unsupported configuration.
    """
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.reader import CheckpointReader

    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{config_path}: file not found (the connectors folder needs its config.json)")
    cfg = ConnectorsConfig.from_dict(read_json(config_path))
    params = load_params(CheckpointReader(folder), connectors_keymap(cfg), connectors_specs(cfg), dtype,
                         source=str(folder), **load_kwargs)
    return params, cfg


# --------------------------------------------------------------------------- features


def _project(p: dict, feats: jax.Array) -> jax.Array:
    """``linear(p, flatten(feats))`` for ``feats`` ``(layers, B, L, D)`` flattened ``(D, layers)``-major, as an
    einsum over the kernel viewed ``(D, layers, out)``."""
    n, _, _, d = feats.shape
    w = p["kernel"]
    y = jnp.einsum("nbld,dno->blo", feats.astype(w.dtype), w.reshape(d, n, w.shape[-1]),
                   preferred_element_type=jnp.float32)
    return y + p["bias"].astype(jnp.float32) if "bias" in p else y


def per_token_rms_features(hidden_states: jax.Array, mask: jax.Array) -> jax.Array:
    """Upstream ``norm_and_concat_per_token_rms`` before flattening: float32 ``(layers, B, L, D)``, each token of
    each layer divided by ``sqrt(mean_D(x^2) + 1e-6)``, padding zeroed."""
    x = hidden_states.astype(jnp.float32)
    x = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + EPS)
    return jnp.where(mask[None, :, :, None], x, 0.0)


def masked_mean_range_features(hidden_states: jax.Array, mask: jax.Array, scale: float = 8.0) -> jax.Array:
    """Upstream ``_norm_and_concat_padded_batch`` before flattening: per sample and layer,
    ``scale (x - mean) / (max - min + 1e-6)`` with the statistics over the valid tokens, padding zeroed."""
    x = hidden_states.astype(jnp.float32)
    m = mask[None, :, :, None]
    d = x.shape[-1]
    count = (mask.sum(axis=1) * d).astype(jnp.float32)[None, :, None, None]
    mean = jnp.where(m, x, 0.0).sum(axis=(2, 3), keepdims=True) / (count + EPS)
    lo = jnp.where(m, x, jnp.inf).min(axis=(2, 3), keepdims=True)
    hi = jnp.where(m, x, -jnp.inf).max(axis=(2, 3), keepdims=True)
    return jnp.where(m, scale * (x - mean) / (hi - lo + EPS), 0.0)


# --------------------------------------------------------------------------- connector


def rope_1d(cfg: ConnectorsConfig, m: str, length: int) -> tuple[np.ndarray, np.ndarray]:
    """float32 ``(cos, sin)`` of ``LTX2RotaryPosEmbed1d``: ``(L, D)`` interleaved, ``(L, heads, head_dim / 2)``
    split. Frequencies ``theta^linspace(0, 1, D/2) * pi / 2`` (float64 with ``rope_double_precision``, then
    float32), angles ``(2 t / base_seq_len - 1) * freq`` in float32."""
    d = cfg.width(m)
    ftype = np.float64 if cfg.rope_double_precision else np.float32
    freqs = (np.power(ftype(cfg.rope_theta), np.linspace(0.0, 1.0, d // 2, dtype=ftype)) * np.pi / 2.0)
    freqs = freqs.astype(np.float32)
    grid = np.arange(length, dtype=np.float32) / np.float32(cfg.connector_rope_base_seq_len)
    ang = (grid[:, None] * np.float32(2) - np.float32(1)) * freqs[None]
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    if cfg.rope_type == "interleaved":
        return np.repeat(cos, 2, axis=-1), np.repeat(sin, 2, axis=-1)
    return cos.reshape(length, cfg.heads(m), -1), sin.reshape(length, cfg.heads(m), -1)


def _apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array, rope_type: str, heads: int) -> jax.Array:
    """Rotate float32 ``x`` ``(B, L, D)``: interleaved pairs ``(x0, x1) -> (-x1, x0)`` over ``D``, or per head
    split halves (diffusers ``apply_interleaved_rotary_emb`` / ``apply_split_rotary_emb``)."""
    if rope_type == "interleaved":
        pairs = x.reshape(*x.shape[:-1], -1, 2)
        rot = jnp.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(x.shape)
        return x * cos + rot * sin
    b, s, d = x.shape
    xh = x.reshape(b, s, heads, d // heads)
    half = xh.shape[-1] // 2
    first, second = xh[..., :half], xh[..., half:]
    out = jnp.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)
    return out.reshape(b, s, d)


def _rms(x: jax.Array, scale: jax.Array | None = None) -> jax.Array:
    x = x.astype(jnp.float32)
    y = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + EPS)
    return y if scale is None else y * scale.astype(jnp.float32)


def _block(p: dict, x: jax.Array, cos, sin, cfg: ConnectorsConfig, m: str, impl) -> jax.Array:
    attn, ff = p["attn1"], p["ff"]
    dtype = attn["to_q"]["kernel"].dtype
    b, s, d = x.shape
    h = cfg.heads(m)
    with jax.named_scope("attn1"):
        n = _rms(x).astype(dtype)
        q = _apply_rope(_rms(linear(attn["to_q"], n, jnp.float32), attn["norm_q"]["scale"]), cos, sin,
                        cfg.rope_type, h)
        k = _apply_rope(_rms(linear(attn["to_k"], n, jnp.float32), attn["norm_k"]["scale"]), cos, sin,
                        cfg.rope_type, h)
        v = linear(attn["to_v"], n)
        o = attention(q.astype(dtype).reshape(b, s, h, -1), k.astype(dtype).reshape(b, s, h, -1),
                      v.reshape(b, s, h, -1), implementation=impl)
        if "to_gate_logits" in attn:
            gates = 2.0 * jax.nn.sigmoid(linear(attn["to_gate_logits"], n, jnp.float32))
            o = (o.astype(jnp.float32) * gates[..., None]).astype(dtype)
        x = x + linear(attn["to_out"], o.reshape(b, s, d), jnp.float32)
    with jax.named_scope("ff"):
        n = _rms(x).astype(dtype)
        g = jax.nn.gelu(linear(ff["proj_in"], n, jnp.float32), approximate=True)
        x = x + linear(ff["proj_out"], g, jnp.float32)
    return x


def connector(p: dict, x: jax.Array, mask: jax.Array, cfg: ConnectorsConfig, m: str, impl) -> jax.Array:
    """One ``LTX2ConnectorTransformer1d`` (modality ``m``) on float32 ``x`` ``(B, L, D)`` with the bool ``(B, L)``
    mask of valid tokens (any padding side). Returns float32 ``(B, L, D)``."""
    b, s, d = x.shape
    order = jnp.argsort(1 - mask.astype(jnp.int32), axis=1, stable=True)  # valid tokens first, in order
    front = jnp.take_along_axis(x, order[..., None], axis=1)
    regs = p["learnable_registers"].astype(jnp.float32)
    regs = jnp.tile(regs, (s // regs.shape[0], 1))  # register t % R at position t
    valid = jnp.arange(s)[None, :] < mask.sum(axis=1, keepdims=True)
    x = jnp.where(valid[..., None], front, regs[None])
    cos, sin = (jnp.asarray(a) for a in rope_1d(cfg, m, s))

    def step(x, blk):
        return _block(blk, x, cos, sin, cfg, m, impl), None

    x, _ = jax.lax.scan(step, x, p["blocks"])
    return _rms(x)


@partial(jax.jit, static_argnames=("cfg", "attention_impl"))
def _forward(params, hidden_states, mask, *, cfg: ConnectorsConfig, attention_impl):
    impl = AttentionImpl(attention_impl)
    if cfg.per_modality_projections:
        feats = per_token_rms_features(hidden_states, mask)
        # upstream _rescale_norm: sqrt(projection out_features / text encoder hidden_size)
        video, audio = (_project(params[f"{m}_text_proj_in"], feats * math.sqrt(
            params[f"{m}_text_proj_in"]["kernel"].shape[-1] / hidden_states.shape[-1])) for m in ("video", "audio"))
    else:
        video = audio = _project(params["text_proj_in"], masked_mean_range_features(hidden_states, mask))
    with jax.named_scope("video_connector"):
        video = connector(params["video_connector"], video, mask, cfg, "video", impl)
    with jax.named_scope("audio_connector"):
        audio = connector(params["audio_connector"], audio, mask, cfg, "audio", impl)
    return video, audio


def encode_text(params: dict, cfg: ConnectorsConfig, hidden_states: Any, attention_mask: Any, *,
                attention_impl: AttentionImpl | str = AttentionImpl.XLA,
                precision: str | None = "highest") -> tuple[jax.Array, jax.Array, jax.Array]:
    """Gemma hidden states -> the transformer's video and audio text contexts (``LTX2TextConnectors.forward`` after
    the pipeline's stacking; upstream ``EmbeddingsProcessor.process_hidden_states``).

    Args:
      params: tree of :func:`connectors_specs`.
      hidden_states: ``(text_proj_in_factor, B, L, caption_channels)`` every hidden state of the text encoder
        (:func:`vidax.encoders.gemma.encode`).
      attention_mask: ``(B, L)`` 1 for tokens, 0 for padding (left padding as LTX tokenizes; any side works).

    Returns:
      ``(video (B, L, video width), audio (B, L, audio width), mask (B, L) int32 ones)`` float32 contexts; valid
      tokens first, registers after.

    Raises:
      ValueError: shapes that do not fit the configuration, or ``L`` not a multiple of each connector's registers.
    """
    hs = hidden_states if isinstance(hidden_states, jax.Array) else np.asarray(hidden_states)
    want = (cfg.text_proj_in_factor, cfg.caption_channels)
    if hs.ndim != 4 or (hs.shape[0], hs.shape[3]) != want:
        raise ValueError(f"hidden_states must be ({want[0]}, B, L, {want[1]}); got {tuple(hs.shape)}")
    mask = np.asarray(attention_mask)
    if mask.shape != tuple(hs.shape[1:3]):
        raise ValueError(f"attention_mask must be (B, L) = {tuple(hs.shape[1:3])}; got {mask.shape}")
    for m in ("video", "audio"):
        if hs.shape[2] % cfg.registers(m):
            raise ValueError(f"text length {hs.shape[2]} must be a multiple of the {m} connector's "
                             f"{cfg.registers(m)} learnable registers")
    ctx = contextlib.nullcontext() if precision is None else jax.default_matmul_precision(precision)
    with ctx:
        video, audio = _forward(params, jnp.asarray(hs), jnp.asarray(mask != 0), cfg=cfg,
                                attention_impl=AttentionImpl(attention_impl).value)
    return video, audio, jnp.ones(mask.shape, jnp.int32)
