"""Parity of the CLIP vision encoder and its preprocessing with transformers (fp32, tiny config)."""

import json

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from PIL import Image
from transformers import CLIPVisionConfig as HFConfig
from transformers import CLIPVisionModel, CLIPVisionModelWithProjection
from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

from vidax.checkpoint.errors import CheckpointError
from vidax.encoders.clip import (
    CLIPImageProcessorConfig,
    CLIPVisionConfig,
    encode_images,
    load_clip_vision,
    preprocess_images,
)

# The Wan I2V image_processor/preprocessor_config.json (transformers CLIPImageProcessor, OpenAI CLIP settings).
WAN_PREPROCESSOR = {
    "crop_size": {"height": 224, "width": 224}, "do_center_crop": True, "do_convert_rgb": True,
    "do_normalize": True, "do_rescale": True, "do_resize": True,
    "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_processor_type": "CLIPImageProcessor",
    "image_std": [0.26862954, 0.26130258, 0.27577711], "resample": 3,
    "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": 224},
}


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def tiny_config(**kw):
    cfg = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4, image_size=28,
               patch_size=7, projection_dim=16, hidden_act="gelu", layer_norm_eps=1e-5)
    cfg.update(kw)
    return HFConfig(**cfg)


@pytest.fixture(scope="module", params=["with_projection", "plain"])
def saved(request, tmp_path_factory):
    torch.manual_seed(0)
    cls = CLIPVisionModelWithProjection if request.param == "with_projection" else CLIPVisionModel
    model = cls(tiny_config()).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    path = tmp_path_factory.mktemp("clip")
    model.save_pretrained(path)
    return model, path


@pytest.mark.parametrize("index", [-2, -1, 1])
def test_hidden_states_match_transformers(saved, index):
    model, path = saved
    params, cfg = load_clip_vision(path)
    assert cfg.with_projection == isinstance(model, CLIPVisionModelWithProjection)
    pixels = np.random.default_rng(0).standard_normal((2, 3, 28, 28), dtype=np.float32)
    with torch.no_grad():
        ref = model(pixel_values=torch.from_numpy(pixels), output_hidden_states=True).hidden_states[index].numpy()
    out = np.asarray(encode_images(params, cfg, jnp.asarray(pixels), hidden_state_index=index))
    assert out.shape == ref.shape == (2, 17, 32)
    assert _rel(out, ref) < 1e-5


def test_quick_gelu_variant(tmp_path):
    torch.manual_seed(1)
    model = CLIPVisionModel(tiny_config(hidden_act="quick_gelu", num_hidden_layers=2)).eval()
    model.save_pretrained(tmp_path)
    params, cfg = load_clip_vision(tmp_path)
    pixels = np.random.default_rng(1).standard_normal((1, 3, 28, 28), dtype=np.float32)
    with torch.no_grad():
        ref = model(pixel_values=torch.from_numpy(pixels), output_hidden_states=True).hidden_states[-2].numpy()
    assert _rel(encode_images(params, cfg, pixels), ref) < 1e-5


def test_config_of_the_wan_image_encoder():
    wan = {"architectures": ["CLIPVisionModelWithProjection"], "hidden_act": "gelu", "hidden_size": 1280,
           "image_size": 224, "intermediate_size": 5120, "layer_norm_eps": 1e-05, "model_type": "clip_vision_model",
           "num_attention_heads": 16, "num_channels": 3, "num_hidden_layers": 32, "patch_size": 14,
           "projection_dim": 1024}
    cfg = CLIPVisionConfig.from_dict(wan)
    assert cfg == CLIPVisionConfig(with_projection=True)
    assert cfg.num_positions == 257 and cfg.head_dim == 80


def test_strict_loading_names_the_missing_key(saved, tmp_path):
    from safetensors.numpy import load_file, save_file

    _, path = saved
    sd = load_file(str(path / "model.safetensors"))
    (dropped,) = [k for k in sd if k.endswith("encoder.layers.1.mlp.fc2.bias")]
    del sd[dropped]
    save_file(sd, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((path / "config.json").read_text())
    with pytest.raises(CheckpointError, match=r"encoder\.layers\.1\.mlp\.fc2\.bias"):
        load_clip_vision(tmp_path)


def test_input_shape_is_checked(saved):
    _, path = saved
    params, cfg = load_clip_vision(path)
    with pytest.raises(ValueError, match=r"pixel_values must be \(B, 3, 28, 28\)"):
        encode_images(params, cfg, np.zeros((1, 3, 32, 32), np.float32))


# -- preprocessing ------------------------------------------------------------------------------


def _images():
    rng = np.random.default_rng(3)
    rgb = lambda h, w: rng.integers(0, 256, (h, w, 3), dtype=np.uint8)  # noqa: E731
    rgba = Image.fromarray(rng.integers(0, 256, (90, 61, 4), dtype=np.uint8), "RGBA")
    gray = Image.fromarray(rng.integers(0, 256, (50, 70), dtype=np.uint8), "L")
    return [Image.fromarray(rgb(120, 200)), Image.fromarray(rgb(333, 97)), rgba, gray, Image.fromarray(rgb(224, 224)),
            rgb(64, 48)]


@pytest.mark.parametrize("config", [WAN_PREPROCESSOR, {**WAN_PREPROCESSOR, "size": {"height": 180, "width": 260},
                                                       "crop_size": {"height": 200, "width": 200}}],
                         ids=["wan", "exact_size_and_padding_crop"])
def test_preprocessing_matches_transformers(config):
    ref_proc = CLIPImageProcessorPil(**{k: v for k, v in config.items() if k != "image_processor_type"})
    cfg = CLIPImageProcessorConfig.from_dict(config)
    for image in _images():
        ref = ref_proc(images=image, return_tensors="np")["pixel_values"]
        out = preprocess_images([image], cfg)
        assert out.shape == ref.shape and out.dtype == np.float32
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-6)


def test_preprocessor_config_from_folder(tmp_path):
    assert CLIPImageProcessorConfig.from_folder(tmp_path) == CLIPImageProcessorConfig()
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(WAN_PREPROCESSOR))
    assert CLIPImageProcessorConfig.from_folder(tmp_path) == CLIPImageProcessorConfig()


def _wan_clip_state_dict(model) -> dict:
    """transformers CLIPVisionModelWithProjection weights under the names of the Wan repository's ``XLMRobertaCLIP``
    (``wan/modules/clip.py``: ``visual.`` VisionTransformer with fused ``attn.to_qkv``, ``head`` as a matrix), plus
    a stand-in text-tower tensor and ``log_scale``. Written here from that module tree, not from vidax's map."""
    sd = {k.removeprefix("vision_model."): v for k, v in model.state_dict().items()}
    e, d = "embeddings", model.config.hidden_size
    out = {
        "visual.cls_embedding": sd[f"{e}.class_embedding"].reshape(1, 1, d),
        "visual.patch_embedding.weight": sd[f"{e}.patch_embedding.weight"],
        "visual.pos_embedding": sd[f"{e}.position_embedding.weight"][None],
        "visual.pre_norm.weight": sd["pre_layrnorm.weight"], "visual.pre_norm.bias": sd["pre_layrnorm.bias"],
        "visual.post_norm.weight": sd["post_layernorm.weight"], "visual.post_norm.bias": sd["post_layernorm.bias"],
        "visual.head": sd["visual_projection.weight"].T.contiguous(),
        "textual.token_embedding.weight": torch.zeros(5, 8), "log_scale": torch.tensor(2.65),
    }
    for i in range(model.config.num_hidden_layers):
        a, b = f"encoder.layers.{i}", f"visual.transformer.{i}"
        for w in ("weight", "bias"):
            out[f"{b}.attn.to_qkv.{w}"] = torch.cat([sd[f"{a}.self_attn.{n}_proj.{w}"] for n in "qkv"])
            out[f"{b}.attn.proj.{w}"] = sd[f"{a}.self_attn.out_proj.{w}"]
            out[f"{b}.norm1.{w}"], out[f"{b}.norm2.{w}"] = sd[f"{a}.layer_norm1.{w}"], sd[f"{a}.layer_norm2.{w}"]
            out[f"{b}.mlp.0.{w}"], out[f"{b}.mlp.2.{w}"] = sd[f"{a}.mlp.fc1.{w}"], sd[f"{a}.mlp.fc2.{w}"]
    return out


def test_wan_original_clip_file_matches_transformers(tmp_path):
    """The original release's CLIP .pth (read without torch; fused q/k/v split, broadcast embeddings squeezed,
    text tower ignored) gives transformers' penultimate hidden states; heads are width / 80 as in ViT-H/14."""
    from vidax.encoders.clip import load_clip_vision_wan_original, load_image_encoder

    torch.manual_seed(3)
    model = CLIPVisionModelWithProjection(tiny_config(hidden_size=160, num_attention_heads=2)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    path = tmp_path / "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth"
    torch.save(_wan_clip_state_dict(model), path)
    params, cfg = load_clip_vision_wan_original(path)
    assert (cfg.num_attention_heads, cfg.image_size, cfg.patch_size, cfg.num_hidden_layers, cfg.with_projection) == (
        2, 28, 7, 3, True)
    assert load_image_encoder(path)[1] == cfg
    pixels = np.random.default_rng(1).standard_normal((2, 3, 28, 28), dtype=np.float32)
    with torch.no_grad():
        ref = model(pixel_values=torch.from_numpy(pixels), output_hidden_states=True).hidden_states[-2].numpy()
    out = np.asarray(encode_images(params, cfg, jnp.asarray(pixels)))
    assert _rel(out, ref) < 1e-5
    np.testing.assert_array_equal(np.asarray(params["visual_projection"]["kernel"]),
                                  model.visual_projection.weight.detach().numpy().T)


def test_wan_original_clip_file_errors(tmp_path):
    from vidax.encoders.clip import load_clip_vision_wan_original

    torch.manual_seed(0)
    model = CLIPVisionModelWithProjection(tiny_config(hidden_size=160, num_attention_heads=2)).eval()
    sd = _wan_clip_state_dict(model)
    sd["visual.transformer.1.attn.to_qkv.weight"] = sd["visual.transformer.1.attn.to_qkv.weight"][:-1]
    torch.save(sd, tmp_path / "bad.pth")
    with pytest.raises(CheckpointError, match=r"visual.transformer.1.attn.to_qkv.weight: shape \(479, 160\) cannot be split"):
        load_clip_vision_wan_original(tmp_path / "bad.pth")
    sd = _wan_clip_state_dict(model)
    del sd["visual.transformer.2.mlp.2.bias"]
    torch.save(sd, tmp_path / "missing.pth")
    with pytest.raises(CheckpointError, match=r"missing keys \(1\):\s+visual.transformer.2.mlp.2.bias"):
        load_clip_vision_wan_original(tmp_path / "missing.pth")
