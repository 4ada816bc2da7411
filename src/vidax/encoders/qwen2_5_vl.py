"""Qwen2.5-VL's language model as a text encoder, on the decoder of :mod:`vidax.encoders.llama`.

Follows transformers ``models/qwen2_5_vl/modeling_qwen2_5_vl.py`` (``Qwen2_5_VLTextModel``:
``Qwen2_5_VLDecoderLayer``, ``Qwen2_5_VLAttention``, ``Qwen2MLP``, ``Qwen2_5_VLRMSNorm``,
``Qwen2_5_VLRotaryEmbedding``) and ``configuration_qwen2_5_vl.py`` (``Qwen2_5_VLTextConfig``, ``Qwen2_5_VLConfig``).
HunyuanVideo-1.5 and Cosmos-Predict2.5 take the hidden states of Qwen2.5-VL-7B-Instruct's language model
(28 layers of width 3584, 28 query heads and 4 key/value heads of 128, SiLU MLP 18944, RMSNorm eps 1e-6,
RoPE theta 1e6, vocabulary 152064).

The layer is Llama's with biases on the q/k/v projections (none on the output projection or the MLP), so the
decoder, its parameter tree and its key rules are :mod:`vidax.encoders.llama`'s with ``qkv_bias=True``. The RoPE is
multimodal (:attr:`LlamaConfig.mrope_section`, ``[16, 24, 24]`` for the 7B): position ids ``(3, B, L)``, one row
each for the temporal, height and width positions of vision tokens, frequency section ``i`` rotated by row
``i % 3``. A text-only prompt has three equal rows (``Qwen2_5_VLTextModel``'s default ``0 .. L-1``), which is plain
RoPE; :func:`encode` takes ``(3, B, L)`` positions too, for the image path of a later model.

Checkpoint layouts (:data:`QWEN2_5_VL_LAYOUTS`, chosen by where ``embed_tokens.weight`` is):

- ``Qwen2_5_VLTextModel.save_pretrained`` (diffusers' HunyuanVideo-1.5 ``text_encoder/``): ``layers.*``,
  ``embed_tokens.weight``, ``norm.weight``;
- the released ``Qwen2_5_VLForConditionalGeneration`` (Qwen/Qwen2.5-VL-7B-Instruct, and what transformers 5 still
  writes on ``save_pretrained``): ``model.layers.*``, ``model.embed_tokens.weight``, ``model.norm.weight``,
  ``visual.*``, ``lm_head.weight``;
- the same class's state dict in transformers >= 4.52: ``model.language_model.*``, ``model.visual.*``,
  ``lm_head.weight``; and ``Qwen2_5_VLModel``'s (``AutoModel``): ``language_model.*``, ``visual.*``.

Each layout names the tensors the text path leaves unread (the vision tower, the LM head); any other unknown tensor
is an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.keymap import KeyMap
from vidax.core.attention import AttentionImpl
from vidax.core.config_values import config_values, read_json
from vidax.encoders import llama
from vidax.encoders.llama import LlamaConfig

#: ``model_type`` values of a Qwen2.5-VL ``config.json``: the whole model (text settings in ``text_config`` since
#: transformers 4.5x, at the top level before) and the language model alone (``Qwen2_5_VLTextModel``).
MODEL_TYPES = ("qwen2_5_vl", "qwen2_5_vl_text")

#: ``Qwen2_5_VLTextConfig``'s defaults for the keys a config may leave out (transformers resolves a partial config
#: with them), and the multimodal RoPE sections ``Qwen2_5_VLRotaryEmbedding`` assumes when none are given.
TEXT_CONFIG_DEFAULTS: dict[str, Any] = {
    "vocab_size": 152064, "hidden_size": 8192, "intermediate_size": 29568, "num_hidden_layers": 80,
    "num_attention_heads": 64, "num_key_value_heads": 8, "hidden_act": "silu", "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-5,
}
DEFAULT_ROPE_THETA = 1000000.0
DEFAULT_MROPE_SECTION = (16, 24, 24)

_INV_FREQ = r".*rotary_emb\.inv_freq\Z"  # RoPE buffers some older writers saved

#: Key prefix of the language model in each checkpoint layout (most specific first) -> the tensors of that layout
#: the text path deliberately leaves unread: the vision tower and the LM head.
QWEN2_5_VL_LAYOUTS: dict[str, tuple[str, ...]] = {
    "model.language_model.": (r"model\.visual\.", r"lm_head\.weight\Z", _INV_FREQ),  # state dict, transformers 5
    "language_model.": (r"visual\.", _INV_FREQ),  # Qwen2_5_VLModel (AutoModel)
    "model.": (r"visual\.", r"lm_head\.weight\Z", _INV_FREQ),  # the released Qwen2_5_VLForConditionalGeneration
    "": (_INV_FREQ,),  # Qwen2_5_VLTextModel (diffusers' text_encoder/)
}


def _int_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def config_from_dict(config: dict[str, Any], source: str = "Qwen2.5-VL config") -> LlamaConfig:
    """The language model's architecture from a transformers ``config.json`` dict, as a :class:`LlamaConfig`
    (``qkv_bias``, no ``o_bias``, ``mrope_section``).

    Reads a ``qwen2_5_vl`` config (text settings in ``text_config``, or at the top level as the released
    Qwen2.5-VL-7B-Instruct keeps them) or a ``qwen2_5_vl_text`` config; RoPE from transformers 5's
    ``rope_parameters`` or the older ``rope_theta`` + ``rope_scaling`` (``{"type": "mrope", "mrope_section": ...}``;
    ``"mrope"`` is the default RoPE with sections, as transformers reads it). Missing keys take
    ``Qwen2_5_VLTextConfig``'s defaults (:data:`TEXT_CONFIG_DEFAULTS`).

    Raises:
      ValueError: another model type; a value of the wrong type; a RoPE other than default/mrope; sliding-window
        attention (``use_sliding_window`` or a ``sliding_attention`` layer type: not implemented); a ``head_dim``
        other than ``hidden_size / num_attention_heads`` (transformers' attention ignores it); each named.
    """
    if not isinstance(config, dict):
        raise ValueError(f"{source}: expected a JSON object")
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise ValueError(f"{source}: model_type {model_type!r} is not a Qwen2.5-VL model (expected one of "
                         f"{', '.join(MODEL_TYPES)})")
    text = config
    if model_type == "qwen2_5_vl" and config.get("text_config") is not None:
        text = config["text_config"]
        if not isinstance(text, dict):
            raise ValueError(f"{source}: text_config should be an object, got {type(text).__name__}")
        if text.get("model_type") not in (None, "qwen2_5_vl_text"):
            raise ValueError(f"{source}: text_config.model_type {text.get('model_type')!r} is not qwen2_5_vl_text")
    rope = text.get("rope_scaling") or text.get("rope_parameters") or {}  # transformers: rope_scaling wins
    if not isinstance(rope, dict):
        raise ValueError(f"{source}: rope_parameters / rope_scaling should be an object, got {rope!r}")
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", "mrope"):
        raise ValueError(f"{source}: RoPE type {rope_type!r} is not supported for Qwen2.5-VL (default or mrope)")
    section = rope.get("mrope_section", list(DEFAULT_MROPE_SECTION))
    if not _int_list(section):
        raise ValueError(f"{source}: mrope_section={section!r} should be a list of integers")
    if text.get("use_sliding_window") not in (None, False):
        raise ValueError(f"{source}: use_sliding_window={text['use_sliding_window']!r}: sliding-window attention is "
                         "not implemented (every released Qwen2.5-VL has false)")
    layer_types = text.get("layer_types")
    if layer_types is not None and (not isinstance(layer_types, list)
                                    or any(t != "full_attention" for t in layer_types)):
        raise ValueError(f"{source}: layer_types {layer_types!r}: only full_attention layers are implemented")
    values = {**TEXT_CONFIG_DEFAULTS, **{k: text[k] for k in (*TEXT_CONFIG_DEFAULTS, "pad_token_id") if k in text}}
    values["rope_theta"] = rope.get("rope_theta", text.get("rope_theta", DEFAULT_ROPE_THETA))
    values["mrope_section"] = list(section)
    kw = config_values(LlamaConfig, values, source)
    if kw.get("num_key_value_heads") is None:
        kw["num_key_value_heads"] = kw["num_attention_heads"]
    heads = kw["num_attention_heads"]
    if kw["hidden_size"] % heads:
        raise ValueError(f"{source}: hidden_size {kw['hidden_size']} is not divisible by {heads} attention heads")
    head_dim = text.get("head_dim")
    if head_dim is not None and head_dim != kw["hidden_size"] // heads:
        raise ValueError(f"{source}: head_dim {head_dim!r} differs from hidden_size / num_attention_heads = "
                         f"{kw['hidden_size'] // heads}, which Qwen2.5-VL's attention uses")
    try:
        return LlamaConfig(**kw, qkv_bias=True, o_bias=False, mlp_bias=False)
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None


# --------------------------------------------------------------------------- checkpoints


def layout_prefix(keys: Any) -> str:
    """The :data:`QWEN2_5_VL_LAYOUTS` key prefix whose ``embed_tokens.weight`` is among ``keys``.

    Raises:
      CheckpointError: no layout's ``embed_tokens.weight`` is there.
    """
    keys = set(keys)
    for prefix in QWEN2_5_VL_LAYOUTS:
        if f"{prefix}embed_tokens.weight" in keys:
            return prefix
    raise CheckpointError("no Qwen2.5-VL language model in this checkpoint: none of "
                          f"{', '.join(repr(p + 'embed_tokens.weight') for p in QWEN2_5_VL_LAYOUTS)} is among its "
                          f"{len(keys)} tensors")


def qwen2_5_vl_keymap(cfg: LlamaConfig, keys: Any) -> KeyMap:
    """Key map of the language model in a checkpoint with these tensor names (layout by :func:`layout_prefix`);
    the layout's vision tower and LM head are ignored (:data:`QWEN2_5_VL_LAYOUTS`).

    Raises:
      CheckpointError: no known layout.
    """
    prefix = layout_prefix(keys)
    return KeyMap(llama.llama_rules(cfg, prefix), ignore=list(QWEN2_5_VL_LAYOUTS[prefix]))


def load_qwen2_5_vl(folder: str | Path, dtype: Any = np.float32, **load_kwargs) -> tuple[dict, LlamaConfig]:
    """Load the language model of a Qwen2.5-VL folder (``config.json`` + safetensors, single or sharded with an
    index), strictly: every tensor of the language model present and of its configured shape, the vision tower and
    LM head left unread, anything else an error.

    Args:
      folder: diffusers' ``<pipeline>/text_encoder`` (``Qwen2_5_VLTextModel``) or a whole-model folder
        (Qwen/Qwen2.5-VL-7B-Instruct; HunyuanVideo-1.5's ``ckpts/text_encoder/llm``).
      dtype: ``float32`` (default) or ``bfloat16`` weights (norm scales stay float32).
      load_kwargs: passed to :func:`vidax.checkpoint.loader.load_params` (``shardings``, ``place``).

    Returns:
      ``(params, cfg)``: the tree of :func:`vidax.encoders.llama.llama_specs` and the architecture.

    Raises:
      CheckpointError: a missing folder or ``config.json``, no known layout, or weights that do not match (listed).
      ValueError: an unsupported configuration (named).
    """
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.reader import CheckpointReader

    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{config_path}: file not found (a Qwen2.5-VL text encoder folder needs its "
                              "config.json)")
    cfg = config_from_dict(read_json(config_path), str(config_path))
    reader = CheckpointReader(folder)
    keys = reader.keys()
    try:
        keymap = qwen2_5_vl_keymap(cfg, keys)
    except CheckpointError as e:
        raise CheckpointError(f"{folder}: {e}") from None
    params = load_params(reader, keymap, llama.llama_specs(cfg), dtype, source=str(folder), **load_kwargs)
    return params, cfg


# --------------------------------------------------------------------------- forward


def encode(
    params: dict,
    cfg: LlamaConfig,
    input_ids: Any = None,
    attention_mask: Any = None,
    *,
    inputs_embeds: jax.Array | None = None,
    position_ids: Any = None,
    hidden_state_index: int | None = -1,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
    precision: str | None = "highest",
) -> jax.Array:
    """``Qwen2_5_VLTextModel(..., output_hidden_states=True).hidden_states[hidden_state_index]``, or all of them.

    transformers' ``hidden_states`` has ``num_hidden_layers + 1`` entries: the embeddings, the output of each layer,
    the last one after the final norm. Only the layers up to the chosen one run.

    Args:
      params: parameter tree of :func:`vidax.encoders.llama.llama_specs` (:func:`load_qwen2_5_vl`).
      cfg: the architecture (:func:`config_from_dict`).
      input_ids: ``(B, L)`` token ids; exactly one of ``input_ids`` and ``inputs_embeds``.
      attention_mask: ``(B, L)`` 1 for tokens, 0 for right padding; None: all tokens.
      inputs_embeds: ``(B, L, hidden_size)`` embeddings instead of ids.
      position_ids: None (``0 .. L-1`` in every row, the text-only default), ``(B, L)`` (three equal rows), or
        ``(3, B, L)`` multimodal positions (temporal, height, width).
      hidden_state_index: an index into ``hidden_states``, ``-(n + 1) .. n`` (HunyuanVideo-1.5: ``-3``, the output
        of layer ``n - 2`` without the final norm; ``-1``: the normed last layer, ``last_hidden_state``); None: every
        hidden state (Cosmos-Predict2.5).
      attention_impl, precision: see :func:`vidax.encoders.llama.encode`.

    Returns:
      float32 ``(B, L, hidden_size)``; with ``hidden_state_index=None`` float32 ``(n + 1, B, L, hidden_size)``.
      Padded rows are what transformers computes there (not zero).

    Raises:
      ValueError: ``hidden_state_index`` out of range, and see :func:`vidax.encoders.llama.encode`.
    """
    n = cfg.num_hidden_layers
    common = dict(inputs_embeds=inputs_embeds, position_ids=position_ids, attention_impl=attention_impl,
                  precision=precision)
    if hidden_state_index is None:
        return llama.encode(params, cfg, input_ids, attention_mask, all_hidden_states=True, **common)
    if (not isinstance(hidden_state_index, (int, np.integer)) or isinstance(hidden_state_index, bool)
            or not -(n + 1) <= hidden_state_index <= n):
        raise ValueError(f"hidden_state_index must be an integer in [{-(n + 1)}, {n}] (the model has {n} layers) or "
                         f"None, got {hidden_state_index!r}")
    skip = n - int(hidden_state_index) % (n + 1)
    return llama.encode(params, cfg, input_ids, attention_mask, num_hidden_layers_to_skip=skip, **common)
