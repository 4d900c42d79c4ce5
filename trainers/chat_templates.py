"""Each bundled family's chat template and special tokens, as its published tokenizer has them, so a
built (`random:`) model's prompts take as many tokens as the real model's: the default system prompt
Qwen2.5, Llama 3 and SmolLM3 insert, Qwen3's and DeepSeek-R1's thinking tags, Gemma's turns.

The templates are the published ones (tokenizer_config.json's chat_template) without their tool-calling
branches, which no task here uses: a conversation of system, user and assistant messages renders
exactly as with the real tokenizer. A model's config names its family under "_chat_family".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChatFamily:
    template: str
    pad: str
    eos: str
    bos: str | None = None
    specials: tuple[str, ...] = ()  # more special tokens, besides pad, eos and bos
    plain: tuple[str, ...] = ()  # single tokens that are not special (decoding keeps them), e.g. <think>

    def special_tokens(self) -> list[str]:
        return list(dict.fromkeys([self.pad, self.eos, *([self.bos] if self.bos else []), *self.specials]))


# `tiny` only: ChatML without a default system prompt.
CHATML = ChatFamily(
    template=(
        "{% for message in messages %}"
        "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    ),
    pad="<|endoftext|>",
    eos="<|im_end|>",
    specials=("<|im_start|>",),
)

QWEN2_5 = ChatFamily(
    template=r"""
{%- if messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
{%- else %}
    {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant") %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
""",
    pad="<|endoftext|>",
    eos="<|im_end|>",
    specials=("<|im_start|>",),
)

QWEN3 = ChatFamily(
    template=r"""
{%- if messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
""",
    pad="<|endoftext|>",
    eos="<|im_end|>",
    specials=("<|im_start|>",),
    plain=("<think>", "</think>"),
)

_LLAMA3 = r"""
{{- bos_token }}
DATE
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""
_LLAMA3_TOKENS = dict(
    pad="<|finetune_right_pad_id|>",
    eos="<|eot_id|>",
    bos="<|begin_of_text|>",
    specials=("<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|python_tag|>"),
)
# Llama 3.1 dates its system prompt 26 Jul 2024; Llama 3.2, today.
LLAMA3_1 = ChatFamily(
    template=_LLAMA3.replace(
        "DATE",
        '{%- if not date_string is defined %}\n    {%- set date_string = "26 Jul 2024" %}\n{%- endif %}',
    ),
    **_LLAMA3_TOKENS,
)
LLAMA3_2 = ChatFamily(
    template=_LLAMA3.replace(
        "DATE",
        "{%- if not date_string is defined %}\n"
        "    {%- if strftime_now is defined %}\n"
        '        {%- set date_string = strftime_now("%d %b %Y") %}\n'
        "    {%- else %}\n"
        '        {%- set date_string = "26 Jul 2024" %}\n'
        "    {%- endif %}\n"
        "{%- endif %}",
    ),
    **_LLAMA3_TOKENS,
)

GEMMA3 = ChatFamily(
    template=r"""{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {{- message['content'] | trim -}}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
""",
    pad="<pad>",
    eos="<eos>",
    bos="<bos>",
    specials=("<start_of_turn>", "<end_of_turn>"),
)

MISTRAL_V3 = ChatFamily(
    template=r"""
{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
        {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif %}
    {%- set ns.index = ns.index + 1 %}
{%- endfor %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
""",
    pad="<unk>",  # Mistral has no pad token; <unk> (id 0) is never a prompt's
    eos="</s>",
    bos="<s>",
    specials=("[INST]", "[/INST]"),
)

PHI4 = ChatFamily(
    template=(
        "{% for message in messages %}"
        "{% if message['role'] == 'system' and 'tools' in message and message['tools'] is not none %}"
        "{{ '<|' + message['role'] + '|>' + message['content'] + '<|tool|>' + message['tools'] + '<|/tool|>' + '<|end|>' }}"
        "{% else %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}{% endif %}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}"
    ),
    pad="<|endoftext|>",
    eos="<|endoftext|>",
    specials=("<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|tool|>", "<|/tool|>"),
)

_SMOLLM_THINK = (
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face. Your role as an assistant involves "
    "thoroughly exploring questions through a systematic thinking process before providing the final precise "
    "and accurate solutions. This requires engaging in a comprehensive cycle of analysis, summarizing, "
    "exploration, reassessment, reflection, backtracking, and iteration to develop well-considered thinking "
    "process. Please structure your response into two main sections: Thought and Solution using the specified "
    "format: <think> Thought section </think> Solution section. In the Thought section, detail your reasoning "
    "process in steps. Each step should include detailed considerations such as analysing questions, "
    "summarizing relevant findings, brainstorming new ideas, verifying the accuracy of the current steps, "
    "refining any errors, and revisiting previous steps. In the Solution section, based on various attempts, "
    "explorations, and reflections from the Thought section, systematically present the final solution that "
    "you deem correct. The Solution section should be logical, accurate, and concise and detail necessary "
    "steps needed to reach the conclusion."
)
# SmolLM3's header closes with <|im_end|> only in its tools branch (left out here): without tools the
# user turn follows the system text directly, as the published template renders it.
SMOLLM3 = ChatFamily(
    template=r"""
{%- if enable_thinking is not defined -%}
{%- set enable_thinking = true -%}
{%- endif -%}
{%- if enable_thinking -%}
  {%- set reasoning_mode = "/think" -%}
{%- else -%}
  {%- set reasoning_mode = "/no_think" -%}
{%- endif -%}
{{- "<|im_start|>system\n" -}}
{%- if messages[0].role == "system" -%}
  {%- set system_message = messages[0].content -%}
  {%- if "/no_think" in system_message -%}
    {%- set reasoning_mode = "/no_think" -%}
  {%- elif "/think" in system_message -%}
    {%- set reasoning_mode = "/think" -%}
  {%- endif -%}
  {%- set custom_instructions = system_message.replace("/no_think", "").replace("/think", "").rstrip() -%}
{%- endif -%}
{%- if "/system_override" in system_message -%}
  {{- custom_instructions.replace("/system_override", "").rstrip() -}}
  {{- "<|im_end|>\n" -}}
{%- else -%}
  {{- "## Metadata\n\n" -}}
  {{- "Knowledge Cutoff Date: June 2025\n" -}}
  {%- set today = strftime_now("%d %B %Y") -%}
  {{- "Today Date: " ~ today ~ "\n" -}}
  {{- "Reasoning Mode: " + reasoning_mode + "\n\n" -}}
  {{- "## Custom Instructions\n\n" -}}
  {%- if custom_instructions -%}
    {{- custom_instructions + "\n\n" -}}
  {%- elif reasoning_mode == "/think" -%}
    {{- "THINK_PERSONA\n\n" -}}
  {%- else -%}
    {{- "You are a helpful AI assistant named SmolLM, trained by Hugging Face.\n\n" -}}
  {%- endif -%}
{%- endif -%}
{%- for message in messages -%}
    {%- set content = message.content if message.content is string else "" -%}
    {%- if message.role == "user" -%}
        {{ "<|im_start|>" + message.role + "\n"  + content + "<|im_end|>\n" }}
    {%- elif message.role == "assistant" -%}
        {%- if reasoning_mode == "/think" -%}
            {{ "<|im_start|>assistant\n" + content.lstrip("\n") + "<|im_end|>\n" }}
        {%- else -%}
            {{ "<|im_start|>assistant\n" + "<think>\n\n</think>\n" + content.lstrip("\n") + "<|im_end|>\n" }}
        {%- endif -%}
    {%- elif message.role == "tool" -%}
    {{ "<|im_start|>" + "user\n"  + content + "<|im_end|>\n" }}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {%- if reasoning_mode == "/think" -%}
        {{ "<|im_start|>assistant\n" }}
    {%- else -%}
        {{ "<|im_start|>assistant\n" + "<think>\n\n</think>\n"  }}
    {%- endif -%}
{%- endif -%}
""".replace("THINK_PERSONA", _SMOLLM_THINK),
    pad="<|finetune_right_pad_id|>",
    eos="<|im_end|>",
    specials=("<|im_start|>",),
    plain=("<think>", "</think>"),
)

DEEPSEEK_R1 = ChatFamily(
    template=(
        "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
        "{% set ns = namespace(system_prompt='') %}"
        "{%- for message in messages %}{%- if message['role'] == 'system' %}"
        "{% set ns.system_prompt = message['content'] %}{%- endif %}{%- endfor %}"
        "{{bos_token}}{{ns.system_prompt}}"
        "{%- for message in messages %}"
        "{%- if message['role'] == 'user' %}{{'<｜User｜>' + message['content']}}{%- endif %}"
        "{%- if message['role'] == 'assistant' and message['content'] is not none %}"
        "{% set content = message['content'] %}"
        "{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}"
        "{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}"
        "{%- endif %}"
        "{%- endfor -%}"
        "{% if add_generation_prompt %}{{'<｜Assistant｜><think>\\n'}}{% endif %}"
    ),
    pad="<｜end▁of▁sentence｜>",
    eos="<｜end▁of▁sentence｜>",
    bos="<｜begin▁of▁sentence｜>",
    plain=("<｜User｜>", "<｜Assistant｜>", "<think>", "</think>"),
)

FAMILIES = {
    "chatml": CHATML,
    "qwen2.5": QWEN2_5,
    "qwen3": QWEN3,
    "llama3.1": LLAMA3_1,
    "llama3.2": LLAMA3_2,
    "gemma3": GEMMA3,
    "mistral-v0.3": MISTRAL_V3,
    "phi4": PHI4,
    "smollm3": SMOLLM3,
    "deepseek-r1": DEEPSEEK_R1,
}


def family_of(config: dict) -> ChatFamily:
    """The chat family a model config names ("_chat_family"); ChatML where it names none (tiny)."""
    name = config.get("_chat_family", "chatml")
    if name not in FAMILIES:
        raise ValueError(
            f"_chat_family: {name!r} is not a known chat family; use one of {', '.join(sorted(FAMILIES))}"
        )
    return FAMILIES[name]
