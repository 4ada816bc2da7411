"""LTX-Video checkpoint key maps (diffusers layout), as data.

``transformer_keymap``: diffusers ``LTXVideoTransformer3DModel``
(``transformer/diffusion_pytorch_model*.safetensors``). Parameter paths follow the diffusers module
names, except ``transformer_blocks`` -> ``blocks``, ``to_out.0`` -> ``to_out`` and the feed-forward
pair ``ff.net.0.proj`` / ``ff.net.2`` -> ``ff/up`` / ``ff/down``.
"""

from __future__ import annotations

from vidax.checkpoint.keymap import KeyMap, Rule, linear, norm, rules
from vidax.models.ltx.config import LTXVideoTransformerConfig


def _attention(key: str, path: str, cfg: LTXVideoTransformerConfig) -> list[Rule]:
    return rules(
        *(linear(f"{key}.{n}", f"{path}/{n}", bias=cfg.attention_bias) for n in ("to_q", "to_k", "to_v")),
        norm(f"{key}.norm_q", f"{path}/norm_q", bias=False),
        norm(f"{key}.norm_k", f"{path}/norm_k", bias=False),
        linear(f"{key}.to_out.0", f"{path}/to_out", bias=cfg.attention_out_bias),
    )


def transformer_keymap(cfg: LTXVideoTransformerConfig) -> KeyMap:
    """Key map for a diffusers-layout LTX-Video transformer (every release: 2B and 13B)."""
    b, pb = "transformer_blocks.{i}", "blocks"
    affine = [norm(f"{b}.norm{j}", f"{pb}/norm{j}", bias=False) for j in (1, 2)] if cfg.norm_elementwise_affine else []
    return KeyMap(
        rules(
            linear("proj_in", "proj_in"),
            Rule("scale_shift_table", "scale_shift_table"),
            linear("time_embed.emb.timestep_embedder.linear_1", "time_embed/emb/timestep_embedder/linear_1"),
            linear("time_embed.emb.timestep_embedder.linear_2", "time_embed/emb/timestep_embedder/linear_2"),
            linear("time_embed.linear", "time_embed/linear"),
            linear("caption_projection.linear_1", "caption_projection/linear_1"),
            linear("caption_projection.linear_2", "caption_projection/linear_2"),
            *affine,
            _attention(f"{b}.attn1", f"{pb}/attn1", cfg),
            _attention(f"{b}.attn2", f"{pb}/attn2", cfg),
            linear(f"{b}.ff.net.0.proj", f"{pb}/ff/up"),
            linear(f"{b}.ff.net.2", f"{pb}/ff/down"),
            Rule(f"{b}.scale_shift_table", f"{pb}/scale_shift_table"),
            linear("proj_out", "proj_out"),
        )
    )
