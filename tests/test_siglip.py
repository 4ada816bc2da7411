"""Parity of the SigLIP vision encoder and its preprocessing with transformers (fp32, tiny config), in both layouts."""

import json

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file
from transformers import SiglipConfig, SiglipModel, SiglipVisionModel
from transformers import SiglipVisionConfig as HFConfig
from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

from vidax.checkpoint.errors import CheckpointError
from vidax.encoders.siglip import (
    HUNYUANVIDEO15_PROCESSOR,
    SiglipVisionConfig,
    encode_images,
    load_siglip_processor,
    load_siglip_vision,
    load_vision_encoder,
    preprocess_images,
    siglip_processor_config,
)

# FLUX.1-Redux-dev's feature_extractor/preprocessor_config.json (HunyuanVideo-1.5's image processor), as written by
# transformers 4 (do_convert_rgb null).
REDUX_PREPROCESSOR = {
    "do_convert_rgb": None, "do_normalize": True, "do_rescale": True, "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5], "image_processor_type": "SiglipImageProcessor", "image_std": [0.5, 0.5, 0.5],
    "processor_class": "SiglipProcessor", "resample": 3, "rescale_factor": 0.00392156862745098,
    "size": {"height": 384, "width": 384},
}

# google/siglip-so400m-patch14-384 (FLUX.1-Redux-dev image_encoder/config.json).
SO400M = {"architectures": ["SiglipVisionModel"], "attention_dropout": 0.0, "hidden_act": "gelu_pytorch_tanh",
          "hidden_size": 1152, "image_size": 384, "intermediate_size": 4304, "layer_norm_eps": 1e-06,
          "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_channels": 3,
          "num_hidden_layers": 27, "patch_size": 14, "torch_dtype": "bfloat16"}

TINY = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, image_size=30,
            patch_size=7, layer_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh")


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _perturb(model):
    with torch.no_grad():  # norms start at 1 / 0 and biases at 0: move them so they are tested
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return _perturb(SiglipVisionModel(HFConfig(**TINY)).eval())


@pytest.fixture(scope="module")
def pixels():
    return np.random.default_rng(0).standard_normal((2, 3, 30, 30), dtype=np.float32)


def _reference(model, pixels):
    with torch.no_grad():
        return model(pixel_values=torch.from_numpy(pixels)).last_hidden_state.numpy()


def _write_processor(folder):
    folder.mkdir(parents=True)
    (folder / "preprocessor_config.json").write_text(json.dumps(REDUX_PREPROCESSOR))


def test_last_hidden_state_matches_transformers(model, pixels, tmp_path):
    """diffusers' HunyuanVideo-1.5 image-to-video folder: image_encoder/ (SiglipVisionModel.save_pretrained) and
    feature_extractor/."""
    model.save_pretrained(tmp_path / "image_encoder")
    _write_processor(tmp_path / "feature_extractor")
    params, cfg, processor = load_vision_encoder(tmp_path)
    assert cfg == SiglipVisionConfig(**TINY) and cfg.num_positions == 16
    assert "head" not in params  # the pooling head is not loaded (vision_use_head: its keys are ignored)
    ref = _reference(model, pixels)
    out = np.asarray(encode_images(params, cfg, pixels))
    assert out.dtype == np.float32 and out.shape == ref.shape == (2, 16, 32)
    assert _rel(out, ref) < 1e-5
    assert processor == siglip_processor_config(REDUX_PREPROCESSOR)


def test_original_release_layout(model, pixels, tmp_path):
    """The original release's ckpts/vision_encoder/siglip: FLUX.1-Redux-dev, whose image_encoder transformers 4 saved
    with the vision_model. prefix (written here with the prefix and checked to load in transformers as well)."""
    root = tmp_path / "ckpts" / "vision_encoder" / "siglip"
    enc = root / "image_encoder"
    enc.mkdir(parents=True)
    state = {f"vision_model.{k}": v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(enc / "model.safetensors"), metadata={"format": "pt"})
    (enc / "config.json").write_text(json.dumps({**model.config.to_dict(), "architectures": ["SiglipVisionModel"]}))
    _write_processor(root / "feature_extractor")
    (root / "model_index.json").write_text("{}")  # the Redux pipeline's other files stay unread
    ref = _reference(SiglipVisionModel.from_pretrained(enc).eval(), pixels)
    np.testing.assert_allclose(ref, _reference(model, pixels), rtol=0, atol=0)  # the layout transformers reads
    params, cfg, processor = load_vision_encoder(root)
    assert _rel(encode_images(params, cfg, pixels), ref) < 1e-5
    # The image_encoder folder itself also works; its processor is found beside it.
    params2, _ = load_siglip_vision(enc)
    assert load_siglip_processor(enc) == processor
    np.testing.assert_array_equal(np.asarray(params2["layers"]["fc1"]["kernel"]),
                                  np.asarray(params["layers"]["fc1"]["kernel"]))


def test_whole_siglip_model_checkpoint(pixels, tmp_path):
    """A SiglipModel folder (config with vision_config; vision_model.* beside text_model.*, logit_*)."""
    torch.manual_seed(1)
    full = SiglipModel(SiglipConfig(
        text_config=dict(hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2,
                         vocab_size=64, bos_token_id=1, eos_token_id=2, pad_token_id=0),
        vision_config=TINY)).eval()
    _perturb(full.vision_model)
    full.save_pretrained(tmp_path)
    params, cfg = load_siglip_vision(tmp_path)
    with torch.no_grad():
        ref = full.vision_model(pixel_values=torch.from_numpy(pixels)).last_hidden_state.numpy()
    assert _rel(encode_images(params, cfg, pixels), ref) < 1e-5


def test_bf16_weights(model, pixels, tmp_path):
    model.save_pretrained(tmp_path)
    params, cfg = load_siglip_vision(tmp_path, dtype=jnp.bfloat16)
    assert params["layers"]["q_proj"]["kernel"].dtype == jnp.bfloat16
    assert params["layers"]["layer_norm1"]["scale"].dtype == np.float32
    assert _rel(encode_images(params, cfg, pixels), _reference(model, pixels)) < 1e-2


def test_config_of_the_hunyuanvideo15_image_encoder():
    cfg = SiglipVisionConfig.from_dict(SO400M)
    assert cfg == SiglipVisionConfig()
    assert cfg.num_positions == 729 and cfg.head_dim == 72
    with pytest.raises(ValueError, match="not a SigLIP vision model"):
        SiglipVisionConfig.from_dict({**SO400M, "model_type": "clip_vision_model"})
    with pytest.raises(ValueError, match="num_hidden_layers"):
        SiglipVisionConfig.from_dict({**SO400M, "num_hidden_layers": "27"})


def test_strict_loading_and_checks(model, tmp_path):
    from safetensors.numpy import load_file
    from safetensors.numpy import save_file as save_np

    model.save_pretrained(tmp_path / "ok")
    sd = load_file(str(tmp_path / "ok" / "model.safetensors"))
    del sd["encoder.layers.1.mlp.fc2.bias"]
    (tmp_path / "bad").mkdir()
    save_np(sd, str(tmp_path / "bad" / "model.safetensors"))
    (tmp_path / "bad" / "config.json").write_text((tmp_path / "ok" / "config.json").read_text())
    with pytest.raises(CheckpointError, match=r"encoder\.layers\.1\.mlp\.fc2\.bias"):
        load_siglip_vision(tmp_path / "bad")
    with pytest.raises(CheckpointError, match="no SigLIP image encoder"):
        load_vision_encoder(tmp_path / "missing")
    params, cfg = load_siglip_vision(tmp_path / "ok")
    with pytest.raises(ValueError, match=r"pixel_values must be \(B, 3, 30, 30\)"):
        encode_images(params, cfg, np.zeros((1, 3, 32, 32), np.float32))


# -- preprocessing ------------------------------------------------------------------------------


def _images():
    rng = np.random.default_rng(3)
    rgb = lambda h, w: rng.integers(0, 256, (h, w, 3), dtype=np.uint8)  # noqa: E731
    rgba = Image.fromarray(rng.integers(0, 256, (90, 61, 4), dtype=np.uint8), "RGBA")
    gray = Image.fromarray(rng.integers(0, 256, (50, 70), dtype=np.uint8), "L")
    return [Image.fromarray(rgb(480, 848)), Image.fromarray(rgb(333, 97)), rgba, gray, rgb(64, 48)]


def test_preprocessing_matches_transformers():
    """SiglipImageProcessor (PIL backend) as diffusers' _get_image_embeds calls it, on non-square images (and as the
    original calls it, on a uint8 array)."""
    ref_proc = SiglipImageProcessorPil(**{k: v for k, v in REDUX_PREPROCESSOR.items()
                                          if k not in ("image_processor_type", "processor_class")})
    images = _images()
    ref = ref_proc.preprocess(images=images, do_resize=True, return_tensors="np", do_convert_rgb=True)["pixel_values"]
    out = preprocess_images(images, siglip_processor_config(REDUX_PREPROCESSOR))
    assert out.dtype == np.float32 and out.shape == ref.shape == (5, 3, 384, 384)
    assert np.abs(out - ref).max() <= 1e-6
    assert siglip_processor_config(REDUX_PREPROCESSOR) == siglip_processor_config() == siglip_processor_config(
        HUNYUANVIDEO15_PROCESSOR)
    np.testing.assert_array_equal(preprocess_images(images[:1]), out[:1])  # the default is HunyuanVideo-1.5's


def test_processor_defaults_and_checks(tmp_path):
    # A config without size: SiglipImageProcessor's class default, 224x224.
    ref = SiglipImageProcessorPil().preprocess(images=_images()[:2], return_tensors="np")["pixel_values"]
    out = preprocess_images(_images()[:2], siglip_processor_config({}))
    assert out.shape == ref.shape == (2, 3, 224, 224) and np.abs(out - ref).max() <= 1e-6
    assert load_siglip_processor(tmp_path) == siglip_processor_config()  # no file: HunyuanVideo-1.5's
    with pytest.raises(ValueError, match="size"):
        siglip_processor_config({"size": {"width": 3}})
    with pytest.raises(ValueError, match="image_std"):
        siglip_processor_config({"image_std": [0.5, 0.0, 0.5]})
