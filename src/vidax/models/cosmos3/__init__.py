"""Cosmos3 (Nano and Edge): the omnimodal Mixture-of-Transformers video generator (``Cosmos3OmniPipeline``)."""
