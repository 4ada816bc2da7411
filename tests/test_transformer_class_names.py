"""Every family's transformer configuration refuses another family's ``config.json`` by its ``_class_name``.

A folder whose ``model_index.json`` names one family's pipeline but holds another family's transformer (a hand-edited
index, two downloads merged) is routed by the registry to the first family's loader; without this check the other
family's keys fail as unrelated value errors (``patch_size=1 should be a list``) far from the cause.
"""

import pytest

from vidax.models.cogvideox.config import CogVideoXTransformerConfig
from vidax.models.cosmos3.config import Cosmos3TransformerConfig
from vidax.models.cosmos_predict25.config import CosmosTransformerConfig
from vidax.models.hunyuanvideo.config import HunyuanVideoTransformerConfig
from vidax.models.hunyuanvideo15.config import HunyuanVideo15TransformerConfig
from vidax.models.ltx.config import LTXVideoTransformerConfig
from vidax.models.ltx2.config import LTX2TransformerConfig
from vidax.models.wan.config import WanTransformerConfig

CONFIGS = {
    "WanTransformer3DModel": WanTransformerConfig,
    "CogVideoXTransformer3DModel": CogVideoXTransformerConfig,
    "LTXVideoTransformer3DModel": LTXVideoTransformerConfig,
    "HunyuanVideoTransformer3DModel": HunyuanVideoTransformerConfig,
    "HunyuanVideo15Transformer3DModel": HunyuanVideo15TransformerConfig,
    "CosmosTransformer3DModel": CosmosTransformerConfig,
    "Cosmos3OmniTransformer": Cosmos3TransformerConfig,
    "LTX2VideoTransformer3DModel": LTX2TransformerConfig,
}


@pytest.mark.parametrize("own", CONFIGS)
def test_transformer_config_refuses_other_families_class(own):
    cls = CONFIGS[own]
    cls.from_dict({"_class_name": own})  # its own class (every other key at its default) is accepted
    for other in CONFIGS:
        if other != own:
            with pytest.raises(ValueError, match=f"{other}.*{own}"):
                cls.from_dict({"_class_name": other})
