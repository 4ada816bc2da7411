"""Sharding rules of LTX-2's audio-video transformer and the mesh sizes it can run.

Megatron 1D tensor parallelism over ``tensor``, both streams, every block (:func:`transformer_specs` axes):

* ``heads``: the output features of ``to_q`` / ``to_k`` / ``to_v`` (and their biases, the per-feature q/k RMSNorm
  scales and the ``to_gate_logits`` rows of ``gated_attn``), the input features of ``to_out`` (row-parallel, its bias
  added once after the ``psum``) of all six attentions: video self (``attn1``, ``num_attention_heads``), audio self
  (``audio_attn1``), text cross (``attn2``, ``audio_attn2``), audio->video and video->audio (both with the audio
  head count). The q/k RMSNorm runs across all heads, so its mean of squares is a ``psum`` over ``tensor``.
* ``mlp``: the hidden width (4 x) of both feed-forwards (``proj_in`` column-, ``proj_out`` row-parallel).

Everything else is replicated: the AdaLN tables (per block and global), the timestep / prompt / cross-attention
embedders, ``proj_in`` / ``proj_out``, the caption projections and the keyframe embedding.

Activations: ``batch`` over ``data`` (the guidance passes: CFG, STG, modality, prompts); the video tokens and the
audio tokens both over ``sequence`` (DeepSpeed-Ulysses): each stream is zero-padded to a multiple of sp (the padded
keys masked in every attention that reads them, their outputs dropped), split everywhere but inside attention, where
an ``all_to_all`` trades the token split for a head split (``attn1`` with the video heads; ``audio_attn1`` and both
cross-modal attentions with the audio heads: the cross-modal queries and keys come from the two split streams). Where
sp does not divide a head count per tensor shard, that attention all-gathers keys and values over ``sequence``
instead (:func:`vidax.core.parallel.sequence_mode`). The text cross-attentions need no collective (their keys, the
text, are replicated over ``sequence``).
"""

from __future__ import annotations

from jax.sharding import Mesh

from vidax.core.offload import block_placement
from vidax.core.sharding import DATA, SEQUENCE, TENSOR, ShardingRules, axis_size, check_divisible, divisors
from vidax.models.ltx2.config import LTX2TransformerConfig

LTX2_RULES = ShardingRules.of({
    # weights (transformer_specs)
    "layers": None,
    "embed": None,
    "heads": TENSOR,
    "mlp": TENSOR,
    # activations
    "batch": DATA,
    "tokens": SEQUENCE,
})


def check_parallel(cfg: LTX2TransformerConfig, mesh: Mesh | None, rules: ShardingRules = LTX2_RULES,
                   batch: int | None = None) -> None:
    """Check that ``cfg`` (and a transformer batch) can run on ``mesh`` under ``rules``, before anything is traced
    or loaded.

    Raises:
      ValueError: ``heads`` and ``mlp`` on different mesh axes; tp does not divide the video or the audio head count
        (32 and 32 in LTX-2.x: tp 1, 2, 4, 8, 16, 32) or an FFN width; a rule naming a mesh axis the mesh lacks; dp
        does not divide ``batch`` (the valid dp listed).
    """
    if mesh is None:
        return
    rules.check_mesh(mesh)
    axes = {name: rules.mesh_axes(name) for name in ("heads", "mlp")}
    if len(set(axes.values())) != 1:
        raise ValueError(f"LTX-2 blocks reduce attention and FFN outputs over one tensor axis; rules map {axes}")
    tp = axis_size(mesh, axes["heads"])
    check_divisible("video attention heads of this LTX-2 transformer", cfg.num_attention_heads, tp, "tp")
    check_divisible("audio attention heads of this LTX-2 transformer", cfg.audio_num_attention_heads, tp, "tp")
    check_divisible("video FFN width (4 x inner_dim) of this LTX-2 transformer", 4 * cfg.inner_dim, tp, "tp")
    check_divisible("audio FFN width (4 x audio_inner_dim) of this LTX-2 transformer", 4 * cfg.audio_inner_dim, tp,
                    "tp")
    dp = axis_size(mesh, rules.mesh_axes("batch"))
    if batch is not None and batch % dp:
        raise ValueError(f"dp={dp} does not divide the transformer batch of {batch} (the guidance passes times the "
                         "prompts); valid dp: " + ", ".join(map(str, divisors(batch))))


def param_shardings(cfg: LTX2TransformerConfig, mesh: Mesh | None, offload_chunk: int | None = None,
                    block_loop: str = "scan", rules: ShardingRules = LTX2_RULES):
    """The loader's ``shardings=`` (``load_transformer(folder, dtype, shardings=...)``): every leaf placed once,
    already sharded on ``mesh``; with ``offload_chunk`` (or ``block_loop="host"``) the stacked blocks read straight
    into chunks (:func:`vidax.core.offload.block_placement`), then :func:`vidax.models.ltx2.block_loop.make_forward`
    takes the loaded tree as it is. None on one device with the blocks stacked.

    Raises:
      ValueError: as :func:`check_parallel`; a bad ``offload_chunk`` or ``block_loop``.
    """
    from vidax.models.ltx2.block_loop import plans_for

    check_parallel(cfg, mesh, rules)
    return block_placement(plans_for(cfg, offload_chunk, block_loop), mesh, rules)


__all__ = ["LTX2_RULES", "check_parallel", "param_shardings"]
