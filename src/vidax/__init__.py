"""vidax: a JAX inference engine for open video generation models.

The package never imports PyTorch. See README.md and docs/design.md.
"""

__version__ = "0.1.0"
