"""CogVideoX checkpoint key maps (diffusers layout), as data.

``transformer_keymap``: diffusers ``CogVideoXTransformer3DModel``
(``transformer/diffusion_pytorch_model*.safetensors``). Parameter paths follow the diffusers
module names, except ``transformer_blocks`` -> ``blocks`` and the feed-forward pair
``ff.net.0.proj`` / ``ff.net.2`` -> ``ff/up`` / ``ff/down``. The patch embedding is a
``Conv2d`` in CogVideoX 1.0 (layout ``conv2d``) and a ``Linear`` in 1.5 (layout ``linear``).
The sin-cos ``patch_embed.pos_embedding`` of the 2B model is a non-persistent buffer (not
saved; rebuilt on the host); the learned one of the 5B I2V model is saved and mapped.

``vae_keymap``: diffusers ``AutoencoderKLCogVideoX`` (``vae/``); the rules come from the same
walk over the architecture that declares the VAE's parameters
(:func:`vidax.models.cogvideox.vae.vae_specs_and_rules`).
"""

from __future__ import annotations

from vidax.checkpoint.keymap import KeyMap, Rule, conv, linear, norm, rules
from vidax.models.cogvideox.config import CogVideoXTransformerConfig, CogVideoXVAEConfig


def transformer_keymap(cfg: CogVideoXTransformerConfig) -> KeyMap:
    """Key map for a diffusers-layout CogVideoX transformer (every variant: 2B, 5B, I2V, 1.5)."""
    b, pb = "transformer_blocks.{i}", "blocks"

    def ada(key: str, path: str) -> list[Rule]:
        return rules(linear(f"{key}.linear", f"{path}/linear"), norm(f"{key}.norm", f"{path}/norm"))

    attn = [
        rules(*(linear(f"{b}.attn1.{n}", f"{pb}/attn1/{n}", bias=cfg.attention_bias) for n in ("to_q", "to_k", "to_v"))),
        norm(f"{b}.attn1.norm_q", f"{pb}/attn1/norm_q"),
        norm(f"{b}.attn1.norm_k", f"{pb}/attn1/norm_k"),
        linear(f"{b}.attn1.to_out.0", f"{pb}/attn1/to_out"),
    ]
    if cfg.patch_size_t is None:
        proj = conv("patch_embed.proj", "patch_embed/proj", dims=2, bias=cfg.patch_bias)
    else:
        proj = linear("patch_embed.proj", "patch_embed/proj")
    return KeyMap(
        rules(
            proj,
            linear("patch_embed.text_proj", "patch_embed/text_proj"),
            [Rule("patch_embed.pos_embedding", "patch_embed/pos_embedding")] if cfg.use_learned_positional_embeddings else [],
            linear("time_embedding.linear_1", "time_embedding/linear_1"),
            linear("time_embedding.linear_2", "time_embedding/linear_2"),
            rules(*(linear(f"ofs_embedding.linear_{j}", f"ofs_embedding/linear_{j}") for j in (1, 2))) if cfg.ofs_embed_dim else [],
            ada(f"{b}.norm1", f"{pb}/norm1"),
            *attn,
            ada(f"{b}.norm2", f"{pb}/norm2"),
            linear(f"{b}.ff.net.0.proj", f"{pb}/ff/up"),
            linear(f"{b}.ff.net.2", f"{pb}/ff/down"),
            norm("norm_final", "norm_final"),
            ada("norm_out", "norm_out"),
            linear("proj_out", "proj_out"),
        )
    )


def vae_keymap(cfg: CogVideoXVAEConfig) -> KeyMap:
    """Key map for a diffusers-layout ``AutoencoderKLCogVideoX``."""
    from vidax.models.cogvideox.vae import vae_specs_and_rules

    return KeyMap(vae_specs_and_rules(cfg)[1])
