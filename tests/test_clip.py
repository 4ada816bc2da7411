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
