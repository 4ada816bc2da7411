"""Cosmos3 (Nano, Edge): the omnimodal Mixture-of-Transformers, text- and image-to-video."""
