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
    # The deck walk counts no change: eager and SDPA attention still build the full s x s scores with a band
    # mask, and FlashAttention stores no scores either way. The eager walk counts the masks transformers builds
    # for it where its family's code does (Gemma 2 and 3: a second s x s mask under eager attention; under sdpa,
    # once the window is no longer than the sequence, a boolean mask and, in each sliding layer, the repeated
    # keys and values and the float mask PyTorch's CPU kernel makes of it and saves; OLMo 3, SmolLM3 and
    # Ministral too: calc.families, Family.sdpa_mask)
    experts: int = 0  # E, routed experts in each mixture-of-experts layer; 0: every layer is dense
    experts_per_token: int = 0  # k, experts each token is routed to (top-k)
    expert_ffn: int = 0  # one routed expert's inner width; 0: ffn
    shared_expert_ffn: int = 0  # the always-on shared expert's inner width (Qwen2-MoE); 0: none
    shared_expert_gate: bool = False  # a sigmoid gate, h -> 1, scaling the shared expert (Qwen2-MoE)
    dense_layers: int = 0  # of the layers, how many keep a dense FFN of width `ffn` (the first ones, or dense_at)
    dense_at: tuple[int, ...] = ()  # the dense layers (1 = the first) where they lie among the experts' rather
    # than first (Llama 4's interleave_moe_layer_step, Qwen-MoE's decoder_sparse_step and mlp_only_layers)
    capacity_factor: float = 0.0  # each expert takes at most factor x k x tokens / E tokens, padded to that
    # many (Fedus et al. 2022, Switch Transformer); 0: dropless, each expert takes what it is routed
    no_rope_layers: tuple[int, ...] = ()  # the layers (1 = the first) whose attention has no rotary positions
    # (SmolLM3's no_rope_layers: every fourth)
    global_layers: tuple[int, ...] = ()  # with a sliding window: the layers (1 = the first) that attend to the
    # whole sequence all the same (layer_types' "full_attention": OLMo 3's every fourth); the others slide
    attn_softcap: bool = False  # Gemma 2's attn_logit_softcapping: scores = tanh(scores / cap) * cap (eager only)
    logit_softcap: bool = False  # Gemma 2's final_logit_softcapping: logits = tanh(logits / cap) * cap
    layer_types: str = ""  # each layer's attention as transformers' config.layer_types has it, one letter a
    # layer: "s" sliding_attention (the window), "f" full_attention (Gemma 2, Gemma 3); "": every layer alike
    # Multi-head latent attention (DeepSeek-V2/V3, DeepseekV3Attention): the queries through a low-rank pair
    # h -> q_rank -> heads x head_dim with an RMSNorm between (0: one q_proj), the keys and values from a
    # kv_rank-wide latent (with its RMSNorm) and a rope_dim-wide rotary key shared by every head; each query and
    # key head is head_size wide (its rope_dim last values rotated), each value head v_head_size wide.
    q_rank: int = 0
    kv_rank: int = 0  # 0: no latent attention
    rope_dim: int = 0  # the rotary part of a query/key head (and Phi-3's partial_rotary_factor x head_dim); 0: the
    # whole head
    v_head_size: int = 0  # one value head's width where it is not the query/key head's; 0: the same
    rope_interleave: bool = False  # rotary pairs interleaved (x0, x1), (x2, x3) ... (DeepSeek's rope_interleave)
    # DeepSeek-V3's router (DeepseekV3TopkRouter): sigmoid scores, the experts in expert_groups groups of which the
    # group_topk best (by their two best scores) are searched for the top-k; topk_norm: the k weights renormalised
    expert_groups: int = 0  # 0: the softmax top-k of Mixtral and Qwen2-MoE
    group_topk: int = 0
    topk_norm: bool = False
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
    def v_head_dim(self) -> int:
        return self.v_head_size or self.head_dim

    @property
    def rotary_dim(self) -> int:
        """Width of the rotary tables (cos, sin): a query/key head, or its rotary part (rope_dim)."""
        return self.rope_dim or self.head_dim

    @property
    def kv_width(self) -> int:
        """Width of the keys and of the values: kv_heads x head_dim (Ainslie et al. 2023, GQA)."""
        return self.kv_heads * self.head_dim

    @property
    def expert_width(self) -> int:
        return self.expert_ffn or self.ffn

    @property
    def ffn_read(self) -> bool:
        """Whether `ffn` sizes anything: a dense layer, or experts that take their width from it (not a mixture
        of experts in every layer, each its own expert_ffn wide: Mixtral's, Qwen3-MoE's, GPT-OSS's)."""
        return not (self.experts and self.expert_ffn and not self.dense_layers)

    @property
    def moe_layers(self) -> int:
        """Layers whose FFN is a mixture of experts."""
        return max(0, self.layers - self.dense_layers) if self.experts else 0

    def moe_layer(self, layer: int) -> bool:
        """Whether layer `layer` (1 = the first) is a mixture of experts: the one source of that fact, which
        configs spell three ways (DeepSeek's first_k_dense_replace, Llama 4's moe_layers or
        interleave_moe_layer_step, Qwen-MoE's decoder_sparse_step and mlp_only_layers): not one of dense_at
        where given, else after the first dense_layers."""
        if not self.experts:
            return False
        return layer not in self.dense_at if self.dense_at else layer > self.dense_layers

    def slides(self, layer: int) -> bool:
        """Whether layer `layer` (1 = the first) attends through the sliding window rather than to the whole
        sequence: the one source of that fact, which configs spell two ways. layer_types' letter where given
        (Gemma 2 and 3; a pattern shorter than the layers repeats), else every layer where there is a window
        but the global_layers (OLMo 3, SmolLM3, Ministral)."""
        if self.layer_types:
            return self.layer_types[(layer - 1) % len(self.layer_types)] == "s"
        return bool(self.sliding_window) and layer not in self.global_layers

    def rotary(self, layer: int) -> bool:
        """Whether layer `layer` (1 = the first) applies its rotary positions (where the model has them): the
        one source of that fact, which configs spell two ways: not the no_rope_layers (SmolLM3) nor every
        no_rope_interval-th layer (Llama 4's no_rope_layer_interval)."""
        every = self.no_rope_interval
        return layer not in self.no_rope_layers and not (every and layer % every == 0)

    def as_dict(self) -> dict:
        """The fields as an answer's config gives them: those few models have (the per-layer lists, a partial
        rotary width, soft-caps, layer types) only where the model has them."""
        rare = ("no_rope_layers", "global_layers", "dense_at", "attn_softcap", "logit_softcap", "layer_types",
                "q_rank", "kv_rank", "rope_dim", "v_head_size", "rope_interleave", "expert_groups", "group_topk",
                "topk_norm")
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in rare or getattr(self, f.name)}

    def replace(self, **changes) -> Shape:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return Shape(**values)
