"""Test/tooling only: tiny random-weight Wan2.1 checkpoints in the ORIGINAL release layout.

:func:`write_original_checkpoint` writes a folder laid out like ``Wan-AI/Wan2.1-T2V-1.3B``
(``config.json`` + ``diffusion_pytorch_model.safetensors`` or shards + index,
``Wan2.1_VAE.pth``, ``models_t5_umt5-xxl-enc-bf16.pth`` in bfloat16, ``google/umt5-xxl/``)
at a tiny size. Tensor names come from our own original-layout key maps run backwards
(:func:`vidax.checkpoint.writer.to_state_dict`), so names are not hand-written twice;
the tests check them against diffusers' converters and transformers' UMT5 names.

The two ``.pth`` files are written with ``torch.save`` (the format the release uses),
so **this module needs PyTorch**, imported lazily inside :func:`write_original_checkpoint`
only: importing this module, and the rest of vidax, works without it. vidax *reads* ``.pth``
files without PyTorch (:mod:`vidax.checkpoint.torch_pickle`).

:func:`write_diffusers_twin` writes the same weights in the diffusers layout, so tests can
compare the two loading paths on identical weights.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

from vidax.checkpoint.writer import assembled_folder, save_component, to_state_dict, write_json
from vidax.encoders.t5 import T5Config, t5_keymap, t5_keymap_wan_original, t5_specs
from vidax.encoders.tokenizer import Tokenizer, write_demo_tokenizer
from vidax.models.wan import demo
from vidax.core import wan_vae
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.keymap import transformer_keymap_diffusers, transformer_keymap_original
from vidax.models.wan.layout import (
    ORIGINAL_T5,
    ORIGINAL_TOKENIZER,
    ORIGINAL_TRANSFORMER,
    ORIGINAL_TRANSFORMER_INDEX,
    ORIGINAL_VAE,
)
from vidax.models.wan.transformer import transformer_specs

# The diffusers version the Wan2.1 release's config.json names (WanModel is a diffusers ModelMixin).
ORIGINAL_DIFFUSERS_VERSION = "0.30.0"


def original_transformer_config(text_dim: int, **overrides) -> dict:
    """A tiny ``WanModel`` ``config.json`` (the keys the release writes, plus ``text_dim``).

    The release leaves ``text_dim`` out (``ignore_for_config``; it is 4096); a tiny text
    encoder needs it stated. ``overrides`` use the original key names (``dim``, ``num_heads`` ...).
    """
    cfg = {
        "_class_name": "WanModel", "_diffusers_version": ORIGINAL_DIFFUSERS_VERSION,
        "dim": 64, "eps": 1e-06, "ffn_dim": 128, "freq_dim": 64, "in_dim": 16, "model_type": "t2v",
        "num_heads": 2, "num_layers": 2, "out_dim": 16, "text_len": 512, "text_dim": text_dim,
    }
    cfg.update(overrides)
    return cfg


@dataclass
class TinyWanWeights:
    """One set of tiny random weights, in our parameter trees (host float32), with their configs.

    Attributes:
      transformer_json: the original-layout ``config.json`` dict.
      transformer_cfg, transformer_params: the transformer.
      vae_cfg, vae_params: the VAE (Wan2.1 latent statistics).
      text_json: a transformers ``config.json`` for the same T5 (for the diffusers twin).
      text_cfg, text_params: the UMT5 encoder; its values are bfloat16-representable, so the
        bf16 ``.pth`` and a float32 copy hold exactly the same numbers.
      vocab_size: of the demo tokenizer.
    """

    transformer_json: dict
    transformer_cfg: WanTransformerConfig
    transformer_params: dict
    vae_cfg: wan_vae.WanVAEConfig
    vae_params: dict
    text_json: dict
    text_cfg: T5Config
    text_params: dict
    vocab_size: int


def tiny_wan_weights(seed: int = 0, *, transformer_overrides: dict | None = None, vae_overrides: dict | None = None,
                     text_overrides: dict | None = None, vocab_size: int = 256) -> TinyWanWeights:
    """Random tiny Wan2.1 T2V weights (see :class:`TinyWanWeights`).

    Defaults: transformer dim 64 (2 heads), 2 layers; VAE base 16 with the release's
    ``num_res_blocks=2`` (diffusers' single-file converter assumes it); UMT5 64 wide, 2 layers.

    Args:
      seed: seed of the weights.
      transformer_overrides: original ``config.json`` keys.
      vae_overrides: :class:`~vidax.core.wan_vae.WanVAEConfig` fields.
      text_overrides: transformers T5 ``config.json`` keys.
    """
    rng = np.random.default_rng(seed)
    text_json = demo.text_encoder_config(vocab_size, **(text_overrides or {}))
    ecfg = T5Config.from_dict(text_json)
    eparams = demo.random_params(t5_specs(ecfg), rng)
    # Round to bf16-representable values: the release stores the T5 encoder in bfloat16.
    eparams = _map(lambda a: a.astype(ml_dtypes.bfloat16).astype(np.float32), eparams)
    tjson = original_transformer_config(ecfg.d_model, **(transformer_overrides or {}))
    tcfg = WanTransformerConfig.from_original_dict(tjson)
    tparams = demo.random_params(transformer_specs(tcfg), rng)
    vcfg = wan_vae.WanVAEConfig(**{"base_dim": 16, "num_res_blocks": 2, **(vae_overrides or {})})
    vparams = demo.random_params(wan_vae.vae_specs(vcfg), rng)
    return TinyWanWeights(tjson, tcfg, tparams, vcfg, vparams, text_json, ecfg, eparams, vocab_size)


def _map(fn, tree: dict) -> dict:
    return {k: _map(fn, v) if isinstance(v, dict) else fn(v) for k, v in tree.items()}


def original_state_dicts(weights: TinyWanWeights) -> dict[str, dict[str, np.ndarray]]:
    """The weights as original-layout state dicts (float32 NumPy, PyTorch layouts).

    Returns:
      ``{"transformer": ..., "vae": ..., "text_encoder": ...}``, names as in the Wan2.1 release.
    """
    w = weights
    return {
        "transformer": to_state_dict(w.transformer_params, transformer_keymap_original(w.transformer_cfg),
                                     transformer_specs(w.transformer_cfg)),
        "vae": to_state_dict(w.vae_params, wan_vae.vae_keymap_original(w.vae_cfg), wan_vae.vae_specs(w.vae_cfg)),
        "text_encoder": to_state_dict(w.text_params, t5_keymap_wan_original(w.text_cfg), t5_specs(w.text_cfg)),
    }


def _torch_save(tensors: dict[str, np.ndarray], path: Path, bf16: bool) -> None:
    import torch  # tooling only: the release's .pth files are torch.save archives

    sd = {}
    for k, v in tensors.items():
        t = torch.from_numpy(np.array(v, dtype=np.float32))  # a writable copy (sources may be read-only maps)
        sd[k] = t.to(torch.bfloat16) if bf16 else t
    tmp = path.with_name(f".{path.name}.part")
    torch.save(sd, tmp)
    os.replace(tmp, path)


def _save_sharded(folder: Path, tensors: dict[str, np.ndarray], shards: int) -> None:
    keys = list(tensors)
    per = -(-len(keys) // shards)
    weight_map, total = {}, 0
    for s in range(shards):
        name = f"diffusion_pytorch_model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: tensors[k] for k in keys[s * per : (s + 1) * per]}
        save_file(part, str(folder / name), metadata={"format": "pt"})
        for k, v in part.items():
            weight_map[k] = name
            total += v.nbytes
    write_json(folder / ORIGINAL_TRANSFORMER_INDEX, {"metadata": {"total_size": total}, "weight_map": weight_map})


def write_original_checkpoint(folder: str | os.PathLike, seed: int = 0, *, weights: TinyWanWeights | None = None,
                              shards: int = 1, **overrides) -> Path:
    """Write a tiny random-weight Wan2.1 T2V folder in the original release layout. Needs PyTorch.

    Files: ``config.json`` (``WanModel``), ``diffusion_pytorch_model.safetensors`` (or
    ``shards`` files ``diffusion_pytorch_model-0000N-of-0000M.safetensors`` +
    ``diffusion_pytorch_model.safetensors.index.json``), ``Wan2.1_VAE.pth`` (float32),
    ``models_t5_umt5-xxl-enc-bf16.pth`` (bfloat16), ``google/umt5-xxl/`` (the demo tokenizer).
    Assembled under a temporary name and renamed into place.

    Args:
      folder: target; must not exist.
      seed: weights seed (ignored if ``weights`` is given).
      weights: explicit weights from :func:`tiny_wan_weights`.
      shards: number of transformer safetensors files (1: the unsharded name).
      overrides: ``transformer_overrides`` / ``vae_overrides`` / ``text_overrides`` for
        :func:`tiny_wan_weights`.

    Returns:
      ``folder``.

    Raises:
      FileExistsError: ``folder`` exists. ImportError: PyTorch is not installed.
    """
    folder = Path(folder)
    if folder.exists():
        raise FileExistsError(f"{folder} exists; remove it to write a fresh checkpoint")
    w = weights if weights is not None else tiny_wan_weights(seed, **overrides)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        tok = write_demo_tokenizer(tmp / ORIGINAL_TOKENIZER, vocab_size=w.vocab_size)
        if Tokenizer.from_folder(tok).vocab_size != w.text_cfg.vocab_size:
            raise ValueError("tokenizer and text encoder vocabulary sizes differ")
        sds = original_state_dicts(w)
        if shards == 1:
            save_component(tmp, ORIGINAL_TRANSFORMER, sds["transformer"], None)
        else:
            _save_sharded(tmp, sds["transformer"], shards)
        write_json(tmp / "config.json", w.transformer_json)
        _torch_save(sds["vae"], tmp / ORIGINAL_VAE, bf16=False)
        _torch_save(sds["text_encoder"], tmp / ORIGINAL_T5, bf16=True)
        tmp.rename(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def write_diffusers_twin(folder: str | os.PathLike, weights: TinyWanWeights) -> Path:
    """Write ``weights`` in the diffusers layout (as :func:`vidax.models.wan.demo.write_demo_checkpoint`). No PyTorch.

    Returns:
      ``folder`` (must not exist).
    """
    folder = Path(folder)
    if folder.exists():
        raise FileExistsError(f"{folder} exists")
    w = weights
    tcfg = w.transformer_cfg
    tjson = demo.transformer_config(
        tcfg.text_dim, attention_head_dim=tcfg.attention_head_dim, num_attention_heads=tcfg.num_attention_heads,
        ffn_dim=tcfg.ffn_dim, freq_dim=tcfg.freq_dim, num_layers=tcfg.num_layers, in_channels=tcfg.in_channels,
        out_channels=tcfg.out_channels, eps=tcfg.eps, cross_attn_norm=tcfg.cross_attn_norm,
    )
    v = w.vae_cfg
    vjson = demo.vae_config(base_dim=v.base_dim, z_dim=v.z_dim, dim_mult=list(v.dim_mult), num_res_blocks=v.num_res_blocks,
                            temperal_downsample=list(v.temperal_downsample))
    write_demo_tokenizer(folder / "tokenizer", vocab_size=w.vocab_size)
    save_component(folder / "text_encoder", "model.safetensors",
                   to_state_dict(w.text_params, t5_keymap(w.text_cfg), t5_specs(w.text_cfg)), w.text_json)
    save_component(folder / "transformer", "diffusion_pytorch_model.safetensors",
                   to_state_dict(w.transformer_params, transformer_keymap_diffusers(tcfg), transformer_specs(tcfg)), tjson)
    save_component(folder / "vae", "diffusion_pytorch_model.safetensors",
                   to_state_dict(w.vae_params, wan_vae.vae_keymap(v), wan_vae.vae_specs(v)), vjson)
    (folder / "scheduler").mkdir()
    write_json(folder / "scheduler" / "scheduler_config.json", demo.scheduler_config())
    write_json(folder / "model_index.json", demo.MODEL_INDEX)
    return folder


def write_original_from_diffusers(src: str | os.PathLike, folder: str | os.PathLike) -> Path:
    """Rewrite a tiny diffusers-layout Wan folder (e.g. :func:`vidax.models.wan.demo.write_demo_checkpoint` of any
    single-transformer task) in the original release layout, with the same weights. Needs PyTorch.

    Files as the releases name them: ``config.json`` (``WanModel``; ``model_type`` ``t2v`` / ``i2v`` /
    ``flf2v`` / ``ti2v`` from the checkpoint) + ``diffusion_pytorch_model.safetensors`` (original names),
    ``Wan2.1_VAE.pth`` or, for the Wan2.2 VAE, ``Wan2.2_VAE.pth``, ``models_t5_umt5-xxl-enc-bf16.pth`` (the
    weights in float32, so both layouts hold identical numbers), ``google/umt5-xxl/`` (the tokenizer) and,
    with an image encoder, ``models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth``: the image tower
    under ``visual.`` (fused ``attn.to_qkv``, ``(1, 1, D)`` class and ``(1, N, D)`` position embeddings,
    ``head``) plus a stand-in text tower tensor and ``log_scale``, which loading ignores.

    Returns:
      ``folder`` (must not exist).
    """
    from vidax.checkpoint.loader import load_params
    from vidax.encoders.clip import WAN_CLIP_VIEWS, clip_keymap_wan_original, clip_specs, load_clip_vision
    from vidax.models.wan.layout import ORIGINAL_CLIP, ORIGINAL_VAE_22, resolve_checkpoint

    src, folder = Path(src), Path(folder)
    if folder.exists():
        raise FileExistsError(f"{folder} exists")
    ckpt = resolve_checkpoint(src)
    if ckpt.layout != "diffusers" or ckpt.transformer_2_weights is not None:
        raise ValueError(f"{src}: expected a single-transformer diffusers-layout Wan folder")
    tcfg = ckpt.transformer_config()
    tparams = load_params(ckpt.transformer_reader(), ckpt.maps.transformer_keymap(tcfg), transformer_specs(tcfg),
                          place=False)
    vcfg = ckpt.vae_config()
    vparams = load_params(ckpt.vae_reader(), ckpt.maps.vae_keymap(vcfg), wan_vae.vae_specs(vcfg), place=False)
    ecfg = ckpt.text_encoder_config()
    eparams = load_params(ckpt.text_encoder_reader(), ckpt.maps.text_encoder_keymap(ecfg), t5_specs(ecfg), place=False)
    if ckpt.expand_timesteps:
        model_type = "ti2v"
    elif tcfg.pos_embed_seq_len is not None:
        model_type = "flf2v"
    else:
        model_type = "i2v" if tcfg.in_channels != tcfg.out_channels else "t2v"
    tjson = original_transformer_config(
        tcfg.text_dim, dim=tcfg.dim, num_heads=tcfg.num_attention_heads, ffn_dim=tcfg.ffn_dim, freq_dim=tcfg.freq_dim,
        in_dim=tcfg.in_channels, out_dim=tcfg.out_channels, num_layers=tcfg.num_layers, eps=tcfg.eps,
        model_type=model_type)
    with assembled_folder(folder) as tmp:
        shutil.copytree(ckpt.tokenizer, tmp / ORIGINAL_TOKENIZER)
        save_component(tmp, ORIGINAL_TRANSFORMER,
                       to_state_dict(tparams, transformer_keymap_original(tcfg), transformer_specs(tcfg)), None)
        write_json(tmp / "config.json", tjson)
        _torch_save(to_state_dict(vparams, wan_vae.vae_keymap_original(vcfg), wan_vae.vae_specs(vcfg)),
                    tmp / (ORIGINAL_VAE_22 if vcfg.is_residual else ORIGINAL_VAE), bf16=False)
        _torch_save(to_state_dict(eparams, t5_keymap_wan_original(ecfg), t5_specs(ecfg)), tmp / ORIGINAL_T5, bf16=False)
        if ckpt.image_encoder is not None:
            cparams, ccfg = load_clip_vision(ckpt.image_encoder)
            cparams = _map(np.asarray, cparams)
            d = ccfg.hidden_size
            views = to_state_dict(cparams, clip_keymap_wan_original(ccfg), clip_specs(ccfg))
            sd = WAN_CLIP_VIEWS.merge(views, {"visual.cls_embedding": (1, 1, d),
                                              "visual.pos_embedding": (1, ccfg.num_positions, d)})
            sd["textual.token_embedding.weight"] = np.zeros((4, d), np.float32)  # stand-in for the text tower
            sd["log_scale"] = np.array(np.log(1 / 0.07), np.float32)
            _torch_save(sd, tmp / ORIGINAL_CLIP, bf16=False)
    return folder


def main(argv: list[str] | None = None) -> int:
    """``python -m vidax.models.wan.original_fixture FOLDER``: write a tiny original-layout folder (needs PyTorch)."""
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shards", type=int, default=1)
    args = p.parse_args(argv)
    write_original_checkpoint(args.folder, args.seed, shards=args.shards)
    print(f"{args.folder}: wrote {json.loads((Path(args.folder) / 'config.json').read_text())['_class_name']} checkpoint")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
