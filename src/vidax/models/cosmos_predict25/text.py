"""Cosmos-Predict2.5's text conditioning: every hidden state of Qwen2.5-VL (Cosmos-Reason1-7B), each normalised,
concatenated on the feature axis.

Follows diffusers ``pipelines/cosmos/pipeline_cosmos2_5_predict.py`` (``Cosmos2_5_PredictBasePipeline.
_get_prompt_embeds`` and ``encode_prompt``) and the original repository (nvidia-cosmos/cosmos-predict2.5,
``cosmos_predict2/_src/predict2/text_encoders/text_encoder.py``: ``TextEncoder.compute_text_embeddings_online`` with
``EmbeddingConcatStrategy.FULL_CONCAT``, the strategy of every released checkpoint's experiment), which compute the
same thing (docs/design.md, "Cosmos-Predict2.5", "Text conditioning")::

    conversation = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}]
    input_ids = tokenizer.apply_chat_template(conversation, add_generation_prompt=False, max_length=512,
                                              truncation=True, padding="max_length")       # no attention mask
    hidden_states = text_encoder(input_ids, output_hidden_states=True).hidden_states      # 1 + 28 states
    prompt_embeds = cat([(h - h.mean(-1)) / (h.std(-1) + 1e-8) for h in hidden_states[1:]], -1)  # (B, 512, 100352)

The text encoder runs *without* an attention mask: the ``<|endoftext|>`` padding up to 512 tokens takes part in the
causal attention like any token (a prompt's own tokens never see it; the padded rows are part of the embedding, and
the transformer's cross-attention reads all 512 rows). ``hidden_states[1:]`` are the outputs of layers 1 .. 27 and
the final-normed output of layer 28; ``std`` is torch's, unbiased (``N - 1``). A prompt's embedding is the same alone
or in a batch (every row is padded to the same length and nothing is masked).

:func:`prompt_embeds` computes the states layer by layer and writes each one normalised straight into the
``(B, L, layers, hidden_size)`` output, so the raw hidden states are never all held (512 x 28 x 3584 floats, 205 MB,
per prompt for the release).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.core.attention import AttentionImpl
from vidax.core.config_values import read_json
from vidax.encoders import llama, qwen2_5_vl
from vidax.encoders.llama import LlamaConfig
from vidax.encoders.qwen2_tokenizer import Qwen2Tokenizer
from vidax.models.cosmos_predict25.presets import DEFAULT_NEGATIVE_PROMPT

#: The system turn of every prompt (diffusers ``_get_prompt_embeds``; the original's
#: ``compute_text_embeddings_online``).
SYSTEM_PROMPT = "You are a helpful assistant who will provide prompts to an image generator."

#: Tokens per prompt, chat frame included: cut on the right, padded to exactly this (diffusers'
#: ``max_sequence_length`` default; the original's ``NUM_EMBEDDING_PADDING_TOKENS``).
MAX_SEQUENCE_LENGTH = 512

#: Added to the standard deviation in the normalisation (both references).
NORM_EPS = 1e-8



@dataclass
class CosmosTextEncoder:
    """The text side of a Cosmos-Predict2.5 pipeline (diffusers' ``text_encoder`` and ``tokenizer``).

    Attributes:
      params: parameters of :func:`vidax.encoders.llama.llama_specs` (Qwen2.5-VL's language model).
      config: its architecture.
      tokenizer: Qwen2's tokenizer (Qwen2.5-VL's chat template, right padding with ``<|endoftext|>``).
    """

    params: dict
    config: LlamaConfig
    tokenizer: Qwen2Tokenizer

    @property
    def embed_dim(self) -> int:
        """Width of one embedding row: ``num_hidden_layers * hidden_size`` (28 x 3584 = 100352)."""
        return embed_dim(self.config)

    @property
    def weight_dtype(self) -> np.dtype:
        """The dtype of the weights (float32 or bfloat16): the embeddings' default dtype, as in diffusers."""
        return np.dtype(self.params["layers"]["self_attn"]["q_proj"]["kernel"].dtype)


def embed_dim(cfg: LlamaConfig) -> int:
    """``num_hidden_layers * hidden_size``: the feature width of :func:`prompt_embeds`."""
    return cfg.num_hidden_layers * cfg.hidden_size


def check_crossattn_proj_in_channels(cfg: LlamaConfig, crossattn_proj_in_channels: int, source: str = "") -> None:
    """Check that the text encoder's ``num_hidden_layers * hidden_size`` is the transformer's
    ``crossattn_proj_in_channels`` (the input width of its ``crossattn_proj``; 100352 in the release).

    Raises:
      ValueError: they differ (named, with both sizes).
    """
    if (not isinstance(crossattn_proj_in_channels, (int, np.integer)) or isinstance(crossattn_proj_in_channels, bool)
            or crossattn_proj_in_channels != embed_dim(cfg)):
        where = f"{source}: " if source else ""
        raise ValueError(
            f"{where}the text encoder gives {cfg.num_hidden_layers} layers x {cfg.hidden_size} = {embed_dim(cfg)} "
            f"features per token, but the transformer's crossattn_proj_in_channels is {crossattn_proj_in_channels!r}; "
            "Cosmos-Predict2.5 takes Cosmos-Reason1-7B (28 x 3584 = 100352): are the text encoder and the "
            "transformer from one release?")


# --------------------------------------------------------------------------- inputs


def _prompts(prompts: str | Sequence[str], name: str = "prompts") -> list[str]:
    if isinstance(prompts, str):
        prompts = [prompts]
    if not isinstance(prompts, Sequence):
        raise ValueError(f"{name} must be a string or a non-empty list of strings")
    prompts = list(prompts)
    if not prompts or not all(isinstance(p, str) for p in prompts):
        raise ValueError(f"{name} must be a string or a non-empty list of strings")
    return prompts


def format_conversations(prompts: Sequence[str]) -> list[list[dict[str, str]]]:
    """One ``[system, user]`` conversation per prompt, the prompt as it is (an empty prompt stays empty).

    The references write each content as ``[{"type": "text", "text": ...}]``; Qwen2.5-VL's chat template renders a
    text part exactly as the same string content (``add_vision_id`` only numbers images and videos).
    """
    return [[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": p}] for p in prompts]


def tokenize(tokenizer: Qwen2Tokenizer, prompts: str | Sequence[str],
             max_sequence_length: int = MAX_SEQUENCE_LENGTH) -> np.ndarray:
    """The chat-framed prompts as int32 ``(B, max_sequence_length)`` ids: ``apply_chat_template(...,
    add_generation_prompt=False, max_length=max_sequence_length, truncation=True, padding="max_length")``.

    A conversation longer than ``max_sequence_length`` is cut on the right (its ``<|im_end|>`` with it, as in both
    references) and a warning says so.

    Raises:
      ValueError: prompts that are not strings, or a non-positive length.
    """
    ids, _ = tokenizer.apply_chat_template(format_conversations(_prompts(prompts)), max_sequence_length,
                                           add_generation_prompt=False)
    return ids


# --------------------------------------------------------------------------- embeddings


def normalize_hidden_state(h: jax.Array) -> jax.Array:
    """``(h - h.mean(-1)) / (h.std(-1) + 1e-8)`` in float32, with torch's unbiased standard deviation
    (``N - 1``), over the last axis."""
    h = h.astype(jnp.float32)
    centered = h - jnp.mean(h, axis=-1, keepdims=True)
    var = jnp.sum(jnp.square(centered), axis=-1, keepdims=True) / (h.shape[-1] - 1)
    return centered / (jnp.sqrt(var) + NORM_EPS)


@partial(jax.jit, static_argnames=("cfg", "attention_impl", "out_dtype"))
def _normalized_states(params, x, *, cfg: LlamaConfig, attention_impl: str, out_dtype: str):
    """``(B, L, n * hidden_size)``: each layer's output normalised (the last one after the final norm), written into
    its slot of the output as it is computed."""
    b, s, d = x.shape
    n = cfg.num_hidden_layers
    impl = AttentionImpl(attention_impl)
    # Text alone: the three multimodal position rows are equal, which is plain RoPE over 0 .. L-1.
    cos, sin = llama.rope_cos_sin(cfg, jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s)))
    bias = llama.causal_bias(s)
    lengths = jnp.full((b,), s, jnp.int32)  # no attention mask: every token, padding included, is a key

    def body(i, carry):
        x, out = carry
        p = jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, i, keepdims=False), params["layers"])
        x = llama.decoder_layer(p, x, cos, sin, lengths, bias, cfg, impl)
        out = jax.lax.dynamic_update_index_in_dim(out, normalize_hidden_state(x).astype(out_dtype), i, axis=2)
        return x, out

    out = jnp.zeros((b, s, n, d), out_dtype)
    with jax.named_scope("layers"):
        x, out = jax.lax.fori_loop(0, n, body, (x.astype(jnp.float32), out))
    # transformers' hidden_states[-1] is the last layer's output after the final norm.
    last = llama.rms_norm(x, params["norm"], cfg.rms_norm_eps, cfg.norm_offset)
    out = out.at[:, :, n - 1].set(normalize_hidden_state(last).astype(out_dtype))
    return out.reshape(b, s, n * d)


def prompt_embeds(
    encoder: CosmosTextEncoder,
    prompts: str | Sequence[str],
    max_sequence_length: int = MAX_SEQUENCE_LENGTH,
    *,
    dtype: Any = None,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
    precision: str | None = "highest",
) -> jax.Array:
    """``Cosmos2_5_PredictBasePipeline._get_prompt_embeds(prompt, max_sequence_length, dtype=dtype)``.

    Args:
      encoder: the text encoder and tokenizer (:func:`load_text_encoder`).
      prompts: one prompt or a batch; each row is what the prompt gives alone.
      max_sequence_length: tokens per prompt, chat frame included (512); longer conversations are cut (a warning).
        At most the text encoder's ``max_position_embeddings``.
      dtype: the embeddings' dtype (diffusers: ``dtype or text_encoder.dtype``; give the transformer's); None: the
        text encoder's weight dtype. The normalisation is computed in float32 and rounded once.
      attention_impl: see :mod:`vidax.core.attention` (the causal mask is a score bias: ``cpu_flash`` and ``splash``
        fall back to ``chunked``).
      precision: matmul precision traced under (``"highest"``: no TF32); None leaves the ambient setting.

    Returns:
      ``(B, max_sequence_length, num_hidden_layers * hidden_size)`` in ``dtype``: layer ``k``'s normalised output
      at features ``k * hidden_size .. (k + 1) * hidden_size`` (``(B, 512, 100352)`` for the release).

    Raises:
      ValueError: bad prompts, a length out of range, ids outside the text encoder's vocabulary.
    """
    cfg = encoder.config
    if (not isinstance(max_sequence_length, (int, np.integer)) or isinstance(max_sequence_length, bool)
            or not 1 <= max_sequence_length <= cfg.max_position_embeddings):
        raise ValueError(f"max_sequence_length must be an integer in [1, {cfg.max_position_embeddings}] (the text "
                         f"encoder's max_position_embeddings), got {max_sequence_length!r}")
    out_dtype = jnp.dtype(encoder.weight_dtype if dtype is None else dtype)
    if not jnp.issubdtype(out_dtype, jnp.floating):
        raise ValueError(f"dtype must be a floating-point dtype, got {out_dtype}")
    ids = tokenize(encoder.tokenizer, prompts, int(max_sequence_length))
    with (jax.default_matmul_precision(precision) if precision is not None
          else contextlib.nullcontext()):
        x = llama.embed_tokens(encoder.params, cfg, ids)
        return _normalized_states(encoder.params, x, cfg=cfg, attention_impl=AttentionImpl(attention_impl).value,
                                  out_dtype=out_dtype.name)


def encode_prompt(
    encoder: CosmosTextEncoder,
    prompts: str | Sequence[str],
    negative_prompts: str | Sequence[str] | None = None,
    *,
    do_classifier_free_guidance: bool = True,
    max_sequence_length: int = MAX_SEQUENCE_LENGTH,
    dtype: Any = None,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
) -> tuple[jax.Array, jax.Array | None]:
    """``Cosmos2_5_PredictBasePipeline.encode_prompt(prompt, negative_prompt, do_classifier_free_guidance)`` with
    ``num_videos_per_prompt=1`` (repetition is the caller's).

    Prompts and negative prompts go through the text encoder as one batch (each row is what it gives alone).

    Args:
      encoder: see :func:`prompt_embeds`.
      prompts: one prompt or a batch of ``B``.
      negative_prompts: None (:data:`DEFAULT_NEGATIVE_PROMPT` for every prompt), one string for every prompt, or
        ``B`` strings; unused without guidance.
      do_classifier_free_guidance: also encode the negative prompts.
      max_sequence_length, dtype, attention_impl: see :func:`prompt_embeds`.

    Returns:
      ``(prompt_embeds, negative_prompt_embeds)``, each ``(B, max_sequence_length, embed_dim)``; the second None
      without guidance.

    Raises:
      ValueError: a negative batch of another size than the prompts' (diffusers raises it too), and see
        :func:`prompt_embeds`.
    """
    prompts = _prompts(prompts)
    if not do_classifier_free_guidance:
        return prompt_embeds(encoder, prompts, max_sequence_length, dtype=dtype, attention_impl=attention_impl), None
    if negative_prompts is None:
        negative_prompts = DEFAULT_NEGATIVE_PROMPT
    if isinstance(negative_prompts, str):
        negative_prompts = [negative_prompts] * len(prompts)
    negative_prompts = _prompts(negative_prompts, "negative_prompts")
    if len(negative_prompts) != len(prompts):
        raise ValueError(f"{len(negative_prompts)} negative prompts for {len(prompts)} prompts: give one negative "
                         "prompt, or one per prompt")
    both = prompt_embeds(encoder, prompts + negative_prompts, max_sequence_length, dtype=dtype,
                         attention_impl=attention_impl)
    return both[:len(prompts)], both[len(prompts):]


# --------------------------------------------------------------------------- loading


def load_text_encoder(text_encoder: str | Path, tokenizer: str | Path | None = None, dtype: Any = np.float32, *,
                      crossattn_proj_in_channels: int | None = None, **load_kwargs) -> CosmosTextEncoder:
    """The Qwen2.5-VL text encoder and its tokenizer; the tokenizer, the config and the transformer's width are
    checked before any weight is read.

    Args:
      text_encoder: diffusers' ``<pipeline>/text_encoder`` (``Qwen2_5_VLForConditionalGeneration``, whichever key
        layout its transformers version wrote) or the original release's text encoder (nvidia/Cosmos-Reason1-7B,
        the whole model); the vision tower and LM head are not read (:data:`vidax.encoders.qwen2_5_vl.
        QWEN2_5_VL_LAYOUTS`).
      tokenizer: the tokenizer folder (diffusers' ``<pipeline>/tokenizer``); None: ``text_encoder`` itself (the
        Cosmos-Reason1-7B folder holds Qwen2.5-VL-7B-Instruct's tokenizer).
      dtype: weights (``float32`` or ``bfloat16``; norm scales stay float32).
      crossattn_proj_in_channels: the transformer's, to check against (:func:`check_crossattn_proj_in_channels`);
        None: not checked.
      load_kwargs: passed to :func:`vidax.checkpoint.loader.load_params` (``shardings``, ``place``).

    Raises:
      CheckpointError: a missing or malformed folder, tokenizer or tensor (named); a tokenizer whose vocabulary is
        larger than the text encoder's embedding table.
      ValueError: an unsupported configuration, or a width that is not ``crossattn_proj_in_channels``.
    """
    tokenizer_folder = Path(text_encoder if tokenizer is None else tokenizer)
    tok = Qwen2Tokenizer.from_folder(tokenizer_folder)
    config_path = Path(text_encoder) / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{config_path}: file not found (a Qwen2.5-VL text encoder folder needs its "
                              "config.json)")
    cfg = qwen2_5_vl.config_from_dict(read_json(config_path), str(config_path))
    if crossattn_proj_in_channels is not None:
        check_crossattn_proj_in_channels(cfg, crossattn_proj_in_channels, str(config_path))
    if tok.vocab_size > cfg.vocab_size:
        raise CheckpointError(f"{tokenizer_folder}: the tokenizer has {tok.vocab_size} tokens, more than the text "
                              f"encoder's {cfg.vocab_size} embeddings ({text_encoder}); are they from one release?")
    params, cfg = qwen2_5_vl.load_qwen2_5_vl(text_encoder, dtype, **load_kwargs)
    return CosmosTextEncoder(params, cfg, tok)
