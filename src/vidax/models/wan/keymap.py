"""Wan checkpoint key maps, one per layout.

``transformer_keymap_diffusers``: diffusers ``WanTransformer3DModel``
(``transformer/diffusion_pytorch_model*.safetensors``). Parameter paths follow
the diffusers module names, except the feed-forward pair, named ``ffn/up`` and
``ffn/down`` after their Megatron roles (diffusers ``ffn.net.0.proj``, ``ffn.net.2``).
"""

from __future__ import annotations

from vidax.checkpoint.keymap import KeyMap, Rule, conv, linear, norm, rules
from vidax.models.wan.config import WanTransformerConfig


def transformer_keymap_diffusers(cfg: WanTransformerConfig) -> KeyMap:
    """Key map for a diffusers-layout Wan2.1 transformer."""

    def attn(name: str) -> list[Rule]:
        k, p = f"blocks.{{i}}.{name}", f"blocks/{name}"
        return rules(
            linear(f"{k}.to_q", f"{p}/to_q"),
            linear(f"{k}.to_k", f"{p}/to_k"),
            linear(f"{k}.to_v", f"{p}/to_v"),
            linear(f"{k}.to_out.0", f"{p}/to_out"),
            norm(f"{k}.norm_q", f"{p}/norm_q", bias=False),
            norm(f"{k}.norm_k", f"{p}/norm_k", bias=False),
        )

    ce = "condition_embedder"
    return KeyMap(
        rules(
            conv("patch_embedding", "patch_embedding", dims=3),
            linear(f"{ce}.time_embedder.linear_1", f"{ce}/time_embedder/linear_1"),
            linear(f"{ce}.time_embedder.linear_2", f"{ce}/time_embedder/linear_2"),
            linear(f"{ce}.time_proj", f"{ce}/time_proj"),
            linear(f"{ce}.text_embedder.linear_1", f"{ce}/text_embedder/linear_1"),
            linear(f"{ce}.text_embedder.linear_2", f"{ce}/text_embedder/linear_2"),
            attn("attn1"),
            attn("attn2"),
            norm("blocks.{i}.norm2", "blocks/norm2") if cfg.cross_attn_norm else [],
            linear("blocks.{i}.ffn.net.0.proj", "blocks/ffn/up"),
            linear("blocks.{i}.ffn.net.2", "blocks/ffn/down"),
            Rule("blocks.{i}.scale_shift_table", "blocks/scale_shift_table"),
            linear("proj_out", "proj_out"),
            Rule("scale_shift_table", "scale_shift_table"),
        ),
        # diffusers lists this key as safe to ignore (older conversions carried an unused norm).
        ignore=[r".*norm_added_q\..*"],
    )
