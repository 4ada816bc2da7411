"""The original HunyuanVideo release's layout (Tencent-Hunyuan/HunyuanVideo, ``huggingface-cli download
tencent/HunyuanVideo``), restated here for the tests, never by the package: the transformer's and the VAE's names and
the release's folder of a ``ckpts`` tree, written by the reference classes (diffusers, transformers, ``torch.save``)
from the weights of a diffusers-layout folder.

The transformer's names are those of ``hyvideo/modules`` (``HYVideoDiffusionTransformer``: ``models.py``,
``token_refiner.py``, ``embed_layers.py``, ``mlp_layers.py``), which diffusers'
``scripts/convert_hunyuan_video_to_diffusers.py`` renames (``TRANSFORMER_KEYS_RENAME_DICT`` and its special remaps:
fused q/k/v, the single-stream blocks' fused q/k/v/MLP ``linear1``, the final modulation stored as (shift, scale)).
The VAE's (``hyvideo/vae``: ``AutoencoderKLCausal3D``, ``EncoderCausal3D``, ``DecoderCausal3D``, ...) are diffusers'
(the script's ``VAE_KEYS_RENAME_DICT`` is empty); its ``config.json`` names the classes and the time ratio its own way.
"""

import json
import shutil
from pathlib import Path

import torch

#: The release's model folders and transformer file, by task.
ORIGINAL_MODELS = {"t2v": "hunyuan-video-t2v-720p", "i2v": "hunyuan-video-i2v-720p"}
ORIGINAL_TRANSFORMER = "transformers/mp_rank_00_model_states.pt"


def original_transformer_state_dict(sd: dict, cfg) -> dict:
    """The original ``HYVideoDiffusionTransformer`` names, restated here from the Tencent-Hunyuan/HunyuanVideo
    repository (``hyvideo/modules``), of a diffusers state dict: fused q/k/v and q/k/v/MLP concatenated, the final
    modulation's halves swapped back to (shift, scale)."""
    sd = dict(sd)
    out = {}

    def take(key):
        return sd.pop(key)

    def cat(keys, dim=0):
        return torch.cat([take(k) for k in keys], dim=dim)

    def rename(src, dst):
        for suffix in ("weight", "bias"):
            if f"{src}.{suffix}" in sd:
                out[f"{dst}.{suffix}"] = take(f"{src}.{suffix}")

    rename("x_embedder.proj", "img_in.proj")
    ce = "context_embedder"
    rename(f"{ce}.proj_in", "txt_in.input_embedder")
    rename(f"{ce}.time_text_embed.timestep_embedder.linear_1", "txt_in.t_embedder.mlp.0")
    rename(f"{ce}.time_text_embed.timestep_embedder.linear_2", "txt_in.t_embedder.mlp.2")
    rename(f"{ce}.time_text_embed.text_embedder.linear_1", "txt_in.c_embedder.linear_1")
    rename(f"{ce}.time_text_embed.text_embedder.linear_2", "txt_in.c_embedder.linear_2")
    for i in range(cfg.num_refiner_layers):
        src, dst = f"{ce}.token_refiner.refiner_blocks.{i}", f"txt_in.individual_token_refiner.blocks.{i}"
        rename(f"{src}.norm1", f"{dst}.norm1")
        rename(f"{src}.norm2", f"{dst}.norm2")
        for s in ("weight", "bias"):
            out[f"{dst}.self_attn_qkv.{s}"] = cat([f"{src}.attn.to_{n}.{s}" for n in "qkv"])
        rename(f"{src}.attn.to_out.0", f"{dst}.self_attn_proj")
        rename(f"{src}.ff.net.0.proj", f"{dst}.mlp.fc1")
        rename(f"{src}.ff.net.2", f"{dst}.mlp.fc2")
        rename(f"{src}.norm_out.linear", f"{dst}.adaLN_modulation.1")
    for name, dst in (("timestep_embedder", "time_in"), ("guidance_embedder", "guidance_in")):
        rename(f"time_text_embed.{name}.linear_1", f"{dst}.mlp.0")
        rename(f"time_text_embed.{name}.linear_2", f"{dst}.mlp.2")
    rename("time_text_embed.text_embedder.linear_1", "vector_in.in_layer")
    rename("time_text_embed.text_embedder.linear_2", "vector_in.out_layer")
    for i in range(cfg.num_layers):
        src, dst = f"transformer_blocks.{i}", f"double_blocks.{i}"
        rename(f"{src}.norm1.linear", f"{dst}.img_mod.linear")
        rename(f"{src}.norm1_context.linear", f"{dst}.txt_mod.linear")
        for s in ("weight", "bias"):
            out[f"{dst}.img_attn_qkv.{s}"] = cat([f"{src}.attn.to_{n}.{s}" for n in "qkv"])
            out[f"{dst}.txt_attn_qkv.{s}"] = cat([f"{src}.attn.add_{n}_proj.{s}" for n in "qkv"])
        for a, b in (("norm_q", "img_attn_q_norm"), ("norm_k", "img_attn_k_norm"),
                     ("norm_added_q", "txt_attn_q_norm"), ("norm_added_k", "txt_attn_k_norm"),
                     ("to_out.0", "img_attn_proj"), ("to_add_out", "txt_attn_proj")):
            rename(f"{src}.attn.{a}", f"{dst}.{b}")
        for a, b in (("ff", "img_mlp"), ("ff_context", "txt_mlp")):
            rename(f"{src}.{a}.net.0.proj", f"{dst}.{b}.fc1")
            rename(f"{src}.{a}.net.2", f"{dst}.{b}.fc2")
    for i in range(cfg.num_single_layers):
        src, dst = f"single_transformer_blocks.{i}", f"single_blocks.{i}"
        for s in ("weight", "bias"):
            out[f"{dst}.linear1.{s}"] = cat([f"{src}.attn.to_{n}.{s}" for n in "qkv"] + [f"{src}.proj_mlp.{s}"])
        rename(f"{src}.proj_out", f"{dst}.linear2")
        rename(f"{src}.attn.norm_q", f"{dst}.q_norm")
        rename(f"{src}.attn.norm_k", f"{dst}.k_norm")
        rename(f"{src}.norm.linear", f"{dst}.modulation.linear")
    rename("proj_out", "final_layer.linear")
    for s in ("weight", "bias"):
        scale, shift = take(f"norm_out.linear.{s}").chunk(2, dim=0)
        out[f"final_layer.adaLN_modulation.1.{s}"] = torch.cat([shift, scale])
    assert not sd, f"unmapped diffusers keys {sorted(sd)}"
    return {k: v.contiguous() for k, v in out.items()}


def original_vae_config(cfg) -> dict:
    """The release's ``vae/config.json`` (``AutoencoderKLCausal3D``) for a VAE configuration's sizes."""
    return {"_class_name": "AutoencoderKLCausal3D", "_diffusers_version": "0.4.2", "act_fn": "silu",
            "block_out_channels": list(cfg.block_out_channels), "in_channels": 3, "out_channels": 3,
            "down_block_types": ["DownEncoderBlockCausal3D"] * 4, "up_block_types": ["UpDecoderBlockCausal3D"] * 4,
            "latent_channels": cfg.latent_channels, "layers_per_block": cfg.layers_per_block,
            "norm_num_groups": cfg.norm_num_groups, "sample_size": 256, "sample_tsize": 64,
            "scaling_factor": 0.476986, "time_compression_ratio": 4, "mid_block_add_attention": True}


def _with_tokenizer(folder: Path, tokenizer: Path) -> None:
    """The release keeps each tokenizer's files beside its model's weights."""
    for f in tokenizer.iterdir():
        shutil.copy(f, folder / f.name)


def write_original_from_diffusers(diffusers: Path, ckpts: Path) -> Path:
    """Write the original release's ``ckpts`` folder holding the weights of a diffusers-layout HunyuanVideo folder.

    Text-to-video (``model_index.json``: ``HunyuanVideoPipeline``)::

        hunyuan-video-t2v-720p/transformers/mp_rank_00_model_states.pt   torch.save({"module": state dict})
        hunyuan-video-t2v-720p/vae/config.json, pytorch_model.pt          AutoencoderKLCausal3D, torch.save(state dict)
        text_encoder/      LlamaForCausalLM.save_pretrained (the LLaVA-Llama-3 language model) + tokenizer files
        text_encoder_2/    CLIPModel.save_pretrained (openai/clip-vit-large-patch14, the image side random)
                           + tokenizer files

    Image-to-video (``HunyuanVideoImageToVideoPipeline``): ``hunyuan-video-i2v-720p/...`` and ``text_encoder_i2v/``
    (the whole LlavaForConditionalGeneration with its tokenizer and ``preprocessor_config.json``) instead of
    ``text_encoder/``.

    The transformer's and VAE's models are loaded by diffusers, the text encoders by transformers; the parts not in
    the diffusers folder (the LM head, CLIP's image side) are random.
    """
    from diffusers import AutoencoderKLHunyuanVideo, HunyuanVideoTransformer3DModel
    from transformers import CLIPConfig, CLIPModel, CLIPTextModel, LlamaForCausalLM, LlavaForConditionalGeneration

    diffusers, ckpts = Path(diffusers), Path(ckpts)
    i2v = json.loads((diffusers / "model_index.json").read_text())["_class_name"] == "HunyuanVideoImageToVideoPipeline"
    model = ckpts / ORIGINAL_MODELS["i2v" if i2v else "t2v"]
    torch.manual_seed(0)
    transformer = HunyuanVideoTransformer3DModel.from_pretrained(diffusers / "transformer")
    pt = model / ORIGINAL_TRANSFORMER
    pt.parent.mkdir(parents=True)
    torch.save({"module": original_transformer_state_dict(transformer.state_dict(), transformer.config)}, pt)
    vae = AutoencoderKLHunyuanVideo.from_pretrained(diffusers / "vae")
    (model / "vae").mkdir()
    torch.save({k: v.contiguous() for k, v in vae.state_dict().items()}, model / "vae" / "pytorch_model.pt")
    (model / "vae" / "config.json").write_text(json.dumps(original_vae_config(vae.config), indent=2))
    if i2v:
        text = ckpts / "text_encoder_i2v"
        LlavaForConditionalGeneration.from_pretrained(diffusers / "text_encoder").save_pretrained(text)
        shutil.copy(diffusers / "image_processor" / "preprocessor_config.json", text)
    else:
        text = ckpts / "text_encoder"
        LlamaForCausalLM.from_pretrained(diffusers / "text_encoder").save_pretrained(text)
    _with_tokenizer(text, diffusers / "tokenizer")
    clip_text = CLIPTextModel.from_pretrained(diffusers / "text_encoder_2")
    text_config = clip_text.config.to_dict()
    clip = CLIPModel(CLIPConfig(text_config=text_config, projection_dim=text_config["projection_dim"],
                                vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                                   num_attention_heads=2, image_size=14, patch_size=7)))
    clip.text_model.load_state_dict(clip_text.state_dict())
    clip.save_pretrained(ckpts / "text_encoder_2")
    _with_tokenizer(ckpts / "text_encoder_2", diffusers / "tokenizer_2")
    return ckpts
