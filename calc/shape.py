"""A decoder-only transformer's shape and its exact parameter count."""

from __future__ import annotations

from dataclasses import dataclass, fields

NORMS = ("layer", "rms")
POSITIONS = ("learned", "rope")
# The feed-forward activation as transformers' `hidden_act` names it: gelu_tanh is gelu_pytorch_tanh (one
# fused op), gelu_new the same function written in Python (GPT-2's; six ops, four tensors saved).
ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "gelu_new", "relu")


@dataclass(frozen=True)
class Shape:
    """Everything about a model that its memory depends on."""

    name: str = "custom"
    layers: int = 32  # L, transformer blocks
    hidden: int = 4096  # h, model width
    heads: int = 32  # a, attention (query) heads
    kv_heads: int = 32  # key/value heads; fewer than `heads` is grouped-query attention
    ffn: int = 11008  # feed-forward inner width (of the dense layers, when there are experts)
    vocab: int = 32000  # V
    gated_ffn: bool = True  # SwiGLU: three h x ffn matrices instead of two
    tied: bool = False  # output head shares the token embedding matrix
    norm: str = "rms"  # "layer" (weight + bias) or "rms" (weight only)
    bias: bool = False  # biases on every linear layer (and on an untied head, see head_bias)
    positions: str = "rope"  # "learned" (a context x h table) or "rope" (no parameters)
    context: int = 4096  # longest sequence; sizes the learned position table
    final_norm: bool = True  # a norm after the last block, before the head
    qkv_bias: bool = False  # biases on the query, key and value projections only (Qwen2)
    activation: str = "silu"  # the feed-forward activation (ACTIVATIONS); SwiGLU's is silu
    dropout: bool = False  # dropout in training: after the embedding, on attention's probabilities, after
    # each block's two output projections (GPT-2's 0.1); Llama-family models have none by default
    family: str = "llama"  # whose code runs it, and so what autograd saves (calc.families.FAMILIES)
    head_size: int = 0  # d, width of one attention head; 0: hidden // heads (Gemma's is 256 at any width)
    norms_per_layer: int = 2  # norms in a block: before attention and the FFN; Gemma 2 adds one after each
    head_bias: bool = True  # an untied head has biases when `bias` is on (GPT-2's lm_head has none)
    sliding_window: int = 0  # tokens a query attends to (Mistral 7B v0.1, Gemma 2); 0: the whole sequence.
    # Recorded, not counted: eager and SDPA attention still build the full s x s scores with a band mask,
    # and FlashAttention stores no scores either way, so no walk here changes with it.
    experts: int = 0  # E, routed experts in each mixture-of-experts layer; 0: every layer is dense
    experts_per_token: int = 0  # k, experts each token is routed to (top-k)
    expert_ffn: int = 0  # one routed expert's inner width; 0: ffn
    shared_expert_ffn: int = 0  # the always-on shared expert's inner width (Qwen2-MoE); 0: none
    shared_expert_gate: bool = False  # a sigmoid gate, h -> 1, scaling the shared expert (Qwen2-MoE)
    dense_layers: int = 0  # of the layers, how many keep a dense FFN of width `ffn` (taken as the first ones)
    capacity_factor: float = 0.0  # each expert takes at most factor x k x tokens / E tokens, padded to that
    # many (Fedus et al. 2022, Switch Transformer); 0: dropless, each expert takes what it is routed
    norm_topk_prob: bool = False  # Qwen3-MoE's router renormalises its top-k weights (Mixtral's always does)
    no_rope_interval: int = 0  # every N-th layer (from 1) has no rotary positions (Llama 4's no_rope_layers); 0: none
    qk_l2_norm: bool = False  # Llama 4's use_qk_norm: an L2 norm (no weight) on each head of Q and K, rotary layers
    temperature_tuning: bool = False  # Llama 4's attn_temperature_tuning: Q scaled by position on the no-RoPE layers

    @property
    def head_dim(self) -> int:
        return self.head_size or self.hidden // self.heads

    @property
    def q_width(self) -> int:
        """Width of the queries (and of attention's output): heads x head_dim."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Width of the keys and of the values: kv_heads x head_dim (Ainslie et al. 2023, GQA)."""
        return self.kv_heads * self.head_dim

    @property
    def expert_width(self) -> int:
        return self.expert_ffn or self.ffn

    @property
    def moe_layers(self) -> int:
        """Layers whose FFN is a mixture of experts."""
        return max(0, self.layers - self.dense_layers) if self.experts else 0

    def replace(self, **changes) -> Shape:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return Shape(**values)
