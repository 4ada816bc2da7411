"""Sharding rules of the LTX-Video transformer, and the mesh sizes it can run.

Megatron 1D tensor parallelism: ``heads`` (q/k/v output features of both attentions, their
``to_out`` input features and the across-heads QK-RMSNorm scales) and ``mlp`` (FFN hidden width)
split over ``tensor``; the model width ``embed`` and everything outside the blocks (``proj_in``,
timestep and caption embedders, AdaLN tables, head) replicated. Activations: ``batch`` over
``data`` (CFG halves, prompts), ``tokens`` over ``sequence`` (Ulysses; the text keys of the
cross-attention are not split).
"""

from __future__ import annotations

from jax.sharding import Mesh

from vidax.core.sharding import DATA, SEQUENCE, TENSOR, ShardingRules, axis_size, check_divisible, divisors
from vidax.models.ltx.config import LTXVideoTransformerConfig

LTX_RULES = ShardingRules.of({
    # weights (transformer_specs)
    "layers": None,
    "embed": None,
    "heads": TENSOR,
    "mlp": TENSOR,
    # activations
    "batch": DATA,
    "tokens": SEQUENCE,
})


def check_parallel(cfg: LTXVideoTransformerConfig, mesh: Mesh | None, rules: ShardingRules = LTX_RULES,
                   batch: int | None = None) -> None:
    """Check that ``cfg`` (and a batch) can run on ``mesh`` under ``rules``, before anything is traced or loaded.

    Any sp runs: video tokens are padded to a multiple of sp (padded keys masked), and where sp does
    not divide the heads per tensor shard, self-attention all-gathers keys and values instead of
    Ulysses' ``all_to_all`` (:func:`vidax.core.parallel.sequence_mode`).

    Raises:
      ValueError: ``heads`` and ``mlp`` on different mesh axes; tp does not divide the head count (32 in
        every release: tp 1, 2, 4, 8, 16, 32); dp does not divide ``batch`` (lists the valid dp).
    """
    if mesh is None:
        return
    rules.check_mesh(mesh)
    if rules.mesh_axes("heads") != rules.mesh_axes("mlp"):
        raise ValueError("LTX-Video blocks reduce attention and FFN outputs over one tensor axis; rules map heads -> "
                         f"{rules.mesh_axes('heads')!r} but mlp -> {rules.mesh_axes('mlp')!r}")
    tp = axis_size(mesh, rules.mesh_axes("heads"))
    check_divisible("attention heads of this LTX-Video transformer (Megatron splits whole heads)",
                    cfg.num_attention_heads, tp, "tp")
    dp = axis_size(mesh, rules.mesh_axes("batch"))
    if batch is not None and batch % dp:
        raise ValueError(f"dp={dp} does not divide the transformer batch of {batch} (with guidance: 2 x prompts); "
                         "valid dp: " + ", ".join(map(str, divisors(batch))))
