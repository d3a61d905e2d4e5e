"""Build transformers' own causal language models from a config, with random weights, and train them a step.

Nothing is downloaded: every model is made from a config (`AutoModelForCausalLM.from_config`) with
random initialisation, on the CPU. The training step is the loop most people write:

    loss = model(input_ids=x, labels=x).loss     # under torch.autocast(bfloat16) for "autocast"
    loss.backward()
    optimizer.step()                             # torch.optim.AdamW, as PyTorch picks it for the device
    optimizer.zero_grad()

Precisions ("recipes" in calc): "fp32-full" (everything fp32) and "autocast" (fp32 weights, gradients
and AdamW state; the forward under torch.autocast in bfloat16). Checkpointing: transformers'
`activation_checkpointing_enable()` (gradient_checkpointing_enable before) with its defaults:
non-reentrant torch.utils.checkpoint around each decoder layer, calc's "full" recomputation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.profiler import record_function

# The model classes measured, by transformers' model_type.
MODEL_TYPES = ("llama", "mistral", "qwen2", "gpt2", "mixtral", "qwen2_moe")
PRECISIONS = ("fp32-full", "autocast")
ATTENTIONS = ("eager", "sdpa")
CHECKPOINTING = ("none", "full")


@dataclass(frozen=True)
class Model:
    """A transformers config, as the few numbers that differ between the measured shapes."""

    model_type: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    extra: tuple[tuple[str, object], ...] = field(default=())  # further config fields, as (name, value)

    def config(self) -> dict:
        """The config.json a user would have (only the fields that set the shape)."""
        if self.model_type == "gpt2":
            if self.kv_heads != self.heads:
                raise ValueError("GPT-2 has no grouped-query attention")
            cfg = {
                "model_type": "gpt2",
                "n_layer": self.layers,
                "n_embd": self.hidden,
                "n_head": self.heads,
                "n_inner": self.ffn,
                "vocab_size": self.vocab,
                "n_positions": 1024,
            }
        else:
            cfg = {
                "model_type": self.model_type,
                "num_hidden_layers": self.layers,
                "hidden_size": self.hidden,
                "num_attention_heads": self.heads,
                "num_key_value_heads": self.kv_heads,
                "intermediate_size": self.ffn,
                "vocab_size": self.vocab,
                "max_position_embeddings": 1024,
                "tie_word_embeddings": False,
            }
        cfg.update(dict(self.extra))
        return cfg

    @property
    def moe(self) -> dict:
        """The mixture of experts' fields, by calc's names (empty for a dense model)."""
        extra = dict(self.extra)
        if self.model_type == "mixtral":
            return {"experts": extra["num_local_experts"], "experts-per-token": extra["num_experts_per_tok"]}
        if self.model_type == "qwen2_moe":
            return {
                "experts": extra["num_experts"],
                "experts-per-token": extra["num_experts_per_tok"],
                "expert-ffn": extra["moe_intermediate_size"],
                "shared-expert-ffn": extra["shared_expert_intermediate_size"],
            }
        return {}


def mixtral(layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int, experts: int, k: int) -> Model:
    """A MixtralForCausalLM: E experts of width ffn, top-k (no router loss: output_router_logits stays off)."""
    return Model("mixtral", layers, hidden, heads, kv_heads, ffn, vocab,
                 (("num_local_experts", experts), ("num_experts_per_tok", k)))  # fmt: skip


def qwen2_moe(layers, hidden, heads, kv_heads, ffn, vocab, experts: int, k: int, shared: int) -> Model:
    """A Qwen2MoeForCausalLM with every layer sparse: E experts of width ffn, top-k, a gated shared expert."""
    extra = (("num_experts", experts), ("num_experts_per_tok", k), ("moe_intermediate_size", ffn),
             ("shared_expert_intermediate_size", shared), ("decoder_sparse_step", 1),
             ("mlp_only_layers", []))  # fmt: skip
    return Model("qwen2_moe", layers, hidden, heads, kv_heads, ffn, vocab, extra)


def build(model: Model, attention: str, checkpointing: str, seed: int = 0) -> torch.nn.Module:
    """The model with random weights, in training mode, fp32 on the CPU."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(model.config())
    cfg = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    cfg.use_cache = False
    torch.manual_seed(seed)
    net = AutoModelForCausalLM.from_config(cfg, attn_implementation=attention, dtype=torch.float32)
    if checkpointing == "full":
        net.activation_checkpointing_enable()  # gradient_checkpointing_enable() before transformers 5
    net.train()
    return net


def make_optimizer(net: torch.nn.Module) -> torch.optim.Optimizer:
    """AdamW with PyTorch's own choice of implementation (single-tensor on the CPU, foreach on CUDA)."""
    return torch.optim.AdamW(net.parameters(), lr=1e-3)


def train_step(net, optimizer, tokens: torch.Tensor, precision: str) -> float:
    """One step of the usual loop; the labels are the inputs, which the model shifts itself."""
    device = tokens.device.type
    with record_function("forward"):
        if precision == "autocast":
            with torch.autocast(device, dtype=torch.bfloat16):
                loss = net(input_ids=tokens, labels=tokens).loss
        else:
            loss = net(input_ids=tokens, labels=tokens).loss
    with record_function("backward"):
        loss.backward()
    with record_function("optimizer"):
        optimizer.step()
        optimizer.zero_grad()
    return loss.item()


def tokens(vocab: int, seq: int, micro_batch: int, seed: int) -> torch.Tensor:
    return torch.randint(vocab, (micro_batch, seq), generator=torch.Generator().manual_seed(seed))
