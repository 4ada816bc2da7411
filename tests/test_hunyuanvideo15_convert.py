"""HunyuanVideo-1.5's three folder layouts end to end: the official release gives exactly the diffusers folder's frames,
`vidax convert` of either gives exactly the source's frames, `vidax inspect` reports every layout (and names what a
broken folder lacks), a release's variant is chosen with `--variant`, and a failed conversion leaves nothing.

One tiny diffusers demo folder per task, its byT5 glyph encoder replaced by a 1472-wide ``T5EncoderModel`` written by
transformers (the original release's byT5 projection is fixed at byt5-small's width) and its ``tokenizer_2`` by
transformers' ``ByT5Tokenizer`` with the Glyph-SDXL-v2 colour and font tokens, as diffusers' converter saves it. The
official ``ckpts`` folder is written from the same weights: the transformer and the VAE under the original names and
configuration keys (through the original key maps, whose parity with the reference renames
tests/test_hunyuanvideo15_transformer.py and test_hunyuanvideo15_vae.py show), Qwen2.5-VL as the whole
``Qwen2_5_VLForConditionalGeneration`` checkpoint (``model.*`` names, a vision tower and an LM head, the tokenizer
beside it), byt5-small's config and tokenizer files, the glyph weights as the ``T5Stack`` state dict in
``Glyph-SDXL-v2/checkpoints/byt5_model.pt`` (torch.save) with the two asset files, and SigLIP under
``vision_encoder/siglip``. Every pipeline runs in float32 at 64 x 64 pixels, 5 frames, 2 steps, with a quoted text in
the prompt (the glyph path), and its float frames are compared bit for bit.
"""

import errno
import json
import shutil

import jax
import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.numpy import load_file, save_file
from transformers import ByT5Tokenizer as HFByT5Tokenizer
from transformers import T5Config as HFT5Config
from transformers import T5EncoderModel

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.loader import load_params
from vidax.checkpoint.reader import CheckpointReader
from vidax.checkpoint.writer import to_state_dict
from vidax.cli import main
from vidax.core.params import flatten
from vidax.models import registry
from vidax.models.hunyuanvideo15 import convert as hconvert
from vidax.models.hunyuanvideo15.convert import convert_checkpoint
from vidax.models.hunyuanvideo15.demo import write_demo_checkpoint
from vidax.models.hunyuanvideo15.keymap import (transformer_checkpoint, transformer_keymap_original,
                                                transformer_views_original)
from vidax.models.hunyuanvideo15.layout import resolve_checkpoint
from vidax.models.hunyuanvideo15.loading import transformer_config, vae_config
from vidax.models.hunyuanvideo15.pipeline import HunyuanVideo15ImageToVideoPipeline, HunyuanVideo15Pipeline
from vidax.models.hunyuanvideo15.transformer import transformer_specs
from vidax.models.hunyuanvideo15.vae_keymap import vae_checkpoint, vae_keymap_original, vae_specs

pytestmark = pytest.mark.filterwarnings("ignore:This sequence already has")

PROMPT = 'a neon sign that says "OPEN 24" above a door'
IMAGE = np.random.default_rng(3).integers(0, 256, (64, 64, 3), dtype=np.uint8)
PIPELINES = {"t2v": HunyuanVideo15Pipeline, "i2v": HunyuanVideo15ImageToVideoPipeline}
VARIANT = {"t2v": "480p_t2v", "i2v": "480p_i2v"}  # the 480p variants: shift 5 and guidance 6, the demo's
#: The release's fixed byT5 width, two refiner blocks and its 480p bucket base: what the original config implies.
OVERRIDES = {"text_embed_2_dim": 1472, "num_refiner_layers": 2, "target_size": 640}
# Glyph-SDXL-v2's assets, shortened (tests/test_byt5.py).
COLORS = {"white": 0, "black": 1, "darkslategray": 2, "dimgray": 3, "red": 4}
FONTS = {"en-Montserrat-Regular": 0, "cn-HanyiSentyPagoda": 1, "jp-NotoSansJP-Bold": 2, "en-Lobster": 3,
         "kr-NanumGothic": 4}
ROWS = 384 + len(COLORS) + len(FONTS)


def _frames(folder, task, **load):
    pipe = PIPELINES[task].from_pretrained(folder, dtype="float32", progress=False, **load)
    image = {"image": IMAGE} if task == "i2v" else {}
    out = pipe(PROMPT, height=64, width=64, num_frames=5, num_inference_steps=2, seed=0, output_type="float",
               progress=False, **image)
    return np.asarray(out.frames)


def _glyph_tokenizer():
    """diffusers' converter's tokenizer_2: byt5-small's with add_special_token's colour, then font tokens."""
    tok = HFByT5Tokenizer()
    tok.add_tokens([f"<color-{i}>" for i in range(len(COLORS))]
                   + [f"<{code[:2]}-font-{FONTS[code]}>" for code in FONTS], special_tokens=True)
    return tok


def _glyph_encoder():
    """A byT5-shaped encoder 1472 wide (the original's ByT5Mapper input), its rows the glyph tokenizer's."""
    torch.manual_seed(5)
    model = T5EncoderModel(HFT5Config(vocab_size=ROWS, d_model=1472, d_kv=8, num_heads=3, d_ff=48, num_layers=2,
                                      relative_attention_num_buckets=32, relative_attention_max_distance=128,
                                      feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6))
    with torch.no_grad():  # norm scales start at 1: move them so they are tested too
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn(p.shape))
    return model.eval()


def _diffusers(folder, task, glyph):
    write_demo_checkpoint(folder, task=task, seed=1, transformer_overrides=OVERRIDES)
    for part in ("text_encoder_2", "tokenizer_2"):
        shutil.rmtree(folder / part)
    glyph.save_pretrained(folder / "text_encoder_2")
    _glyph_tokenizer().save_pretrained(folder / "tokenizer_2")
    return folder


def _renamed(reader, src_keymap, keymap, specs):
    """A component's tensors under another layout's names (our tree through ``keymap`` backwards)."""
    params = jax.tree.map(np.asarray, load_params(reader, src_keymap, specs, np.float32))
    return to_state_dict(params, keymap, specs)


def _write_original(diffusers, root, task, glyph):
    """The official release's ``ckpts`` folder holding ``diffusers``' weights (see the module docstring)."""
    d = json.loads((diffusers / "transformer" / "config.json").read_text())
    tcfg = transformer_config(resolve_checkpoint(diffusers))
    folder = root / "transformer" / VARIANT[task]
    folder.mkdir(parents=True)
    specs = transformer_specs(tcfg)
    sd = _renamed(*transformer_checkpoint(CheckpointReader(diffusers / "transformer"), tcfg),
                  transformer_keymap_original(tcfg), specs)
    save_file(transformer_views_original(tcfg).merge(sd, {}), str(folder / "diffusion_pytorch_model.safetensors"))
    (folder / "config.json").write_text(json.dumps({  # HunyuanVideo_1_5_DiffusionTransformer's keys
        "_class_name": "HunyuanVideo_1_5_DiffusionTransformer", "attn_mode": "flash", "concat_condition": True,
        "glyph_byT5_v2": True, "guidance_embed": False, "heads_num": d["num_attention_heads"],
        "hidden_size": d["num_attention_heads"] * d["attention_head_dim"], "ideal_resolution": "480p",
        "ideal_task": task, "in_channels": d["out_channels"], "is_reshape_temporal_channels": False,
        "mlp_act_type": "gelu_tanh", "mlp_width_ratio": 4, "mm_double_blocks_depth": d["num_layers"],
        "mm_single_blocks_depth": 0, "out_channels": d["out_channels"], "patch_size": [1, 1, 1], "qk_norm": True,
        "qk_norm_type": "rms", "qkv_bias": True, "rope_dim_list": d["rope_axes_dim"], "rope_theta": 256,
        "text_pool_type": None, "text_projection": "single_refiner", "text_states_dim": d["text_embed_dim"],
        "use_attention_mask": True, "use_cond_type_embedding": True, "use_meanflow": False,
        "vision_projection": "linear", "vision_states_dim": d["image_embed_dim"]}))

    v = json.loads((diffusers / "vae" / "config.json").read_text())
    vcfg, reader, keymap = vae_checkpoint(diffusers / "vae")
    (root / "vae").mkdir()
    save_file(_renamed(reader, keymap, vae_keymap_original(vcfg), vae_specs(vcfg)),
              str(root / "vae" / "diffusion_pytorch_model.safetensors"))
    (root / "vae" / "config.json").write_text(json.dumps({  # AutoencoderKLConv3D's keys
        "_class_name": "AutoencoderKLConv3D", "block_out_channels": v["block_out_channels"],
        "downsample_match_channel": True, "ffactor_spatial": 16, "ffactor_temporal": 4, "in_channels": 3,
        "latent_channels": v["latent_channels"], "layers_per_block": v["layers_per_block"], "out_channels": 3,
        "sample_size": 256, "sample_tsize": 64, "scaling_factor": v["scaling_factor"], "shift_factor": None,
        "upsample_match_channel": True}))

    # Qwen/Qwen2.5-VL-7B-Instruct's layout: the language model under model., a vision tower and an LM head beside it,
    # the text settings at the top level of a qwen2_5_vl config, the tokenizer in the same folder.
    llm = root / "text_encoder" / "llm"
    llm.mkdir(parents=True)
    text = load_file(str(diffusers / "text_encoder" / "model.safetensors"))
    rng = np.random.default_rng(7)
    width, vocab = text["norm.weight"].shape[0], text["embed_tokens.weight"].shape[0]
    whole = {f"model.{k}": v for k, v in text.items()}
    whole["lm_head.weight"] = rng.standard_normal((vocab, width), np.float32)
    whole["visual.patch_embed.proj.weight"] = rng.standard_normal((8, 3, 2, 14, 14), np.float32)
    whole["visual.merger.mlp.0.bias"] = rng.standard_normal((8,), np.float32)
    save_file(whole, str(llm / "model.safetensors"), metadata={"format": "pt"})
    qwen = json.loads((diffusers / "text_encoder" / "config.json").read_text())
    qwen.update(architectures=["Qwen2_5_VLForConditionalGeneration"], model_type="qwen2_5_vl", image_token_id=151655,
                vision_config={"depth": 1, "hidden_size": 8, "out_hidden_size": width, "model_type": "qwen2_5_vl"})
    (llm / "config.json").write_text(json.dumps(qwen))
    for f in (diffusers / "tokenizer").iterdir():
        shutil.copy(f, llm / f.name)

    # google/byt5-small (config and legacy tokenizer files) and Glyph-SDXL-v2 (the T5Stack state dict and assets).
    byt5 = root / "text_encoder" / "byt5-small"
    byt5.mkdir()
    (byt5 / "config.json").write_text(json.dumps({**glyph.config.to_dict(), "vocab_size": 384,
                                                  "architectures": ["T5ForConditionalGeneration"],
                                                  "is_encoder_decoder": True, "num_decoder_layers": 2}))
    extra = [f"<extra_id_{i}>" for i in range(125)]
    names = {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
    (byt5 / "tokenizer_config.json").write_text(json.dumps({**names, "extra_ids": 125,
                                                            "additional_special_tokens": extra}))
    (byt5 / "special_tokens_map.json").write_text(json.dumps({**names, "additional_special_tokens": extra}))
    glyph_folder = root / "text_encoder" / "Glyph-SDXL-v2"
    (glyph_folder / "checkpoints").mkdir(parents=True)
    (glyph_folder / "assets").mkdir()
    torch.save({k: v.clone() for k, v in glyph.encoder.state_dict().items()},
               glyph_folder / "checkpoints" / "byt5_model.pt")
    (glyph_folder / "assets" / "color_idx.json").write_text(json.dumps(COLORS))
    (glyph_folder / "assets" / "multilingual_10-lang_idx.json").write_text(json.dumps(FONTS))

    if task == "i2v":  # FLUX.1-Redux-dev's SigLIP: image_encoder/ and feature_extractor/
        siglip = root / "vision_encoder" / "siglip"
        shutil.copytree(diffusers / "image_encoder", siglip / "image_encoder")
        shutil.copytree(diffusers / "feature_extractor", siglip / "feature_extractor")
    return root


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """``folders(task)``: ``(diffusers folder, official release folder, the diffusers folder's frames)``."""
    cache = {}

    def get(task):
        if task not in cache:
            root = tmp_path_factory.mktemp(f"hunyuanvideo15_{task}")
            glyph = _glyph_encoder()
            diffusers = _diffusers(root / "diffusers", task, glyph)
            original = _write_original(diffusers, root / "ckpts", task, glyph)
            cache[task] = diffusers, original, _frames(diffusers, task)
        return cache[task]

    return get


@pytest.mark.parametrize("task", ["t2v", "i2v"])
def test_official_release_gives_exactly_the_diffusers_frames(folders, task):
    diffusers, original, frames = folders(task)
    ckpt, ref = resolve_checkpoint(original, variant=VARIANT[task]), resolve_checkpoint(diffusers)
    assert (ckpt.layout, ckpt.task, ckpt.variant) == ("original", task, VARIANT[task])
    assert transformer_config(ckpt) == transformer_config(ref) and vae_config(ckpt) == vae_config(ref)
    assert frames.shape == (1, 5, 64, 64, 3) and np.ptp(frames) > 0.1  # a video, not a constant
    np.testing.assert_array_equal(_frames(original, task, variant=VARIANT[task]), frames)


@pytest.mark.parametrize("source", ["diffusers", "original"])
@pytest.mark.parametrize("task", ["t2v", "i2v"])
def test_converted_folder_gives_exactly_the_source_frames(folders, task, source, tmp_path, capsys):
    diffusers, original, frames = folders(task)
    src, out = (diffusers if source == "diffusers" else original), tmp_path / "out"
    variant = ["--variant", VARIANT[task]] if source == "original" else []
    assert main(["convert", str(src), str(out), "--dtype", "float32", *variant]) == 0
    printed = capsys.readouterr().out
    assert f"from the {source} layout" in printed and (f"(variant {VARIANT[task]})" in printed) == bool(variant)
    ckpt = resolve_checkpoint(out)
    assert (ckpt.layout, ckpt.task) == ("vidax", task)
    index = json.loads((out / "vidax_index.json").read_text())
    assert (index["family"], index["source_layout"]) == ("hunyuanvideo-1.5", source)
    assert index["pipeline_class"] == PIPELINES[task].__name__
    assert index["variant"] == (VARIANT[task] if source == "original" else None) == ckpt.variant
    np.testing.assert_array_equal(_frames(out, task), frames)
    if source == "original":
        _assert_transformers_folders(out, diffusers)


def _assert_transformers_folders(out, diffusers):
    """The converted encoders are the diffusers folders' transformers classes, with the same tensors; the glyph
    tokenizer written from the release's files is the one diffusers' converter saves."""
    ref = _glyph_tokenizer()
    tok = HFByT5Tokenizer.from_pretrained(out / "tokenizer_2")
    assert len(tok) == len(ref) == ROWS
    texts = ['Text "OPEN 24". ', "<color-4><en-font-3> hi </s>", "é 😀 <extra_id_7>"]
    assert tok(texts, padding="max_length", max_length=32).input_ids == ref(texts, padding="max_length",
                                                                          max_length=32).input_ids
    for part in ("text_encoder", "text_encoder_2", "image_encoder"):
        if not (diffusers / part).exists():
            continue
        got = load_file(str(out / part / "model.safetensors"))
        want = load_file(str(diffusers / part / "model.safetensors"))
        assert got.keys() == want.keys(), part  # the release's vision tower and LM head left out
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    glyph = T5EncoderModel.from_pretrained(out / "text_encoder_2")
    assert glyph.config.vocab_size == ROWS and glyph.config.d_model == 1472


def _leaves(tree):
    return {path: np.asarray(v) for path, v in flatten(tree)}


def _assert_same(a, b):
    a, b = _leaves(a), _leaves(b)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        np.testing.assert_array_equal(a[k].view(np.uint8), b[k].view(np.uint8), err_msg=k)


def test_bf16_conversion_stores_what_loading_the_source_gives(folders, tmp_path):
    """The release (I2V) converted to bf16 (transformer, Qwen2.5-VL and byT5): each converted component loads bit for
    bit as the source does at those dtypes, fp32-pinned leaves stored in fp32; SigLIP is kept as stored."""
    from vidax.models.hunyuanvideo15.loading import load_image_encoder, load_text_encoders, load_transformer, load_vae

    _, original, _ = folders("i2v")
    summary = convert_checkpoint(original, tmp_path / "out", dtype="bfloat16", text_encoder_dtype="bfloat16",
                                 variant="480p_i2v")
    assert summary["dtypes"] == {"transformer": "bfloat16", "vae": "float32", "text_encoder": "bfloat16",
                                 "text_encoder_2": "bfloat16", "image_encoder": "float32"}
    src, out = resolve_checkpoint(original, variant="480p_i2v"), resolve_checkpoint(tmp_path / "out")
    assert out.variant == "480p_i2v" and out.scheduler_config()["shift"] == src.scheduler_config()["shift"] == 5.0
    assert out.guider_config()["guidance_scale"] == 6.0
    tcfg, vcfg = transformer_config(src), vae_config(src)
    assert transformer_config(out) == tcfg and vae_config(out) == vcfg
    _assert_same(load_transformer(src, tcfg, "bfloat16"), load_transformer(out, tcfg, "bfloat16"))
    _assert_same(load_vae(src, vcfg, "float32"), load_vae(out, vcfg, "float32"))
    (qa, ga), (qb, gb) = load_text_encoders(src, "bfloat16"), load_text_encoders(out, "bfloat16")
    assert qa.config == qb.config and ga[1] == gb[1] and len(ga[2]) == len(gb[2]) == ROWS
    _assert_same(qa.params, qb.params)
    _assert_same(ga[0], gb[0])
    _assert_same(load_image_encoder(src, "float32")[0], load_image_encoder(out, "float32")[0])
    pinned = {path: spec.fp32 for path, spec in flatten(transformer_specs(tcfg))}
    with safe_open(str(tmp_path / "out" / "transformer" / "params.safetensors"), "np") as f:
        stored = {k: f.get_slice(k).get_dtype() for k in f.keys()}
    assert stored.keys() == pinned.keys() and any(pinned.values()) and not all(pinned.values())
    assert all(stored[k] == ("F32" if pinned[k] else "BF16") for k in stored), stored
    qwen = load_file(str(tmp_path / "out" / "text_encoder" / "model.safetensors"))
    assert qwen["layers.0.self_attn.q_proj.weight"].dtype.name == "bfloat16" and qwen["norm.weight"].dtype == np.float32


@pytest.mark.parametrize("task", ["t2v", "i2v"])
def test_inspect_reports_every_layout(folders, task, tmp_path, capsys):
    diffusers, original, _ = folders(task)
    convert_checkpoint(original, tmp_path / "vidax", dtype="float32", variant=VARIANT[task])
    weights = load_file(str(diffusers / "transformer" / "diffusion_pytorch_model.safetensors"))
    count = sum(v.size for v in weights.values())
    parts = 5 if task == "i2v" else 4
    for folder, layout in ((diffusers, "diffusers layout"), (original, "original layout"),
                           (tmp_path / "vidax", "vidax layout")):
        assert main(["inspect", str(folder)]) == 0, layout
        out = capsys.readouterr().out
        assert f"HunyuanVideo-1.5 {'image' if task == 'i2v' else 'text'}-to-video" in out and layout in out
        assert out.count("every parameter filled exactly once") == parts, out
        assert out.count("keys our map does not know: 0") == parts, out
        assert ("fit each other" in out) and "does not match" not in out
        assert f"({count:,})" in out  # the transformer's parameters, whatever the layout
        assert "2 dual-stream blocks, 2 heads x 16" in out and "glyph 1472" in out
        assert f"{ROWS} embedding rows" in out and f"({'ByT5' if layout != 'original layout' else 'byt5'}" in out
        assert ("image_encoder:" in out and "feature_extractor:" in out) == (task == "i2v")
        assert ("variant 480p" in out or "variants: 480p" in out) == (layout != "diffusers layout")
    assert main(["inspect", str(original)]) == 0
    out = capsys.readouterr().out
    assert f"transformer ({VARIANT[task]}): {original / 'transformer' / VARIANT[task]}" in out
    assert "a vision tower and LM head are not read" in out and "shift 5.0" in out and "scale 6.0" in out


@pytest.fixture
def both(folders, tmp_path):
    """An official release holding both 480p variants (and SigLIP)."""
    _, i2v, _ = folders("i2v")
    _, t2v, _ = folders("t2v")
    root = tmp_path / "ckpts"
    shutil.copytree(i2v, root)
    shutil.copytree(t2v / "transformer" / "480p_t2v", root / "transformer" / "480p_t2v")
    return root


def test_release_variants_on_the_command_line(both, tmp_path, capsys):
    assert main(["inspect", str(both)]) == 0
    out = capsys.readouterr().out
    assert "text-to-video and image-to-video" in out and "variants: 480p_t2v, 480p_i2v" in out
    assert "transformer (480p_t2v):" in out and "transformer (480p_i2v):" in out and "image_encoder:" in out
    assert out.count("every parameter filled exactly once") == 6
    # A variant the folder lacks: one line naming those present (before anything is written).
    assert main(["convert", str(both), str(tmp_path / "out"), "--variant", "720p_t2v"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vidax: error: ") and err.count("\n") == 1, err
    assert "720p_t2v transformer is not in this folder (found: 480p_t2v, 480p_i2v)" in err
    assert not (tmp_path / "out").exists()
    # Without its SigLIP image encoder the release still converts (and runs) text-to-video only.
    shutil.rmtree(both / "vision_encoder")
    assert main(["inspect", str(both)]) == 1
    captured = capsys.readouterr()
    assert "transformer (480p_i2v): does not match its configuration" in captured.out
    assert "vision_encoder/siglip" in captured.out and "FLUX.1-Redux-dev" in captured.out
    assert "will not load" in captured.err and captured.out.count("every parameter filled exactly once") == 4
    assert main(["convert", str(both), str(tmp_path / "i2v"), "--variant", "480p_i2v"]) == 2
    assert "vision_encoder/siglip" in capsys.readouterr().err and not (tmp_path / "i2v").exists()
    assert main(["convert", str(both), str(tmp_path / "t2v"), "--variant", "480p_t2v", "--dtype", "float32"]) == 0
    assert json.loads((tmp_path / "t2v" / "vidax_index.json").read_text())["variant"] == "480p_t2v"


def test_variant_is_refused_where_it_chooses_nothing(folders, tmp_path, capsys):
    diffusers, _, _ = folders("t2v")
    assert main(["convert", str(diffusers), str(tmp_path / "out"), "--variant", "480p_t2v"]) == 2
    assert "holds one transformer" in capsys.readouterr().err and not (tmp_path / "out").exists()
    with pytest.raises(SystemExit) as e:  # argparse's own refusal: the family's variants are the choices
        main(["convert", str(diffusers), str(tmp_path / "out"), "--variant", "1080p"])
    assert e.value.code == 2 and "invalid choice: '1080p'" in capsys.readouterr().err
    fam, demo, task = registry.find_demo("wan")  # a family without the setting refuses the flag
    wan = demo.write(tmp_path / "wan", task)
    assert main(["convert", str(wan), str(tmp_path / "out"), "--variant", "480p_t2v"]) == 2
    assert "--variant: not used by Wan" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_a_missing_part_or_tensor_is_named_and_nothing_is_written(folders, tmp_path, capsys, monkeypatch):
    diffusers, original, _ = folders("t2v")
    broken = tmp_path / "broken"
    shutil.copytree(diffusers, broken)
    (broken / "text_encoder_2" / "config.json").unlink()
    assert main(["inspect", str(broken)]) == 1
    assert "missing text_encoder_2/config.json" in capsys.readouterr().out
    # The release's glyph weights without a tensor: inspect and convert name it.
    release = tmp_path / "release"
    shutil.copytree(original, release)
    pt = release / "text_encoder" / "Glyph-SDXL-v2" / "checkpoints" / "byt5_model.pt"
    state = torch.load(pt, weights_only=True)
    del state["block.1.layer.0.SelfAttention.k.weight"]
    torch.save(state, pt)
    assert main(["inspect", str(release)]) == 1
    out = capsys.readouterr().out
    assert "text_encoder_2: " in out and "block.1.layer.0.SelfAttention.k.weight" in out
    with pytest.raises(CheckpointError, match=r"missing keys \(1\):\n    block\.1\.layer\.0\.SelfAttention\.k\.weight"):
        convert_checkpoint(release, tmp_path / "never")
    assert main(["convert", str(release), str(tmp_path / "never")]) == 2
    assert "would not load" in capsys.readouterr().err
    assert not (tmp_path / "never").exists() and not list(tmp_path.glob(".never*"))
    (tmp_path / "exists").mkdir()
    with pytest.raises(FileExistsError, match="choose a new output folder"):
        convert_checkpoint(diffusers, tmp_path / "exists")

    # The disk fills up after the transformer and VAE are written: the error names dst, nothing is left.
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(hconvert, "write_encoder", full)
    assert main(["convert", str(diffusers), str(tmp_path / "full")]) == 2
    assert f"{tmp_path / 'full'}: writing the converted checkpoint failed (No space left" in capsys.readouterr().err
    assert not (tmp_path / "full").exists() and not list(tmp_path.glob(".full*"))
