"""HunyuanVideo (13B text-to-video and image-to-video): transformer, VAE, pipelines."""
