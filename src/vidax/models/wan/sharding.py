"""Sharding rules of the Wan2.1 transformer, and the mesh sizes it can run.

Megatron 1D tensor parallelism: ``heads`` (q/k/v output features, ``to_out`` input features,
the QK-norm scales) and ``mlp`` (FFN hidden width) split over ``tensor``; the model width
``embed`` and everything outside the blocks (patch and condition embedders, AdaLN tables, head)
are replicated: they are small next to the blocks, and replicated they need no collective.
Activations: ``batch`` over ``data`` (CFG halves, prompts), ``tokens`` over ``sequence`` (Ulysses).
"""

from __future__ import annotations

from jax.sharding import Mesh

from vidax.core.sharding import DATA, SEQUENCE, TENSOR, ShardingRules, axis_size, check_divisible, divisors
from vidax.models.wan.config import WanTransformerConfig

WAN_RULES = ShardingRules.of({
    # weights (transformer_specs)
    "layers": None,
    "embed": None,
    "embed2": None,
    "heads": TENSOR,
    "mlp": TENSOR,
    # activations
    "batch": DATA,
    "tokens": SEQUENCE,
})


def check_parallel(cfg: WanTransformerConfig, mesh: Mesh | None, rules: ShardingRules = WAN_RULES,
                   batch: int | None = None) -> None:
    """Check that ``cfg`` (and a batch) can run on ``mesh`` under ``rules``, before anything is traced.

    Any sp runs: tokens are padded to a multiple of sp, and where sp does not divide the heads per
    tensor shard, self-attention all-gathers keys/values instead of Ulysses' ``all_to_all``
    (:func:`vidax.core.parallel.sequence_mode`).

    Raises:
      ValueError: tp does not divide the head count (lists the valid tp) or the FFN width, or
        dp does not divide ``batch`` (lists the valid dp).
    """
    if mesh is None:
        return
    tp = axis_size(mesh, rules.mesh_axes("heads"))
    dp = axis_size(mesh, rules.mesh_axes("batch"))
    heads = cfg.num_attention_heads
    check_divisible("attention heads of this Wan transformer (Megatron splits whole heads)", heads, tp, "tp")
    check_divisible("FFN width (ffn_dim) of this Wan transformer", cfg.ffn_dim, axis_size(mesh, rules.mesh_axes("mlp")), "tp")
    if batch is not None and batch % dp:
        raise ValueError(f"dp={dp} does not divide the transformer batch of {batch} (with guidance: 2 x prompts); "
                         f"valid dp: " + ", ".join(map(str, divisors(batch))))
