"""Reference material for the Qwen2.5-VL tests: the released chat template (restated, never in the product)."""

# The chat template of Qwen/Qwen2.5-VL-7B-Instruct (chat_template.json; tokenizer_config.json holds the same), revision
# cc594898137f460bfe9f0759e9844b3ce807cfb5, as a public renderer-validation record quotes it (with the sha256 of its
# JSON string form, checked in test_qwen2_tokenizer.py so that an edit here cannot go unnoticed).
QWEN2_5_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}"
    "<|im_end|>\n{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in "
    "content or 'image_url' in content %}{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}"
    "Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] "
    "== 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}"
    "Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content "
    "%}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}"
    "<|im_start|>assistant\n{% endif %}"
)
TEMPLATE_JSON_SHA256 = "4df95d05455c2a6f762616492bba63d0f9bef904ef47daabad35f5715d6d2e4e"
