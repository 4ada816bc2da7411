"""Cosmos-Predict2.5's three folder layouts end to end: the release's folder gives the diffusers folder's frames on the
same sampler grid (its timestep fed as the original network takes it), `vidax convert` of either gives exactly the
source's frames, `vidax inspect` reports every layout, and a broken folder is named in one error line.

The diffusers folder is the tiny demo (:func:`vidax.models.cosmos_predict25.demo.write_demo_checkpoint`). The release's
folder is written from the same weights in the release's files:

* ``base/post-trained/<uuid>_ema_bf16.pt``: the transformer's state dict under the original ``MiniTrainDIT`` names
  with the ``net.`` prefix, from the diffusers names by diffusers' ``scripts/convert_cosmos_to_diffusers.py``
  ``TRANSFORMER_KEYS_RENAME_DICT_COSMOS_2_0`` applied in reverse (restated below, and checked by applying it forward),
  plus keys the converter drops (training counters, the RoPE module's buffers), ``torch.save``'d in float32;
* ``base/post-trained/config.json``: the tiny architecture in diffusers' keys. No release has this file: the
  released networks are recognised by their width and block count, which a tiny one does not have
  (:data:`vidax.models.cosmos_predict25.layout.ORIGINAL_CONFIG`);
* ``tokenizer.pth``: the Wan2.1 VAE (the demo's at 16 base channels, with the release's two residual blocks per
  stage, which diffusers' Wan single-file conversion assumes) in the original Wan names (as ``Wan2.1_VAE.pth``;
  checked against diffusers' ``convert_wan_vae_to_diffusers``), ``torch.save``'d;
* ``Cosmos-Reason1-7B/``: the demo's ``Qwen2_5_VLForConditionalGeneration`` text encoder with its tokenizer files.

The release's post-trained sampler takes ``n + 1`` steps on the Karras grid, equal to diffusers' ``n + 1``-step grid
bit for bit, and feeds the network ``int64(1000 sigma) x 0.001`` (its ``timestep_scale``) where diffusers feeds
sigma; its q/k norms use 1e-6 where diffusers' use 1e-5. So the two folders' frames differ slightly (measured
6.9e-4 at most on [0, 1]); a converted folder gives its source's frames bit for bit. Every pipeline runs in float32 at
32 x 32 pixels, 5 frames.
"""

import dataclasses
import json
import shutil

import jax
import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.inspect import MISMATCH
from vidax.checkpoint.loader import load_params
from vidax.checkpoint.reader import CheckpointReader
from vidax.checkpoint.writer import to_state_dict
from vidax.cli import main
from vidax.core import wan_vae
from vidax.core.params import flatten
from vidax.models.cosmos_predict25 import demo
from vidax.models.cosmos_predict25.convert import convert_checkpoint
from vidax.models.cosmos_predict25.demo import write_demo_checkpoint
from vidax.models.cosmos_predict25.family import FAMILY
from vidax.models.cosmos_predict25.layout import resolve_checkpoint
from vidax.models.cosmos_predict25.loading import load_transformer, make_scheduler, transformer_config, vae_config
from vidax.models.cosmos_predict25.pipeline import CosmosPredict25Pipeline
from vidax.models.cosmos_predict25.transformer import transformer_specs

pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")  # diffusers, numpy 2

PROMPT = "a robot arm welds a metal frame, sparks fly"
SIZE = dict(height=32, width=32, num_frames=5)
STEPS = 3  # the release's 3 steps: 4 on its grid, diffusers' 4-step grid
IMAGE = np.random.default_rng(3).integers(0, 256, (32, 32, 3), dtype=np.uint8)
PT = "00000000-0000-0000-0000-000000000000_ema_bf16.pt"  # a uuid of no release (the size is not inferred from it)

# diffusers' scripts/convert_cosmos_to_diffusers.py, restated: TRANSFORMER_KEYS_RENAME_DICT_COSMOS_2_0 (substring
# replacements in this order after the "net." prefix is removed) and the keys its
# TRANSFORMER_SPECIAL_KEYS_REMAP_COSMOS_2_0 removes (some of them written into the release's folder below).
RENAME_COSMOS_2_0 = {
    "t_embedder.1": "time_embed.t_embedder", "t_embedding_norm": "time_embed.norm", "blocks": "transformer_blocks",
    "adaln_modulation_self_attn.1": "norm1.linear_1", "adaln_modulation_self_attn.2": "norm1.linear_2",
    "adaln_modulation_cross_attn.1": "norm2.linear_1", "adaln_modulation_cross_attn.2": "norm2.linear_2",
    "adaln_modulation_mlp.1": "norm3.linear_1", "adaln_modulation_mlp.2": "norm3.linear_2", "self_attn": "attn1",
    "cross_attn": "attn2", "q_proj": "to_q", "k_proj": "to_k", "v_proj": "to_v", "output_proj": "to_out.0",
    "q_norm": "norm_q", "k_norm": "norm_k", "mlp.layer1": "ff.net.0.proj", "mlp.layer2": "ff.net.2",
    "x_embedder.proj.1": "patch_embed.proj", "final_layer.adaln_modulation.1": "norm_out.linear_1",
    "final_layer.adaln_modulation.2": "norm_out.linear_2", "final_layer.linear": "proj_out",
}
DROPPED = {"net.accum_video_sample_counter": torch.tensor(1234), "net.accum_iteration": torch.tensor(5000),
           "net.pos_embedder.seq": torch.arange(128, dtype=torch.float32),
           "net.pos_embedder.dim_spatial_range": torch.arange(0, 4, 2, dtype=torch.float32) / 4}
# diffusers' UniPCMultistepScheduler as the converter configures it (save_pipeline_cosmos2_5_predict).
COSMOS_UNIPC = dict(use_karras_sigmas=True, use_flow_sigmas=True, prediction_type="flow_prediction",
                    sigma_max=200.0, sigma_min=0.01)


def _diffusers_name(key):
    """diffusers' converter on one original key."""
    key = key.removeprefix("net.")
    for old, new in RENAME_COSMOS_2_0.items():
        key = key.replace(old, new)
    return key


def _original_name(key):
    """The release's name of a diffusers key: the rename table backwards, then the prefix."""
    for old, new in reversed(RENAME_COSMOS_2_0.items()):
        key = key.replace(new, old)
    return "net." + key


def _original_transformer(diffusers):
    """The release's state dict of the diffusers folder's transformer (torch tensors)."""
    sd = load_file(str(diffusers / "transformer" / "diffusion_pytorch_model.safetensors"))
    out = {_original_name(k): torch.from_numpy(v.copy()) for k, v in sd.items()}
    assert len(out) == len(sd) and {_diffusers_name(k): None for k in out}.keys() == sd.keys()
    assert {"net.x_embedder.proj.1.weight", "net.blocks.1.adaln_modulation_cross_attn.2.weight",
            "net.blocks.0.self_attn.output_proj.weight", "net.blocks.1.mlp.layer2.weight",
            "net.final_layer.adaln_modulation.1.weight", "net.crossattn_proj.0.bias"} <= out.keys()
    return {**out, **DROPPED}


def _original_vae(diffusers):
    """The Wan2.1 VAE in the original Wan names (what the release's tokenizer.pth holds), checked against diffusers'
    single-file conversion of the Wan VAE."""
    from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers

    cfg = wan_vae.WanVAEConfig.from_dict(json.loads((diffusers / "vae" / "config.json").read_text()))
    specs = wan_vae.vae_specs(cfg)
    params = jax.tree.map(np.asarray, load_params(CheckpointReader(diffusers / "vae"), wan_vae.vae_keymap(cfg), specs,
                                                  np.float32))
    sd = {k: torch.from_numpy(np.array(v)) for k, v in
          to_state_dict(params, wan_vae.vae_keymap_original(cfg), specs).items()}
    want = load_file(str(diffusers / "vae" / "diffusion_pytorch_model.safetensors"))
    got = convert_wan_vae_to_diffusers(dict(sd))
    assert got.keys() == want.keys() and all(np.array_equal(got[k].numpy(), want[k]) for k in want)
    return sd


def _write_release(diffusers, root):
    (root / "base" / "post-trained").mkdir(parents=True)
    torch.save(_original_transformer(diffusers), root / "base" / "post-trained" / PT)
    shutil.copy(diffusers / "transformer" / "config.json", root / "base" / "post-trained" / "config.json")
    torch.save(_original_vae(diffusers), root / "tokenizer.pth")
    shutil.copytree(diffusers / "text_encoder", root / "Cosmos-Reason1-7B")
    for f in (diffusers / "tokenizer").iterdir():
        shutil.copy(f, root / "Cosmos-Reason1-7B" / f.name)
    return root


def _run(folder, steps, variant=None, **kw):
    pipe = CosmosPredict25Pipeline.from_pretrained(folder, variant=variant, dtype="float32", progress=False)
    out = pipe(PROMPT, num_inference_steps=steps, seed=0, output_type="float", progress=False, **SIZE, **kw)
    return pipe, np.asarray(out.frames)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """``(diffusers folder, release folder, the diffusers folder's frames at STEPS + 1, the release's frames at
    STEPS, the release's pipeline)``."""
    root = tmp_path_factory.mktemp("cosmos_convert")
    diffusers = write_demo_checkpoint(root / "diffusers", seed=1)
    shutil.rmtree(diffusers / "vae")  # the release's two residual blocks per stage (diffusers' Wan conversion's)
    demo.write_vae(diffusers, demo.vae_config(num_res_blocks=2), np.random.default_rng(2))
    release = _write_release(diffusers, root / "release")
    _, frames = _run(diffusers, STEPS + 1)
    pipe, release_frames = _run(release, STEPS, variant="post-trained")
    return diffusers, release, frames, release_frames, pipe


def test_release_gives_the_diffusers_frames_on_the_same_grid(folders):
    from diffusers import UniPCMultistepScheduler

    diffusers, release, frames, release_frames, pipe = folders
    ckpt = resolve_checkpoint(release, variant="post-trained")
    assert (ckpt.layout, ckpt.variant, ckpt.transformer.name) == ("original", "post-trained", PT)
    ref = resolve_checkpoint(diffusers)
    # The same architecture with the original network's q/k-norm epsilon.
    assert transformer_config(ckpt) == dataclasses.replace(transformer_config(ref), qk_norm_eps=1e-6)
    assert vae_config(ckpt) == vae_config(ref)
    # The schedules: the release's STEPS on its grid are diffusers' STEPS + 1, bit for bit; the release's network
    # takes float32(int64 timestep) x 0.001 (its timestep_scale, in torch float32), diffusers' takes sigma.
    state, dstate = pipe.scheduler.set_timesteps(STEPS), make_scheduler(ref).set_timesteps(STEPS + 1)
    sched = UniPCMultistepScheduler(**COSMOS_UNIPC)
    sched.set_timesteps(STEPS + 1)
    assert state.num_inference_steps == STEPS + 1
    np.testing.assert_array_equal(np.asarray(state.sigmas), sched.sigmas.numpy())
    np.testing.assert_array_equal(np.asarray(dstate.sigmas), sched.sigmas.numpy())
    np.testing.assert_array_equal(np.asarray(state.timesteps), sched.timesteps.numpy())
    scaled = (torch.from_numpy(np.asarray(state.timesteps)).to(torch.float32) * 0.001).numpy()
    np.testing.assert_array_equal(np.asarray(state.model_timesteps), scaled)
    np.testing.assert_array_equal(np.asarray(dstate.model_timesteps), sched.sigmas.numpy()[:-1])
    assert frames.shape == release_frames.shape == (1, 5, 32, 32, 3) and np.ptp(frames) > 0.1
    diff = np.abs(release_frames - frames).max()
    assert 0 < diff < 2 / 255, diff  # the timestep's truncation and the q/k-norm epsilon: slightly different


def _convert(src, out, capsys, *flags):
    assert main(["convert", str(src), str(out), "--dtype", "float32", *flags]) == 0
    return capsys.readouterr().out


def test_converted_release_gives_exactly_its_frames(folders, tmp_path, capsys):
    _, release, _, release_frames, pipe = folders
    out = tmp_path / "out"
    printed = _convert(release, out, capsys, "--variant", "post-trained")
    assert "from the original layout (variant post-trained)" in printed
    index = json.loads((out / "vidax_index.json").read_text())
    assert (index["family"], index["source_layout"], index["variant"]) == ("cosmos-predict2.5", "original",
                                                                          "post-trained")
    ckpt = resolve_checkpoint(out)
    assert (ckpt.layout, ckpt.variant) == ("vidax", "post-trained")
    assert transformer_config(ckpt).qk_norm_eps == 1e-6
    # The release's default step count, as for the release itself (its 35 steps: 36 on its grid).
    assert FAMILY.resolve(out, "t2v", None, {}, {})["num_inference_steps"] == 35
    converted, frames = _run(out, STEPS)
    np.testing.assert_array_equal(frames, release_frames)
    # Image-to-world: the variant's conditioning-frame timestep (0.1 of 1000, scaled as the network scales it).
    assert converted.conditional_frame_timestep() == pipe.conditional_frame_timestep() == np.float32(0.1) * np.float32(
        0.001)
    kw = dict(num_inference_steps=STEPS, seed=0, output_type="float", progress=False, image=IMAGE, **SIZE)
    np.testing.assert_array_equal(converted(PROMPT, **kw).frames, pipe(PROMPT, **kw).frames)


def test_converted_diffusers_folder_gives_exactly_its_frames(folders, tmp_path, capsys):
    diffusers, _, frames, _, _ = folders
    out = tmp_path / "out"
    assert "from the diffusers layout in" in _convert(diffusers, out, capsys)
    index = json.loads((out / "vidax_index.json").read_text())
    assert (index["source_layout"], index["variant"]) == ("diffusers", None)
    assert json.loads((out / "scheduler" / "scheduler_config.json").read_text()) == json.loads(
        (diffusers / "scheduler" / "scheduler_config.json").read_text())
    np.testing.assert_array_equal(_run(out, STEPS + 1)[1], frames)
    # The text encoder: the language model's tensors under Qwen2_5_VLTextModel's names (the LM head left out).
    got = load_file(str(out / "text_encoder" / "model.safetensors"))
    want = load_file(str(diffusers / "text_encoder" / "model.safetensors"))
    assert {f"model.language_model.{k}" for k in got} == want.keys() - {"lm_head.weight"}
    assert all(np.array_equal(v, want[f"model.language_model.{k}"]) for k, v in got.items())


def _leaves(tree):
    return {path: np.asarray(v) for path, v in flatten(tree)}


def test_bf16_conversion_stores_what_loading_the_release_gives(folders, tmp_path):
    _, release, _, _, _ = folders
    summary = convert_checkpoint(release, tmp_path / "out", dtype="bfloat16", text_encoder_dtype="bfloat16")
    assert summary["dtypes"] == {"transformer": "bfloat16", "vae": "float32", "text_encoder": "bfloat16"}
    assert summary["variant"] == "post-trained" and summary["model"] == "Cosmos-Predict2.5 post-trained"
    src, out = resolve_checkpoint(release), resolve_checkpoint(tmp_path / "out")
    cfg = transformer_config(src)
    a, b = _leaves(load_transformer(src, cfg, "bfloat16")), _leaves(load_transformer(out, cfg, "bfloat16"))
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        np.testing.assert_array_equal(a[k].view(np.uint8), b[k].view(np.uint8), err_msg=k)
    pinned = {path: spec.fp32 for path, spec in flatten(transformer_specs(cfg))}
    assert {a[k].dtype.name for k in a if pinned[k]} == {"float32"}
    assert {a[k].dtype.name for k in a if not pinned[k]} == {"bfloat16"}


def test_inspect_reports_every_layout(folders, tmp_path, capsys):
    diffusers, release, _, _, _ = folders
    convert_checkpoint(release, tmp_path / "vidax", dtype="float32")
    weights = load_file(str(diffusers / "transformer" / "diffusion_pytorch_model.safetensors"))
    count = sum(v.size for v in weights.values())
    for folder, layout in ((diffusers, "diffusers layout"), (release, "the release (original layout)"),
                           (tmp_path / "vidax", "vidax layout")):
        assert main(["inspect", str(folder)]) == 0, layout
        out = capsys.readouterr().out
        assert "Cosmos-Predict2.5 text-, image- and video-to-world" in out and layout in out
        assert out.count("every parameter filled exactly once") == 3, out
        assert out.count("keys our map does not know: 0") == 3, out
        assert "2 blocks, 2 heads x 16 (width 32)" in out and "text 96 -> 32 (crossattn_proj)" in out
        assert "3 layers x width 32 = 96 features per token" in out
        assert "fit each other (the text encoder's layers x width = the transformer's crossattn_proj_in_channels 96" \
            in out
        assert "Qwen2 tokenizer" in out and MISMATCH not in out
        if layout == "diffusers layout":
            assert f"({count:,})" in out and "q/k norm eps 1e-05" in out
            assert "diffusers' Karras flow grid (sigma 200 to 0.01); the transformer given sigma" in out
        else:  # the release's sampler, also in the converted folder
            assert "q/k norm eps 1e-06" in out
            assert ("the repository's Karras grid (sigma 200 to 0.01, num_inference_steps + 1 steps); the "
                    "transformer given the truncated timestep x 0.001") in out
    assert main(["inspect", str(release)]) == 0
    out = capsys.readouterr().out
    assert f"transformer (post-trained): {release / 'base' / 'post-trained' / PT}" in out
    assert "from config.json beside the .pt, not a release's" in out
    assert f"keys deliberately not read (training counters, recomputed buffers): {len(DROPPED)}" in out
    assert "scheduler (post-trained): none in the folder: the post-trained checkpoints' sampler" in out
    assert "(read back from its tensor shapes)" in out and "variants: post-trained" in out


@pytest.fixture
def both(folders, tmp_path):
    """A release folder holding both transformers (the same weights)."""
    _, release, _, _, _ = folders
    root = tmp_path / "release"
    shutil.copytree(release, root)
    shutil.copytree(root / "base" / "post-trained", root / "base" / "pre-trained")
    return root


def test_both_variants_and_the_pre_trained_sampler(both, tmp_path, capsys):
    assert main(["inspect", str(both)]) == 0
    out = capsys.readouterr().out
    assert "variants: post-trained, pre-trained" in out and out.count("every parameter filled exactly once") == 4
    assert "scheduler (pre-trained): none in the folder: the pre-trained checkpoints' sampler (UniPC on the shifted " \
           "linear grid (shift 5, the Wan repository's); the transformer given the truncated timestep x 0.001)" in out
    _convert(both, tmp_path / "pre", capsys, "--variant", "pre-trained")
    ckpt = resolve_checkpoint(tmp_path / "pre")
    assert ckpt.variant == "pre-trained"
    a = make_scheduler(resolve_checkpoint(both, variant="pre-trained")).set_timesteps(35)
    b = make_scheduler(ckpt).set_timesteps(35)
    assert a.num_inference_steps == b.num_inference_steps == 35
    for x, y in ((a.sigmas, b.sigmas), (a.timesteps, b.timesteps), (a.model_timesteps, b.model_timesteps)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _error(capsys):
    err = capsys.readouterr().err
    assert err.startswith("vidax: error: ") and err.count("\n") == 1, err
    return err


def test_broken_folders_are_named_in_one_line(folders, tmp_path, capsys):
    diffusers, release, _, _, _ = folders
    out = tmp_path / "out"
    broken = tmp_path / "no_vae"
    shutil.copytree(release, broken)
    (broken / "tokenizer.pth").unlink()
    assert main(["convert", str(broken), str(out)]) == 2
    assert "is missing tokenizer.pth" in _error(capsys)
    assert main(["inspect", str(broken)]) == 1
    assert "is missing tokenizer.pth" in capsys.readouterr().out
    broken = tmp_path / "no_text"
    shutil.copytree(release, broken)
    shutil.rmtree(broken / "Cosmos-Reason1-7B")
    assert main(["convert", str(broken), str(out)]) == 2
    err = _error(capsys)
    assert "is missing Cosmos-Reason1-7B/config.json" in err and "hf download nvidia/Cosmos-Reason1-7B" in err
    # A variant the folder lacks: those present named.
    assert main(["convert", str(release), str(out), "--variant", "pre-trained"]) == 2
    assert "the pre-trained transformer is not in this folder (found: post-trained)" in _error(capsys)
    # An unknown variant: argparse's choices on the command line, the layout's error from Python.
    with pytest.raises(SystemExit) as e:
        main(["convert", str(release), str(out), "--variant", "distilled"])
    assert e.value.code == 2 and "invalid choice: 'distilled'" in capsys.readouterr().err
    with pytest.raises(CheckpointError, match="variant 'distilled' is not a Cosmos-Predict2.5 transformer; expected "
                                              "one of post-trained, pre-trained"):
        convert_checkpoint(release, out, variant="distilled")
    # A variant where it chooses nothing.
    assert main(["convert", str(diffusers), str(out), "--variant", "post-trained"]) == 2
    assert "holds one transformer" in _error(capsys)
    # A text encoder of another width than the transformer takes.
    broken = tmp_path / "wide"
    shutil.copytree(diffusers, broken)
    config = json.loads((broken / "text_encoder" / "config.json").read_text())
    config["text_config"]["num_hidden_layers"] = 4
    (broken / "text_encoder" / "config.json").write_text(json.dumps(config))
    assert main(["inspect", str(broken)]) == 1
    printed = capsys.readouterr().out
    assert "components: does not match its configuration" in printed
    assert "gives 128 features per token (layers x width) but the transformer takes 96" in printed
    assert main(["convert", str(broken), str(out)]) == 2
    assert "would not load" in _error(capsys)
    # A tokenizer that does not parse.
    broken = tmp_path / "tokenizer"
    shutil.copytree(diffusers, broken)
    (broken / "tokenizer" / "tokenizer.json").write_text("{")
    assert main(["inspect", str(broken)]) == 1
    assert "tokenizer: does not match its configuration" in capsys.readouterr().out
    assert main(["convert", str(broken), str(out)]) == 2
    assert "would not load, so it is not converted" in _error(capsys)
    # Without its config.json the tiny network is no release.
    broken = tmp_path / "tiny"
    shutil.copytree(release, broken)
    (broken / "base" / "post-trained" / "config.json").unlink()
    assert main(["inspect", str(broken)]) == 1
    assert "width 32 with 2 blocks is no Cosmos-Predict2.5 release" in capsys.readouterr().out
    assert not out.exists() and not list(tmp_path.glob(".out*"))
