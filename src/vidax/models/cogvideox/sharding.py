"""Sharding rules of the CogVideoX transformer, and the mesh sizes it can run.

Megatron 1D tensor parallelism, as for Wan: ``heads`` (q/k/v output features, ``to_out`` input
features) and ``mlp`` (FFN hidden width) split over ``tensor``. CogVideoX's per-token q/k
LayerNorms normalise each head on its own (over ``head_dim``), so their parameters are
replicated and need no collective. Unlike Wan, every block carries two AdaLN projections
``time_embed_dim -> 6 dim`` (``norm1``/``norm2 .linear``, float32): about 3 GB for the 5B model,
more than its attention weights per device at tp = 4. Their output features (``adaln``) are
split over ``tensor`` too and the six modulation vectors are gathered inside the block (a
``(B, 6 dim)`` exchange per projection). The model width ``embed`` and everything outside the
blocks (patch, text and timestep embedders, final norms, head) are replicated.

Activations: ``batch`` over ``data`` (CFG halves, prompts); ``tokens`` over ``sequence``
(DeepSpeed-Ulysses): the *joint* sequence of text then video tokens is split, see
:mod:`vidax.models.cogvideox.transformer`.
"""

from __future__ import annotations

from jax.sharding import Mesh

from vidax.core.sharding import DATA, SEQUENCE, TENSOR, ShardingRules, axis_size, check_divisible, divisors
from vidax.models.cogvideox.config import CogVideoXTransformerConfig

COGVIDEOX_RULES = ShardingRules.of({
    # weights (transformer_specs)
    "layers": None,
    "embed": None,
    "heads": TENSOR,
    "mlp": TENSOR,
    "adaln": TENSOR,
    # activations
    "batch": DATA,
    "tokens": SEQUENCE,
})


def check_parallel(cfg: CogVideoXTransformerConfig, mesh: Mesh | None, rules: ShardingRules = COGVIDEOX_RULES,
                   batch: int | None = None) -> None:
    """Check that ``cfg`` (and a batch) can run on ``mesh`` under ``rules``, before anything is traced or loaded.

    Any sp runs: the joint text + video sequence is padded to a multiple of sp (padded keys
    masked), and where sp does not divide the heads per tensor shard, self-attention all-gathers
    keys and values instead of Ulysses' ``all_to_all`` (:func:`vidax.core.parallel.sequence_mode`).

    Raises:
      ValueError: tp does not divide the head count (lists the valid tp: for CogVideoX-2b's 30
        heads 1, 2, 3, 5, 6, 10, 15, 30; for the 48 heads of the 5B models 1, 2, 3, 4, 6, 8, 12,
        16, 24, 48); ``heads``, ``mlp`` and ``adaln`` on different mesh axes; dp does not divide
        ``batch`` (lists the valid dp).
    """
    if mesh is None:
        return
    rules.check_mesh(mesh)
    axes = {name: rules.mesh_axes(name) for name in ("heads", "mlp", "adaln")}
    if len(set(axes.values())) != 1:
        raise ValueError("CogVideoX blocks reduce attention and FFN outputs and gather the AdaLN vectors over one "
                         f"tensor axis; rules map {axes}")
    tp = axis_size(mesh, axes["heads"])
    check_divisible("attention heads of this CogVideoX transformer (Megatron splits whole heads)",
                    cfg.num_attention_heads, tp, "tp")
    # Implied by the head count (both are multiples of dim = heads * head_dim); checked for custom rules.
    check_divisible("FFN width of this CogVideoX transformer", cfg.ff_inner_dim, tp, "tp")
    check_divisible("AdaLN modulation features (6 x dim) of this CogVideoX transformer", 6 * cfg.dim, tp, "tp")
    dp = axis_size(mesh, rules.mesh_axes("batch"))
    if batch is not None and batch % dp:
        raise ValueError(f"dp={dp} does not divide the transformer batch of {batch} (with guidance: 2 x prompts); "
                         "valid dp: " + ", ".join(map(str, divisors(batch))))
