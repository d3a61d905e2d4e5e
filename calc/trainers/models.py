"""The model a trainer config names (a Hub id), matched to calc's preset of the same shape where one is.

Only ids whose config.json has the preset's shape are listed: a checkpoint's instruct or chat version shares
its base's config; Llama 3 8B and 70B differ from 3.1's only in rope scaling and context (no byte of a
training step). Any other id is refused where no --preset or --hf-config is given with it.
"""

from __future__ import annotations

# preset -> the Hub ids (owner/name, compared without case) whose config has its shape
HUB_IDS = {
    "llama-7b": ("huggyllama/llama-7b", "baffo32/decapoda-research-llama-7B-hf"),
    "llama-2-13b": ("meta-llama/Llama-2-13b-hf", "meta-llama/Llama-2-13b-chat-hf", "NousResearch/Llama-2-13b-hf"),
    "llama-2-70b": ("meta-llama/Llama-2-70b-hf", "meta-llama/Llama-2-70b-chat-hf"),
    "llama-3.1-8b": ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Meta-Llama-3.1-8B",
                     "meta-llama/Meta-Llama-3.1-8B-Instruct", "meta-llama/Meta-Llama-3-8B",
                     "meta-llama/Meta-Llama-3-8B-Instruct", "NousResearch/Meta-Llama-3-8B",
                     "NousResearch/Meta-Llama-3-8B-Instruct", "NousResearch/Meta-Llama-3.1-8B",
                     "unsloth/Meta-Llama-3.1-8B", "unsloth/Llama-3.1-8B"),
    "llama-3.1-70b": ("meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-70B-Instruct",
                      "meta-llama/Meta-Llama-3-70B", "meta-llama/Meta-Llama-3-70B-Instruct",
                      "meta-llama/Llama-3.3-70B-Instruct", "NousResearch/Meta-Llama-3.1-70B"),
    "llama-3.1-405b": ("meta-llama/Llama-3.1-405B", "meta-llama/Llama-3.1-405B-Instruct"),
    "llama-3.2-1b": ("meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.2-1B-Instruct", "NousResearch/Llama-3.2-1B",
                     "unsloth/Llama-3.2-1B"),
    "llama-3.2-3b": ("meta-llama/Llama-3.2-3B", "meta-llama/Llama-3.2-3B-Instruct"),
    "mistral-7b": ("mistralai/Mistral-7B-v0.1", "mistralai/Mistral-7B-Instruct-v0.1"),
    "mixtral-8x7b": ("mistralai/Mixtral-8x7B-v0.1", "mistralai/Mixtral-8x7B-Instruct-v0.1"),
    "qwen2.5-7b": ("Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-7B-Instruct"),
    "qwen2.5-72b": ("Qwen/Qwen2.5-72B", "Qwen/Qwen2.5-72B-Instruct"),
    "qwen3-8b": ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B-Base"),
    "qwen3-32b": ("Qwen/Qwen3-32B",),
    "qwen3-30b-a3b": ("Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B-Base"),
    "qwen3-235b-a22b": ("Qwen/Qwen3-235B-A22B",),
    "gemma-2-9b": ("google/gemma-2-9b", "google/gemma-2-9b-it"),
    "gemma-2-27b": ("google/gemma-2-27b", "google/gemma-2-27b-it"),
    "phi-4": ("microsoft/phi-4",),
    "gpt2": ("openai-community/gpt2", "gpt2"),
    "granite-3.3-8b": ("ibm-granite/granite-3.3-8b-base", "ibm-granite/granite-3.3-8b-instruct"),
    "gpt-oss-20b": ("openai/gpt-oss-20b",),
    "olmo-2-13b": ("allenai/OLMo-2-1124-13B", "allenai/OLMo-2-1124-13B-Instruct"),
    "smollm3-3b": ("HuggingFaceTB/SmolLM3-3B", "HuggingFaceTB/SmolLM3-3B-Base"),
    "deepseek-v3": ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V3-Base"),
}
PRESET_OF = {hub.lower(): preset for preset, ids in HUB_IDS.items() for hub in ids}


def preset_of(model: str) -> str | None:
    """The preset whose shape the Hub id `model` has, or None."""
    return PRESET_OF.get(model.strip().strip("/").lower())
