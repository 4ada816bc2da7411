"""The LTX-2.5 pipeline loaded with a mesh and with offloading (``LTX2Pipeline.from_pretrained(dp=, tp=, sp=,
offload_chunk=)``: the transformer read already sharded or chunked, run by
:func:`vidax.models.ltx2.block_loop.make_forward`) on 8 simulated CPU devices, against the same folder on one device,
itself at diffusers parity (tests/test_ltx2_pipeline.py): 4 dev steps with CFG + STG + modality isolation + guidance
rescale (the one-row STG / modality passes run on dp 2 and 4, padded). Measured when written (2026-12-04):
dp2 x tp2 x sp2 (block loop "auto": the host loop on CPU) frames 1.1e-06, audio 1.0e-07; dp4 x sp2 with offload
chunk 1 frames 9.5e-07, audio 1.0e-07."""

import numpy as np
import pytest

from tests.test_ltx2_pipeline import FPS, FRAMES, GUIDANCE, NEGATIVE, PROMPT, H, L, W, tiny  # noqa: F401
from vidax.models.ltx2.pipeline import LTX2Pipeline


@pytest.fixture(scope="module")
def one_device(tiny):  # noqa: F811
    kw = dict(height=H, width=W, num_frames=FRAMES, frame_rate=FPS, num_inference_steps=4, **GUIDANCE,
              latents=tiny["latents"], audio_latents=tiny["audio_latents"], max_sequence_length=L, progress=False,
              output_type="float")
    return kw, tiny["ours"](PROMPT, NEGATIVE, **kw)


@pytest.mark.parametrize("dp, tp, sp, chunk", [(2, 2, 2, None), (4, 1, 2, 1)])
def test_pipeline_on_a_mesh_and_offloaded_matches_one_device(tiny, one_device, dp, tp, sp, chunk):  # noqa: F811
    kw, ref = one_device
    pipe = LTX2Pipeline.from_pretrained(tiny["root"] / "model", dtype="float32", dp=dp, tp=tp, sp=sp,
                                        offload_chunk=chunk, progress=False, compile_cache=False)
    out = pipe(PROMPT, NEGATIVE, **kw)
    assert out.metrics["block_loop"] == ("offload" if chunk else "host")  # block_loop "auto": the host loop on CPU
    ev = np.abs(out.frames - ref.frames).max()
    ea = np.abs(out.audio - ref.audio).max() / np.abs(ref.audio).max()
    print(f"dp={dp} tp={tp} sp={sp} chunk={chunk}: frames {ev:.1e}, audio {ea:.1e}")
    assert ev < 1e-5 and ea < 1e-5, (ev, ea)
