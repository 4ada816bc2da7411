"""Cosmos3 (Nano and Edge): the omnimodal Mixture-of-Transformers video generator (diffusers ``Cosmos3OmniPipeline``)."""
