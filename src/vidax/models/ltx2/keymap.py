"""Key map and loader of LTX-2's transformer: diffusers' ``transformer/`` folder
(``LTX2VideoTransformer3DModel.save_pretrained``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.keymap import KeyMap, Rule, linear as linear_rules, norm as norm_rules, rules
from vidax.core.config_values import read_json
from vidax.models.ltx2.config import LTX2TransformerConfig
from vidax.models.ltx2.transformer import ATTENTIONS, _attn_dims, transformer_specs

_ADALN = ("time_embed", "audio_time_embed", "av_cross_attn_video_scale_shift", "av_cross_attn_audio_scale_shift",
          "av_cross_attn_video_a2v_gate", "av_cross_attn_audio_v2a_gate")
_BLOCK_TABLES = ("scale_shift_table", "audio_scale_shift_table", "video_a2v_cross_attn_scale_shift_table",
                 "audio_a2v_cross_attn_scale_shift_table")


def _adaln_rules(name: str) -> list:
    e = f"{name}.emb.timestep_embedder"
    return rules(linear_rules(f"{e}.linear_1", f"{name}/timestep_embedder/linear_1"),
                 linear_rules(f"{e}.linear_2", f"{name}/timestep_embedder/linear_2"),
                 linear_rules(f"{name}.linear", f"{name}/linear"))


def transformer_keymap(cfg: LTX2TransformerConfig) -> KeyMap:
    """Key map of diffusers' ``transformer/`` folder: ``transformer_blocks.{i}.*`` -> ``blocks/*`` (stacked)."""
    b = "transformer_blocks.{i}"
    groups: list = [linear_rules(n, n) for n in ("proj_in", "audio_proj_in", "proj_out", "audio_proj_out")]
    adalns = list(_ADALN) + (["prompt_adaln", "audio_prompt_adaln"] if cfg.prompt_adaln else [])
    groups += [_adaln_rules(n) for n in adalns]
    groups += [Rule(n, n) for n in ("scale_shift_table", "audio_scale_shift_table")]
    if cfg.use_keyframes_abs_pos_embedding:
        groups.append(Rule("keyframes_abs_pos_embedding", "keyframes_abs_pos_embedding"))
    if cfg.use_prompt_embeddings:
        for n in ("caption_projection", "audio_caption_projection"):
            groups += [linear_rules(f"{n}.linear_1", f"{n}/linear_1"), linear_rules(f"{n}.linear_2", f"{n}/linear_2")]
    for name in ATTENTIONS:
        groups += [linear_rules(f"{b}.{name}.{n}", f"blocks/{name}/{n}", bias=cfg.attention_bias)
                   for n in ("to_q", "to_k", "to_v")]
        groups.append(linear_rules(f"{b}.{name}.to_out.0", f"blocks/{name}/to_out", bias=cfg.attention_out_bias))
        groups += [norm_rules(f"{b}.{name}.{n}", f"blocks/{name}/{n}", bias=False) for n in ("norm_q", "norm_k")]
        if _attn_dims(cfg, name)[3]:
            groups.append(linear_rules(f"{b}.{name}.to_gate_logits", f"blocks/{name}/to_gate_logits"))
    for ff, bias in (("ff", cfg.ff_bias), ("audio_ff", cfg.audio_ff_bias)):
        groups.append(linear_rules(f"{b}.{ff}.net.0.proj", f"blocks/{ff}/proj_in", bias=bias))
        groups.append(linear_rules(f"{b}.{ff}.net.2", f"blocks/{ff}/proj_out", bias=bias))
    tables = list(_BLOCK_TABLES)
    if cfg.prompt_modulation:
        tables += ["prompt_scale_shift_table", "audio_prompt_scale_shift_table"]
    groups += [Rule(f"{b}.{t}", f"blocks/{t}") for t in tables]
    return KeyMap(rules(*groups))


def load_transformer(folder: str | Path, dtype: Any = np.float32,
                     **load_kwargs) -> tuple[dict, LTX2TransformerConfig]:
    """Load diffusers' ``transformer/`` folder strictly; the AdaLN tables, embedders and q/k norm scales stay
    float32 whatever ``dtype``.

    Raises:
      CheckpointError: no ``config.json``, or weights that do not match it (all listed).
      ValueError: an unsupported configuration.
    """
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.reader import CheckpointReader

    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{config_path}: file not found (the transformer folder needs its config.json)")
    cfg = LTX2TransformerConfig.from_dict(read_json(config_path))
    params = load_params(CheckpointReader(folder), transformer_keymap(cfg), transformer_specs(cfg), dtype,
                         source=str(folder), **load_kwargs)
    return params, cfg


#: diffusers name -> upstream (release checkpoint) name, inverse of diffusers' ``scripts/convert_ltx2_to_diffusers.py``
#: ``LTX_2_0_TRANSFORMER_KEYS_RENAME_DICT`` plus its separate ``adaln_single`` / ``prompt_adaln_single`` handling.
#: Top-level module prefixes:
RELEASE_MODULES = {"proj_in": "patchify_proj", "audio_proj_in": "audio_patchify_proj",
                   "time_embed": "adaln_single", "audio_time_embed": "audio_adaln_single",
                   "av_cross_attn_video_scale_shift": "av_ca_video_scale_shift_adaln_single",
                   "av_cross_attn_audio_scale_shift": "av_ca_audio_scale_shift_adaln_single",
                   "av_cross_attn_video_a2v_gate": "av_ca_a2v_gate_adaln_single",
                   "av_cross_attn_audio_v2a_gate": "av_ca_v2a_gate_adaln_single",
                   "prompt_adaln": "prompt_adaln_single", "audio_prompt_adaln": "audio_prompt_adaln_single"}
#: Inside ``transformer_blocks.{i}``:
RELEASE_BLOCK_NAMES = {".video_a2v_cross_attn_scale_shift_table": ".scale_shift_table_a2v_ca_video",
                       ".audio_a2v_cross_attn_scale_shift_table": ".scale_shift_table_a2v_ca_audio",
                       ".norm_q.": ".q_norm.", ".norm_k.": ".k_norm."}
RELEASE_PREFIX = "model.diffusion_model."


def transformer_release_keymap(cfg: LTX2TransformerConfig) -> KeyMap:
    """Key map of the transformer inside a release checkpoint (upstream names under ``model.diffusion_model.``:
    ``patchify_proj``, ``adaln_single``, ``transformer_blocks.{i}.attn1.q_norm``, ...). The file's other tensors
    (the text connectors under the same prefix, ``text_embedding_projection.*``, VAEs, vocoder) are ignored; the
    transformer's own are matched strictly."""
    out = []
    for r in transformer_keymap(cfg).rules:
        key = r.key
        head, _, rest = key.partition(".")
        if head in RELEASE_MODULES:
            key = f"{RELEASE_MODULES[head]}.{rest}"
        if key.startswith("transformer_blocks."):
            for ours, theirs in RELEASE_BLOCK_NAMES.items():
                key = key.replace(ours, theirs)
        out.append(Rule(RELEASE_PREFIX + key, r.path, r.layout))
    ignore = [r"(?!model\.diffusion_model\.)", r"model\.diffusion_model\.(video|audio)_embeddings_connector\."]
    return KeyMap(out, ignore=ignore)
