"""Argument checks shared by the pipelines (vidax.core.inputs) and the video writer: bad values raise an error that
names the argument and the fix, before any compute or any file is written."""

import re

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from vidax.core.inputs import (check_dtype, check_finite_video, check_guidance, check_seed, integer_problems,
                               prompt_batch)
from vidax.models.wan.demo import write_demo_checkpoint
from vidax.models.wan.pipeline import WanPipeline, check_inputs
from vidax.video import frames_from_video, write_video


def test_prompt_batch():
    assert prompt_batch("a cat") == (["a cat"], [""])
    assert prompt_batch(("a", "b"), "bad") == (["a", "b"], ["bad", "bad"])
    assert prompt_batch(["a", "b"], ["x", "y"]) == (["a", "b"], ["x", "y"])
    for prompt, negative, message in [
        ([], None, "prompt is an empty list"),
        (None, None, "prompt must be a string or a list of strings, got NoneType"),
        (123, None, "got int"),
        (["a", 3], None, "prompt\\[1\\] is int, not a string"),
        (["a", "b"], ["x"], "1 negative prompts for 2 prompts"),
        ("a", 5, "negative_prompt must be a string or a list of strings"),
    ]:
        with pytest.raises(ValueError, match=message):
            prompt_batch(prompt, negative)


def test_seed_guidance_dtype_and_sizes():
    assert check_seed(0) == 0 and check_seed(np.int64(2**32 - 1)) == 2**32 - 1
    for bad, message in [(2**32, "outside"), (-3, "negative"), (1.5, "must be an integer"), (True, "integer"),
                         ("7", "integer")]:
        with pytest.raises(ValueError, match=message):
            check_seed(bad)
    assert check_guidance(5) == 5.0 and check_guidance(-2.0) == -2.0  # at 1 or below guidance is off (diffusers)
    for bad in (float("inf"), float("nan"), "5", None):
        with pytest.raises(ValueError, match="guidance_scale"):
            check_guidance(bad)
    assert check_dtype("bfloat16") == np.dtype(ml_dtypes.bfloat16) and check_dtype(jnp.float32) == np.float32
    for bad in ("float16", "int8", "banana", None):
        with pytest.raises(ValueError, match="use one of bfloat16, float32"):
            check_dtype(bad, "dtype")
    assert integer_problems(height=32.0, width=np.int32(48)) == ["height=32.0 must be an integer"]
    with pytest.raises(ValueError) as e:
        check_inputs(32.0, 48, 5)
    assert str(e.value) == "height=32.0 must be an integer"  # (it used to suggest "use 32 or 48")


def test_nan_video_raises_and_finite_values_pass():
    video = np.zeros((1, 3, 5, 8, 8), np.float32)
    assert frames_from_video(video).shape == (1, 5, 8, 8, 3)
    check_finite_video(np.full((4,), 3e38, np.float32))  # a sum that overflows is checked element by element
    video[0, 1, 2, 3, 4] = np.nan
    with pytest.raises(FloatingPointError, match="NaN or infinite"):
        frames_from_video(video)


def test_write_video_refuses_before_creating_a_file(tmp_path):
    frames = np.zeros((3, 16, 16, 3), np.uint8)
    for bad_frames, fps, message in [(frames[:0], 16, "no frames"), (frames, 0, "fps=0"), (frames, -5, "fps=-5"),
                                     (frames, float("nan"), "fps=nan")]:
        with pytest.raises(ValueError, match=message):
            write_video(bad_frames, tmp_path / "sub" / "v.mp4", fps=fps)
    assert not list(tmp_path.iterdir())


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return write_demo_checkpoint(tmp_path_factory.mktemp("inputs") / "demo")


@pytest.fixture(scope="module")
def pipe(demo):
    return WanPipeline.from_pretrained(demo, dtype="float32")


def test_pipeline_call_checks_its_arguments_first(pipe):
    size = dict(height=32, width=32, num_frames=5, num_inference_steps=1, progress=False)
    for kwargs, message in [
        (dict(prompt=[]), "prompt is an empty list"),
        (dict(prompt=None), "prompt must be a string"),
        (dict(prompt="a", seed=2**40), "seed=1099511627776 is outside"),
        (dict(prompt="a", seed=1.5), "seed must be an integer"),
        (dict(prompt="a", guidance_scale=float("inf")), "guidance_scale=inf is not finite"),
        (dict(prompt="a", height=32.0), "height=32.0 must be an integer"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message) if "(" in message else message):
            pipe(**{**size, **kwargs})


def test_from_pretrained_refuses_other_dtypes_before_reading(tmp_path):
    for dtype in ("float16", "int8", "banana"):
        with pytest.raises(ValueError, match=f"dtype='{dtype}' is not supported; use one of bfloat16, float32"):
            WanPipeline.from_pretrained(tmp_path / "does-not-exist", dtype=dtype)


def test_config_values_are_type_checked_against_the_dataclass():
    """A wrong type in config.json is named with its key (``"two"`` heads used to become ``"two" * 128``)."""
    from vidax.core.config_values import config_values
    from vidax.encoders.t5 import T5Config
    from vidax.models.cogvideox.config import CogVideoXTransformerConfig
    from vidax.models.wan.config import WanTransformerConfig
    from vidax.core.wan_vae import WanVAEConfig

    base = {"patch_size": [1, 2, 2], "qk_norm": "rms_norm_across_heads"}
    assert WanTransformerConfig.from_dict({**base, "num_attention_heads": 2, "eps": 1}).dim == 256  # an int is a float
    for build, bad, message in [
        (WanTransformerConfig.from_dict, {**base, "num_attention_heads": "two"},
         "transformer config: num_attention_heads='two' should be an integer"),
        (WanTransformerConfig.from_dict, {**base, "patch_size": [1, 2.5, 2]}, "patch_size=\\[1, 2.5, 2\\] should be a list"),
        (WanTransformerConfig.from_dict, {**base, "image_dim": "1280"}, "image_dim='1280' should be an integer or null"),
        (WanTransformerConfig.from_dict, {**base, "cross_attn_norm": 1}, "cross_attn_norm=1 should be true or false"),
        (WanVAEConfig.from_dict, {"z_dim": 16.0}, "VAE config: z_dim=16.0 should be an integer"),
        (CogVideoXTransformerConfig.from_dict, {"num_layers": None}, "num_layers=None should be an integer"),
        (T5Config.from_dict, {"d_model": "4096"}, "text encoder config: d_model='4096'"),
    ]:
        with pytest.raises(ValueError, match=message):
            build(bad)
    assert config_values(WanTransformerConfig, {"unknown_key": object(), "num_layers": 3}, "x") == {"num_layers": 3}


def test_a_layer_count_that_disagrees_with_the_weights_is_named(demo, tmp_path):
    """config.json without num_layers: the default (40) against the checkpoint's 2 blocks is said in one line."""
    import json
    import shutil

    from vidax.checkpoint.errors import CheckpointError

    broken = tmp_path / "ckpt"
    shutil.copytree(demo, broken)
    config = json.loads((broken / "transformer" / "config.json").read_text())
    assert config.pop("num_layers") == 2
    (broken / "transformer" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="holds 2 blocks and the configuration describes 40: check the layer"):
        WanPipeline.from_pretrained(broken, dtype="float32")
