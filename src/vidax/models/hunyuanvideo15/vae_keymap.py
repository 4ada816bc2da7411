"""The HunyuanVideo-1.5 VAE's parameter declaration, its two checkpoint layouts and its loader.

One walk of the architecture (:mod:`vidax.models.hunyuanvideo15.vae`'s stage plan) declares every parameter once
(``ParamSpec``: shape, float32 pin) and gives its key in both layouts:

* diffusers (``AutoencoderKLHunyuanVideo15.save_pretrained``, e.g. ``hunyuanvideo-community/HunyuanVideo-1.5-*``
  ``vae/``): ``encoder.down_blocks.{i}.resnets.{j}``, ``.downsamplers.0``, ``mid_block.resnets.0`` /
  ``attentions.0`` / ``resnets.1``, attention ``to_q`` / ``to_k`` / ``to_v`` / ``proj_out``, ``conv_shortcut``,
  ``decoder.up_blocks.{i}.resnets.{j}``, ``.upsamplers.0``;
* the original release (``tencent/HunyuanVideo-1.5`` ``vae/``: ``AutoencoderKLConv3D``, its ``config.json``'s
  ``_class_name``), the names of ``hyvideo/models/autoencoders/hunyuanvideo_15_vae.py``: ``encoder.down.{i}.block.{j}``,
  ``.downsample``, ``mid.block_1`` / ``attn_1`` / ``block_2``, attention ``q`` / ``k`` / ``v`` / ``proj_out``,
  ``nin_shortcut``, ``decoder.up.{i}.block.{j}``, ``.upsample`` (the renames of diffusers'
  ``scripts/convert_hunyuan_video1_5_to_diffusers.py``, ``convert_hunyuan_video_15_vae_checkpoint_to_diffusers``,
  which has no rule for ``nin_shortcut``: the released widths have no width-changing resnet).

No tensor is reshaped: the RMS-norm ``gamma`` keeps its stored broadcast shape ``(C, 1, 1, 1)`` (float32), the
convolutions (the attention's 1x1x1 projections too) become channels-last ``(kt, kh, kw, in, out)``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np

from vidax.checkpoint.keymap import KeyMap, Rule, conv, norm
from vidax.core.params import ParamSpec, SpecTree, unflatten
from vidax.models.hunyuanvideo15.vae import HunyuanVideo15VAEConfig, decoder_stages, encoder_stages

#: ``_class_name`` of each layout's ``config.json``.
DIFFUSERS_CLASS = "AutoencoderKLHunyuanVideo15"
ORIGINAL_CLASS = "AutoencoderKLConv3D"


class _Declaration:
    """Collects parameter specs (paths mirror the diffusers module names, ``/`` for ``.``) and both layouts' rules.

    Every declaring method takes the diffusers module name ``key`` (which also names the parameter path) and the same
    module's name ``orig`` in the original release.
    """

    def __init__(self):
        self.specs: dict[str, ParamSpec] = {}
        self.rules: list[Rule] = []
        self.original_rules: list[Rule] = []

    def conv3d(self, key: str, orig: str, cin: int, cout: int, k: int):
        path = key.replace(".", "/")
        self.specs[f"{path}/kernel"] = ParamSpec((k, k, k, cin, cout))
        self.specs[f"{path}/bias"] = ParamSpec((cout,))
        self.rules += conv(key, path, dims=3)
        self.original_rules += conv(orig, path, dims=3)

    def causal(self, key: str, orig: str, cin: int, cout: int):
        # CausalConv3d wraps its 3x3x3 nn.Conv3d as `.conv` in both layouts.
        self.conv3d(f"{key}.conv", f"{orig}.conv", cin, cout, 3)

    def rms_norm(self, key: str, orig: str, dim: int):
        # RMS_norm(images=False).gamma is stored (C, 1, 1, 1); its bias is the constant 0., not a tensor.
        path = key.replace(".", "/")
        self.specs[f"{path}/scale"] = ParamSpec((dim, 1, 1, 1), fp32=True)
        self.rules += norm(key, path, bias=False, weight_name="gamma")
        self.original_rules += norm(orig, path, bias=False, weight_name="gamma")

    def resnet(self, key: str, orig: str, cin: int, cout: int):
        self.rms_norm(f"{key}.norm1", f"{orig}.norm1", cin)
        self.causal(f"{key}.conv1", f"{orig}.conv1", cin, cout)
        self.rms_norm(f"{key}.norm2", f"{orig}.norm2", cout)
        self.causal(f"{key}.conv2", f"{orig}.conv2", cout, cout)
        if cin != cout:  # a plain 1x1x1 nn.Conv3d in both
            self.conv3d(f"{key}.conv_shortcut", f"{orig}.nin_shortcut", cin, cout, 1)

    def mid_block(self, key: str, orig: str, dim: int):
        self.resnet(f"{key}.resnets.0", f"{orig}.block_1", dim, dim)
        a, o = f"{key}.attentions.0", f"{orig}.attn_1"
        self.rms_norm(f"{a}.norm", f"{o}.norm", dim)
        for name, oname in (("to_q", "q"), ("to_k", "k"), ("to_v", "v"), ("proj_out", "proj_out")):
            self.conv3d(f"{a}.{name}", f"{o}.{oname}", dim, dim, 1)
        self.resnet(f"{key}.resnets.1", f"{orig}.block_2", dim, dim)


@functools.lru_cache(maxsize=16)
def _declare(cfg: HunyuanVideo15VAEConfig) -> _Declaration:
    d, ch = _Declaration(), cfg.block_out_channels
    d.causal("encoder.conv_in", "encoder.conv_in", cfg.in_channels, ch[0])
    for i, st in enumerate(encoder_stages(cfg)):
        for j in range(st.layers):
            d.resnet(f"encoder.down_blocks.{i}.resnets.{j}", f"encoder.down.{i}.block.{j}",
                     st.cin if j == 0 else st.cout, st.cout)
        if st.resample:
            d.causal(f"encoder.down_blocks.{i}.downsamplers.0.conv", f"encoder.down.{i}.downsample.conv", st.cout,
                     st.resample_out // (8 if st.temporal else 4))
    d.mid_block("encoder.mid_block", "encoder.mid", ch[-1])
    d.rms_norm("encoder.norm_out", "encoder.norm_out", ch[-1])
    d.causal("encoder.conv_out", "encoder.conv_out", ch[-1], 2 * cfg.latent_channels)
    d.causal("decoder.conv_in", "decoder.conv_in", cfg.latent_channels, ch[-1])
    d.mid_block("decoder.mid_block", "decoder.mid", ch[-1])
    for i, st in enumerate(decoder_stages(cfg)):
        for j in range(st.layers):
            d.resnet(f"decoder.up_blocks.{i}.resnets.{j}", f"decoder.up.{i}.block.{j}",
                     st.cin if j == 0 else st.cout, st.cout)
        if st.resample:
            d.causal(f"decoder.up_blocks.{i}.upsamplers.0.conv", f"decoder.up.{i}.upsample.conv", st.cout,
                     st.resample_out * (8 if st.temporal else 4))
    d.rms_norm("decoder.norm_out", "decoder.norm_out", ch[0])
    d.causal("decoder.conv_out", "decoder.conv_out", ch[0], cfg.out_channels)
    return d


def vae_specs(cfg: HunyuanVideo15VAEConfig) -> SpecTree:
    """The VAE's spec tree: top-level parts ``encoder`` and ``decoder``.

    Paths mirror the diffusers module names with ``/`` for ``.`` (e.g.
    ``decoder/up_blocks/0/resnets/1/conv1/conv/kernel``, ``encoder/mid_block/attentions/0/to_q/kernel``). Kernels are
    channels-last ``(kt, kh, kw, in, out)``; the RMS-norm ``scale`` (the reference's ``gamma``) keeps its ``(C, 1, 1,
    1)`` shape and is pinned to float32.
    """
    return unflatten(dict(_declare(cfg).specs))


def vae_keymap(cfg: HunyuanVideo15VAEConfig) -> KeyMap:
    """Key map of a diffusers ``AutoencoderKLHunyuanVideo15`` state dict (``save_pretrained`` layout).

    Strict: with :func:`~vidax.checkpoint.loader.load_params` every checkpoint key fills exactly one slot of
    :func:`vae_specs` (the model has no buffers; nothing is ignored), every shape checked.
    """
    return KeyMap(list(_declare(cfg).rules))


def vae_keymap_original(cfg: HunyuanVideo15VAEConfig) -> KeyMap:
    """Key map of the original release's VAE file (``vae/diffusion_pytorch_model.safetensors``, an
    ``AutoencoderKLConv3D`` state dict, which its loader reads with ``load_state_dict(strict=True)``).

    The same parameter paths and shapes as :func:`vae_keymap`; the renames are those in this module's docstring.
    Strict as well: nothing is ignored.
    """
    return KeyMap(list(_declare(cfg).original_rules))


def vae_checkpoint(path: str | os.PathLike) -> tuple[HunyuanVideo15VAEConfig, Any, KeyMap]:
    """A VAE folder's configuration, tensors and key map, reading its ``config.json`` and weight headers only.

    ``config.json``'s ``_class_name`` says the layout: ``AutoencoderKLConv3D`` (the original release) or
    ``AutoencoderKLHunyuanVideo15`` (diffusers). Both hold safetensors (any file the reader takes).

    Returns:
      ``(cfg, reader, keymap)``: a :class:`~vidax.checkpoint.reader.CheckpointReader` and the layout's key map.

    Raises:
      ValueError: an unsupported configuration. CheckpointError: an unreadable ``config.json`` or weights file.
    """
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.core.config_values import read_json

    path = Path(path)
    config = read_json(path / "config.json")
    if config.get("_class_name") == ORIGINAL_CLASS:
        cfg = HunyuanVideo15VAEConfig.from_original_dict(config)
        return cfg, CheckpointReader(path), vae_keymap_original(cfg)
    cfg = HunyuanVideo15VAEConfig.from_dict(config)
    return cfg, CheckpointReader(path), vae_keymap(cfg)


def load_vae(path: str | os.PathLike, dtype: Any = np.float32,
             parts: Collection[str] | None = None) -> tuple[HunyuanVideo15VAEConfig, dict]:
    """Load a VAE folder into ``(cfg, params)``: the diffusers layout or the original release's (same tree).

    Args:
      path: the folder (``config.json`` and the weights).
      dtype: compute dtype of the kernels (``float32`` or ``bfloat16``); the RMS-norm scales stay float32.
      parts: top-level parts to read (``vae.DECODER_PARTS`` for text-to-video); None: all. The whole checkpoint is
        checked either way.

    Raises:
      ValueError: an unsupported configuration. CheckpointError: an unreadable ``config.json``, or tensors that do
        not match the configuration (one message listing all missing, unexpected and misshapen keys).
    """
    from vidax.checkpoint.loader import load_params

    cfg, reader, keymap = vae_checkpoint(path)
    return cfg, load_params(reader, keymap, vae_specs(cfg), dtype, source=str(path), parts=parts)
