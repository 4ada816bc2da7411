"""Reference material for the Cosmos3 tests (never in the product): Qwen3-VL-8B-Instruct's chat template restated,
its added tokens, and builders of tiny reference components (tokenizer, transformer, VAE, pipeline)."""

from __future__ import annotations

# The chat template of Qwen/Qwen3-VL-8B-Instruct (the tokenizer diffusers' scripts/convert_cosmos3_to_diffusers.py
# saves with the pipeline), as public repositories quote it. The Cosmos3 pipeline renders a system turn and one
# string user turn with it; the tool branch is kept so that the template is the released one.
QWEN3_VL_CHAT_TEMPLATE = (
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0].role == 'system' %}\n"
    "        {%- if messages[0].content is string %}\n            {{- messages[0].content }}\n        {%- else %}\n"
    "            {%- for content in messages[0].content %}\n                {%- if 'text' in content %}\n"
    "                    {{- content.text }}\n                {%- endif %}\n            {%- endfor %}\n"
    "        {%- endif %}\n        {{- '\\n\\n' }}\n    {%- endif %}\n"
    "    {{- \"# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided "
    "with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n{%- else %}\n    {%- if messages[0].role == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' }}\n        {%- if messages[0].content is string %}\n"
    "            {{- messages[0].content }}\n        {%- else %}\n"
    "            {%- for content in messages[0].content %}\n"
    "                {%- if 'text' in content %}\n                    {{- content.text }}\n"
    "                {%- endif %}\n"
    "            {%- endfor %}\n        {%- endif %}\n        {{- '<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n"
    "{%- set image_count = namespace(value=0) %}\n{%- set video_count = namespace(value=0) %}\n"
    "{%- for message in messages %}\n    {%- if message.role == \"user\" %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' }}\n        {%- if message.content is string %}\n"
    "            {{- message.content }}\n        {%- else %}\n            {%- for content in message.content %}\n"
    "                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}\n"
    "                    {%- set image_count.value = image_count.value + 1 %}\n"
    "                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}\n"
    "                    <|vision_start|><|image_pad|><|vision_end|>\n"
    "                {%- elif content.type == 'video' or 'video' in content %}\n"
    "                    {%- set video_count.value = video_count.value + 1 %}\n"
    "                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}\n"
    "                    <|vision_start|><|video_pad|><|vision_end|>\n                {%- elif 'text' in content %}\n"
    "                    {{- content.text }}\n                {%- endif %}\n            {%- endfor %}\n"
    "        {%- endif %}\n        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"assistant\" %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' }}\n        {%- if message.content is string %}\n"
    "            {{- message.content }}\n        {%- else %}\n            {%- for content_item in message.content %}\n"
    "                {%- if 'text' in content_item %}\n                    {{- content_item.text }}\n"
    "                {%- endif %}\n            {%- endfor %}\n        {%- endif %}\n"
    "        {%- if message.tool_calls %}\n            {%- for tool_call in message.tool_calls %}\n"
    "                {%- if (loop.first and message.content) or (not loop.first) %}\n"
    "                    {{- '\\n' }}\n                {%- endif %}\n                {%- if tool_call.function %}\n"
    "                    {%- set tool_call = tool_call.function %}\n                {%- endif %}\n"
    "                {{- '<tool_call>\\n{\"name\": \"' }}\n                {{- tool_call.name }}\n"
    "                {{- '\", \"arguments\": ' }}\n                {%- if tool_call.arguments is string %}\n"
    "                    {{- tool_call.arguments }}\n                {%- else %}\n"
    "                    {{- tool_call.arguments | tojson }}\n                {%- endif %}\n"
    "                {{- '}\\n</tool_call>' }}\n            {%- endfor %}\n        {%- endif %}\n"
    "        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}\n"
    "        {%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n        {%- endif %}\n        {{- '\\n<tool_response>\\n' }}\n"
    "        {%- if message.content is string %}\n            {{- message.content }}\n        {%- else %}\n"
    "            {%- for content in message.content %}\n"
    "                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}\n"
    "                    {%- set image_count.value = image_count.value + 1 %}\n"
    "                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}\n"
    "                    <|vision_start|><|image_pad|><|vision_end|>\n"
    "                {%- elif content.type == 'video' or 'video' in content %}\n"
    "                    {%- set video_count.value = video_count.value + 1 %}\n"
    "                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}\n"
    "                    <|vision_start|><|video_pad|><|vision_end|>\n                {%- elif 'text' in content %}\n"
    "                    {{- content.text }}\n                {%- endif %}\n            {%- endfor %}\n"
    "        {%- endif %}\n        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n"
)

#: Qwen3-VL's added tokens beyond Qwen2.5-VL's (ids 151665 ... 151668 in the release), none special.
QWEN3_EXTRA_TOKENS = (("<tool_response>", False), ("</tool_response>", False), ("<think>", False),
                      ("</think>", False))


def write_tokenizer(folder, corpus, num_merges=200):
    """A tiny Qwen3-VL-style tokenizer folder (Qwen2 BPE, Qwen2.5-VL's + Qwen3's added tokens, eos <|im_end|>) with
    the released Qwen3-VL chat template."""
    from vidax.encoders.qwen2_tokenizer import QWEN2_5_VL_ADDED_TOKENS, write_qwen2_tokenizer

    return write_qwen2_tokenizer(folder, corpus, num_merges=num_merges,
                                 added_tokens=QWEN2_5_VL_ADDED_TOKENS + QWEN3_EXTRA_TOKENS,
                                 chat_template=QWEN3_VL_CHAT_TEMPLATE)

