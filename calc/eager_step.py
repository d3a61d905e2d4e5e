"""The eager walk of a transformers model (calc.families: a family's layer): one training step replayed op by op.

The step is the loop most people write with transformers: `loss = model(input_ids=x, labels=x).loss`
(under torch.autocast for the "autocast" recipe), `loss.backward()`, `optimizer.step()` (AdamW as PyTorch
picks it: single-tensor on the CPU, foreach on CUDA), `optimizer.zero_grad()`. Checkpointing is
transformers' gradient_checkpointing_enable(): non-reentrant torch.utils.checkpoint around each decoder
layer, which keeps the layer's input, re-runs the layer's forward when its backward first needs a saved
value, and saves the CPU generator's state.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache, partial

from . import counts, finetune, inventory, loops, losses, optim_step, phases, trl_head
from .counts import param_counts
from .engines import ddp, fsdp, pipeline, tensor
from .families import FAMILIES
from .optimizers import OPTIMIZERS
from .parallel import stage_layers
from .parts.ops import Ops, Step
from .recipes import RECIPES
from .replay import Node, Replay, T
from .shape import Shape
from .walk import Event, Reps, Segment, resident_state

RNG_STATE = 5056  # torch.get_rng_state(): the CPU generator's state, saved by each checkpointed call
CODE_BOOKS = 4 * (16 + 256)  # bitsandbytes' QuantState of each 4-bit linear: its own fp32 copies of NF4's 16
# values (code) and of the 256 of the absmax's 8-bit dynamic code (state2.code)
CUDA_BLOCK = 512  # c10/cuda/CUDACachingAllocator.cpp: kMinBlockSize, every allocation is rounded up to it


def stored_tensors(shape: Shape) -> list[int]:
    """The values of each parameter tensor as the model stores it (calc.inventory): AdamW keeps a step
    counter for each, and single-tensor AdamW's temporaries are the size of the largest."""
    runs = [(shape.layers - shape.moe_layers, False), (shape.moe_layers, True)]
    layers = [n for count, moe in runs if count for n in count * inventory.stored(counts.layer_tensors(shape, moe))]
    outer = [t for tensors in inventory.outer_tensors(shape).values() for t in tensors]
    return layers + inventory.stored(outer)


def trainable(tune: finetune.Tuning):
    """trainable(layer, parameter name) for the replay (None: every parameter trains). LoRA trains its
    adapters only (peft's get_peft_model freezes the base model); freeze trains the blocks above the first N,
    the final norm and an untied head unless --freeze-head (calc.finetune.trainable_tensors)."""
    if tune.mode == "full":
        return None
    if tune.adapters:
        return lambda layer, name: ".lora_" in name
    embedding = finetune.embedding_trains(tune)  # issue 34: --no-freeze-embedding
    frozen = ("embedding", "positions")[: 0 if embedding else 2] + (("final norm", "lm_head")
                                                                   if finetune.head_frozen(tune) else ())  # fmt: skip
    return lambda layer, name: layer > tune.freeze_layers if layer else not name.startswith(frozen)


def replay(
    shape: Shape,
    seq: int,
    micro_batch: int,
    recipe: str,
    recompute: str,
    attention: str,
    device: str,
    tune: finetune.Tuning = finetune.DEFAULT,
    accumulate: bool = False,
    loss_kind: str = "transformers",
    layers: list[int] | None = None,
    tp: int = 1,
    stage: tuple[bool, bool] | None = None,
    vocab_split: bool = False,
    sp: bool = False,
    below: int = 0,
):
    """The step's events as (layer, Event) pairs; layer 0 for events outside the layers. `accumulate`: a later
    micro-batch of gradient accumulation, whose parameter gradients are added into .grad (calc.replay).
    `layers`: the layers replayed, in order, as numbered in the model (None: every one). The forward's parts
    are Forward's builders, in the order the model's forward runs them; then loss.backward() (_backward). `tp`:
    one rank of tensor parallelism over that many processes (calc.engines.tensor), `shape` being its own;
    `vocab_split`: its embedding and head split by vocabulary too (transformers' plan); `sp`: the sequence split
    outside the attention and the MLP (sequence parallelism).
    `stage`: (first, last), one micro-batch through one pipeline stage (Forward.stage_step), `shape` being the
    stage's layers, `below` the model's layers before them (what the events outside the layers number from)."""
    fw = Forward(shape, seq, micro_batch, recipe, attention, device, tune, accumulate, tp, vocab_split, sp)
    fw.rp.below = below
    if stage is not None:
        return fw.stage_step(recompute, attention, layers, *stage), fw.st
    x, leaf = fw.embeddings(recompute)
    x, cos, sin = fw.positions(x)
    mask, window = fw.masks(attention)
    x = fw.decoder(x, cos, sin, mask, window, recompute, layers)
    final = fw.base_returns(x, cos, sin, mask)
    loss = fw.causal_lm_loss(final) if loss_kind == "transformers" else fw.chunked_loss(final, loss_kind)
    return _backward(fw.rp, loss, leaf), fw.st


class Forward:
    """The model's forward as the replay runs it (calc.parts.ops on a calc.replay.Replay), one builder a part:
    the embeddings, the positions, the masks, the decoder layers, the base model's return, the head and loss.
    `held`: what the base model's forward holds until it returns, in the order it took them."""

    def __init__(self, shape: Shape, seq: int, micro_batch: int, recipe: str, attention: str, device: str,
                 tune: finetune.Tuning, accumulate: bool, tp: int = 1, vocab_split: bool = False,
                 sp: bool = False):  # fmt: skip
        r, tr = RECIPES[recipe], finetune.trained_recipe(recipe, tune)  # tr: what the trainable parameters are
        act = r.activations if not r.autocast else 4
        wrapped = finetune.expert_adapted(shape, tune)  # experts.gate_up_proj, experts.down_proj, gate.weight
        adapted = frozenset([module for module, _, _ in finetune.adapted(shape, tune.targets)] +  # q_proj, qkv_proj
                            [name for name, *_ in wrapped])  # fmt: skip
        lora = (tune.rank, adapted) if tune.adapters else (0, frozenset())
        self.st = st = Step(shape, seq, micro_batch, act, r.autocast, attention, tr.gradients, device, *lora,
                            tr.weights, tune.mode == "qlora", tp, vocab_split, sp,
                            tuple((name, ranks) for name, _, _, ranks in wrapped))  # fmt: skip
        self.rp = rp = Replay("forward", CUDA_BLOCK if device == "cuda" else 1, trainable(tune))
        rp.accumulating = accumulate  # issue 19: gradient accumulation (calc.loops)
        rp.rng = RNG_STATE if device == "cpu" else 0  # a recompute's fork_rng copies the CPU generator's state
        self.ops = Ops(rp, st)
        self.shape, self.seq, self.micro_batch, self.device = shape, seq, micro_batch, device
        self.cut = False  # whether the input is already the rank's positions (a later pipeline stage's, under sp)
        self.rebound: list[T] = []  # what the forward lets go of once the first layer returns (a pipeline stage's)
        self.family, self.autocast = FAMILIES[shape.family], r.autocast
        self.unit = st.act if not r.autocast else 4  # the embedding's output: the weights' dtype
        self.held: list[T] = []
        self.ids: T | None = None  # the position ids (embeddings), which a checkpointed layer keeps

    def embeddings(self, recompute: str) -> tuple[T, T | None]:
        """(the token embeddings, the leaf that makes them require grad under checkpointing, or None). Their
        backward writes a dense gradient of the table; the position ids go to every layer."""
        ops, rp, st, family, h = self.ops, self.rp, self.st, self.family, self.shape.hidden
        if st.vocab_split:
            x = self._vocab_parallel_lookup()
        else:
            x = ops.new(st.tokens * h, self.unit, "token embeddings", "embedding: s x b x h values")
            rp.node("embedding", x, inputs=[("embedding.weight", self.shape.vocab * h * st.param_bytes, "param")])
        if family.embed and family.embed_module:  # the embedding module's own forward ends with it
            x = _embedded(ops, family.embed, x)
        leaf = None
        if recompute == "full" and not x.requires_grad:
            # transformers' activation_checkpointing_enable() (and peft's get_peft_model on a checkpointed model)
            # calls enable_input_require_grads(): a forward hook on get_input_embeddings() makes a frozen
            # embedding module's output require grad, a leaf whose AccumulateGrad node holds it (and, after
            # backward, its .grad) until the graph goes with the loss, when the training step returns. Every
            # layer then records its nodes.
            x.requires_grad, leaf = True, rp.keep(x)
        if family.embed and not family.embed_module:  # the family's model rebinds inputs_embeds to its own function
            x = _embedded(ops, family.embed, x)
        self.held.append(rp.keep(x))  # the model's forward holds its inputs_embeds (and position_embeds)
        # position_ids = torch.arange(s) + past_seen_tokens, unsqueeze(0): (1, s) int64, passed to every layer
        ids = ops.new(self.seq, 8, "position ids", "LlamaModel.forward (and every family's): torch.arange(s), int64")
        ids.requires_grad = False
        self.held.append(ids)
        self.ids = ids
        return x, leaf

    def _vocab_parallel_lookup(self) -> T:
        """transformers' "embedding_rowwise" (calc.engines.tensor): DTensor's vocabulary-parallel lookup, the ids
        outside the rank's rows masked, the local rows looked up, the partial output all-reduced into a new
        tensor. The table's gradient is whole (vocab x h): backward runs on the replicated ids and gradient."""
        ops, rp, st, n, h = self.ops, self.rp, self.st, self.st.tokens, self.shape.hidden
        src = "DTensor's vocabulary-parallel embedding (MaskPartial): "
        below = ops.new(n, 1, "ids below the rank's rows (bool)", src + "lt")
        above = ops.new(n, 1, "ids past the rank's rows (bool)", src + "ge")
        mask = ops.new(n, 1, "ids outside the rank's rows (bool)", src + "bitwise_or, kept until the reduction")
        rp.drop(below, above)
        ids = ops.new(n, 8, "token ids copied (int64)", src + "the ids to mask")
        shifted = ops.new(n, 8, "token ids less the rank's first row (int64)", src + "sub")
        rp.drop(ids)
        local = ops.new(n * h, self.unit, "token embeddings (this rank's rows, the rest zero)", src + "index_select")
        rp.node("embedding", local, inputs=[("embedding.weight", self.shape.vocab * h * st.param_bytes, "param")])
        rp.drop(shifted)
        rp.drop(mask, why="the partial output is reduced")
        x = ops.new(n * h, self.unit, "token embeddings (all-reduced)", "funcol all_reduce: a new tensor")
        rp.node("embedding output (all-reduce)", x, inputs=[(local, local.nbytes, "pass")])
        rp.drop(local, why="all-reduced into a new tensor")
        return x

    def positions(self, x: T) -> tuple[T, T | None, T | None]:
        """(the embeddings, cos, sin): learned positions added (and dropout), or the rotary tables made."""
        ops, rp, shape, family, seq = self.ops, self.rp, self.shape, self.family, self.seq
        if shape.positions == "learned":
            pos = ops.new(seq * shape.hidden, self.unit, "position embeddings", "wpe(position_ids): s x h values")
            rp.node("embedding", pos, inputs=[("positions", shape.context * shape.hidden * self.st.param_bytes,
                                               "param")])  # fmt: skip
            self.held.append(pos)
            summed = ops.add(x, pos, "token + position embeddings")
            rp.drop(x)
            x = ops.dropout(summed, "embeddings")
            rp.drop(summed)
            return x, None, None
        # LlamaRotaryEmbedding: cos and sin of (1, s, head_dim), in the embedding's dtype (GPT-OSS's: head_dim / 2)
        d = family.rotary_width(shape) if family.rotary_width else shape.rotary_dim
        rope = 4 if family.rope_fp32 else self.unit  # (OLMo 2's and 3's stay fp32)
        cos = ops.new(seq * d, rope, "rotary cos", "cos(position x inverse frequency)")
        sin = ops.new(seq * d, rope, "rotary sin", "sin(position x inverse frequency)")
        cos.requires_grad = sin.requires_grad = False
        for i in range(1, family.rope_tables(shape) if family.rope_tables else 1):  # one pair a layer type (OLMo 3)
            more = [ops.new(seq * d, rope, f"rotary {f} ({i + 1})", f"{f}(position x inverse frequency)")
                    for f in ("cos", "sin")]  # fmt: skip
            for t in more:
                t.requires_grad = False
            self.held += more
        return x, cos, sin

    def masks(self, attention: str) -> tuple[T | None, T | None]:
        """(the mask every layer is given, the sliding-window or chunked one some layers are given), or None."""
        ops, shape, family, seq, b = self.ops, self.shape, self.family, self.seq, self.micro_batch
        mask = window = None
        if attention == "eager":  # a (b, 1, s, s) additive causal mask in the embedding's dtype
            mask = ops.new(b * seq * seq, self.unit, "causal mask", "create_causal_mask: b x s x s values")
            mask.requires_grad = False
            if family.window_mask and family.window_mask(shape):  # a sliding-window mask too, used or not (Qwen2-MoE)
                window = ops.new(b * seq * seq, self.unit, "sliding-window mask", "create_sliding_window_causal_mask")
                window.requires_grad = False
                self.held.append(window)
        elif family.sdpa_mask and family.sdpa_mask(shape, seq):  # sdpa_mask: a bool (1, 1, s, s), expanded over b
            mask = ops.new(seq * seq, 1, "sliding-window mask (bool)", "create_sliding_window_causal_mask: s x s")
            mask.requires_grad = False
        elif family.sdpa_window and family.sdpa_window(shape):  # under sdpa the causal mask is is_causal, not a tensor
            window = ops.new(b * seq * seq, 1, "chunked mask", "create_chunked_causal_mask: b x s x s booleans")
            window.requires_grad = False
            self.held.append(window)
        return mask, window

    def decoder(self, x: T, cos, sin, mask, window, recompute: str, layers: list[int] | None) -> T:
        """The decoder layers `layers` (None: every one), each checkpointed under full recomputation."""
        ops, rp, shape, family = self.ops, self.rp, self.shape, self.family
        per_layer = None
        if family.layer_inputs:  # layers of different masks or rotary tables (Gemma 2, Gemma 3)
            per_layer, made = family.layer_inputs(ops, cos, sin, mask)
            self.held += made
        layer_fn = family.layer
        for layer in range(1, shape.layers + 1) if layers is None else layers:
            rp.enter(layer)
            if self.st.sp and layer == 1 and not self.cut:  # the hook on the first layer, outside its checkpoint
                part = ops.seq_split(x)
                rp.drop(x)
                x = part
            c, s, m = per_layer[layer - 1] if per_layer else (cos, sin, mask)
            if window is not None and family.window_layer and family.window_layer(shape, layer):
                m = window  # the mask this layer is given (a checkpoint keeps it)
            if recompute == "full":
                x = _checkpointed(ops, layer_fn, x, c, s, m, self.device, self.ids)
            else:
                y = layer_fn(ops, x, c, s, m)
                rp.drop(x)
                x = y
            rp.drop(*self.rebound, why="the stage's forward rebinds its hidden state")
            self.rebound = []
        rp.layer = 0
        return x

    def base_returns(self, x: T, cos, sin, mask) -> T:
        """The final norm; the base model's forward returns (LlamaModel, GPT2Model), letting go of what it
        held. Its output (last_hidden_state) stays with the causal-LM forward, which applies the head and loss."""
        ops, rp, shape = self.ops, self.rp, self.shape
        norm = ops.rms_norm if shape.norm == "rms" else ops.layer_norm
        if self.family.norm:
            norm = partial(self.family.norm, ops)
        final = norm(x, "final norm") if shape.final_norm else rp.keep(x)
        rp.drop(x)
        rp.drop(*self.held, *(t for t in (cos, sin, mask) if t is not None), why="the base model's forward returns")
        return final

    def stage_step(self, recompute: str, attention: str, layers: list[int] | None, first: bool, last: bool) -> Replay:
        """One micro-batch through one pipeline stage (calc.engines.pipeline): the stage module's forward over its
        layers, as the model's own forward runs them (the embedding on the first stage, the final norm, head and
        loss on the last), then its backward: from the loss on the last stage, elsewhere from the output gradient
        received into the stage's buffer. A stage after the first takes its input from its receive buffer, a
        leaf requiring grad, whose gradient stays in `rp.grads` for the schedule to send (`rp.sent`). The
        buffers outlive the step (they are the engine's), so nothing here frees them. Under autocast the stage
        module's forward is the autocast region, as the model's forward is in a one-device loop."""
        ops, rp, st, h = self.ops, self.rp, self.st, self.shape.hidden
        if first:  # the stage module's forward rebinds its hidden state (torchtitan's `h = layer(h)`): it lets go
            x, leaf = self.embeddings(recompute)  # of the embeddings once the first layer returns
            self.rebound = [self.held.pop(next(i for i, t in enumerate(self.held) if t is x))]
        else:  # PipelineStage's receive buffer: the stage module's input, kept by the stage from step to step
            self.cut = st.sp  # sequence parallelism: the rank's positions, cut on the first stage
            x, leaf = rp.keep(T(st.tokens * h * self.unit // (st.tp if st.sp else 1), "received activations",
                                unit=self.unit)), None  # fmt: skip
            ids = ops.new(self.seq, 8, "position ids", "the stage's forward: torch.arange(s), int64")
            ids.requires_grad = False
            self.held.append(ids)
            self.ids = ids
        received = x
        x, cos, sin = self.positions(x)
        mask, window = self.masks(attention)
        x = self.decoder(x, cos, sin, mask, window, recompute, layers)
        if last:  # loss_fn(output, target) as the forward ends; the logits stay in output_chunks (returned)
            loss = self.causal_lm_loss(self.base_returns(x, cos, sin, mask), keep=True)
            rp.grads[id(loss)] = T(0, "1")
        else:  # the output stays in fwd_cache until its backward; its gradient arrives in the stage's buffer
            rp.drop(*self.held, *(t for t in (cos, sin, mask) if t is not None), why="the stage's forward returns")
            ops.end_autocast()
            rp.grads[id(x)] = rp.keep(T(x.nbytes, "received gradient of the stage's output", unit=x.unit))
        return _run_backward(rp, leaf, None if first else received)

    def head_name(self) -> str:
        return "embedding" if self.shape.tied else "lm_head"

    def chunked_loss(self, final: T, loss_kind: str) -> T:
        """issue 19: heads that never build the fp32 logits (calc.trl_head, calc.losses)."""
        ops, head = self.ops, self.head_name()
        if loss_kind == "trl-chunked":
            loss = trl_head.head(ops, final, head, 2 if self.autocast else final.unit, self.device)
        else:
            loss = (losses.torchtune_head if loss_kind == "torchtune-chunked" else losses.liger_head)(ops, final, head)
        self.rp.drop(final, why="the model's forward returns")
        ops.end_autocast()
        return loss

    def causal_lm_loss(self, final: T, keep: bool = False) -> T:
        """The head's logits, then transformers' ForCausalLMLoss: logits.float(), labels padded and shifted (a
        copy), cross_entropy = log_softmax + nll_loss. The model's outputs still hold the final hidden states
        (last_hidden_state) until the forward returns; the loop drops the logits once it has taken .loss.
        `keep`: the logits outlive the step (a pipeline's last stage returns them)."""
        ops, rp, shape, family, n = self.ops, self.rp, self.shape, self.family, self.st.tokens
        h, v = shape.hidden, shape.vocab
        head_bias = shape.bias and shape.head_bias and not shape.tied
        whole = ops.seq_head_input(final) if self.st.sp else final  # sequence parallelism: the head sees it all
        logits = ops.linear(whole, h, v, self.head_name(), head_bias, "logits", "logits")
        if whole is not final:
            rp.drop(whole, why="the head returns (what its node saved stays)")
        if family.head:  # the family's causal-LM forward rebinds the logits to its own function of them (the hook
            logits = family.head(ops, logits)  # lets go of the logits it rebinds, as the code's rebinding does)
        logits32 = logits if logits.unit == 4 else ops.unary("logits in fp32", logits, [], 4, "logits")
        padded = ops.new(n + self.micro_batch, 8, "padded labels", "nn.functional.pad(labels, (0, 1))")
        target = ops.new(n, 8, "shifted labels", "labels[..., 1:].contiguous()")
        logp = ops.new(n * v, 4, "log-probabilities (fp32)", "log_softmax saves its result", "logits")
        rp.node("log_softmax", logp, saved=[logp], inputs=[(logits32, logits32.nbytes, "new")])
        loss = T(0, "loss")
        rp.node("nll_loss", loss, saved=[target], inputs=[(logp, logp.nbytes, "new")])
        rp.drop(target, logp, padded)
        if logits32 is not logits:
            rp.drop(logits32)
        rp.drop(final, why="the model's forward returns")
        ops.end_autocast()
        if not keep:
            rp.drop(logits, why="the model's output is dropped once the loop has taken .loss")
        return loss


def _embedded(ops: Ops, embed, x: T) -> T:
    """The family's function of the token embeddings (`Family.embed`), rebinding them: the input goes."""
    scaled = embed(ops, x)
    ops.rp.drop(x)
    return scaled


def _backward(rp: Replay, loss: T, leaf: T | None) -> Replay:
    """loss.backward(): every node's backward, then what the graph keeps until the step returns."""
    rp.grads[id(loss)] = T(0, "1")
    return _run_backward(rp, leaf)


def _run_backward(rp: Replay, leaf: T | None, received: T | None = None) -> Replay:
    """The backward from the gradients given in rp.grads; then what the graph keeps until the step returns
    (enable_input_require_grads' `leaf` and its .grad) and, for a pipeline stage, its `received` input's
    gradient, which the schedule sends (rp.sent); the rest go."""
    rp.backward()
    if received is not None:
        rp.sent = rp.grads.pop(id(received), None)
    if leaf is not None:
        rp.after = [leaf, rp.grads.pop(id(leaf))]
    for g in rp.grads.values():
        rp.drop(g, why="gradient of an input that needs none")
    rp.grads.clear()
    return rp


def _checkpointed(ops: Ops, layer_fn, x: T, cos, sin, mask, device: str, ids: T | None = None) -> T:
    """A layer under non-reentrant checkpoint: its forward keeps nothing but its input (and the RNG state);
    its backward re-runs the forward, then runs the re-created nodes' backward. GradientCheckpointingLayer
    checkpoints partial(layer, **kwargs): the re-run keeps the layer's keyword tensors too (the rotary tables,
    the mask and `ids`, the position ids), until its backward has run."""
    rp = ops.rp
    outer, rp.nodes, rp.discard_saved = rp.nodes, [], True  # the pack hook keeps no saved tensor
    y = layer_fn(ops, x, cos, sin, mask)
    region, rp.nodes, rp.discard_saved = rp.nodes, outer, False
    rng = rp.new(RNG_STATE if device == "cpu" else 0, "RNG state", "checkpoint(preserve_rng_state=True)")
    if not y.requires_grad:  # a frozen layer below every trainable one: nothing packed, nothing kept
        rp.drop(rng, x, why="checkpoint: nothing in the layer needs a gradient")
        return y
    # the checkpoint keeps every tensor argument for the re-run: the input, and the rotary tables and mask
    saved = [x, rng, *(t for t in (cos, sin, mask, ids) if t is not None)]
    for t in saved:
        rp.keep(t)
    rp.nodes.append(Node("checkpoint", saved, y, [], [], rp.layer))
    rp.drop(rng)

    def rerun(x0: T) -> T:  # under the autocast state of the forward, whose weight cache it clears
        try:
            return layer_fn(ops, x0, cos, sin, mask)
        finally:  # also where the re-run stops early (calc.replay: Replay._rerun)
            ops.end_autocast()

    rp.nodes[-1].recompute, rp.nodes[-1].region = rerun, region
    rp.drop(x)
    return y


SMALL = 4  # periods replayed of a run of one pattern of kinds: the first, two in the middle (which the rest
# repeat), the last; a period is one layer where every layer is of one kind (Llama), two where they alternate
# (Gemma 2, GPT-OSS), six for Gemma 3's five sliding layers and a full one


def segments(
    shape: Shape,
    seq: int,
    micro_batch: int,
    recipe: str,
    recompute: str,
    attention: str,
    device: str,
    tune: finetune.Tuning = finetune.DEFAULT,
    loop: loops.Loop = loops.BARE,
    engine: ddp.DataParallel | fsdp.FullyShard | tensor.TensorParallel | pipeline.PipelineStage | None = None,
):
    """The step as walk segments: the state, the replayed forward and backward (a layer's events once,
    repeated over the layers where they are the same), AdamW's step and zero_grad. `engine`: the step of one
    rank of DDP (calc.engines.ddp), its buckets and, under ZeRO-1, its share of the optimizer; or of FSDP2
    (calc.engines.fsdp), its shards, its groups gathered and reduced around the layers, its rows of AdamW; or of
    tensor parallelism (calc.engines.tensor): the model of one rank's share of the heads and the MLP, its
    linears' inputs and outputs all-reduced; or one stage of a pipeline (calc.engines.pipeline: _stage_segments).

    A few layers of each run are replayed (layer_spans: the layers of a run of one kind, or the periods of a run
    whose kinds repeat, but the first and the last, run the same ops on the same sizes), and their events are
    stretched to the real depth (checked: where a run's middle periods' events differ, the whole model is
    replayed)."""
    if isinstance(engine, pipeline.PipelineStage):
        return _stage_segments(shape, (seq, micro_batch, recipe, recompute, attention, device, tune), loop, engine)
    sharded = isinstance(engine, fsdp.FullyShard)
    computes = RECIPES[recipe].computes  # FSDP2's bf16 policy: the model runs in bf16 over fp32 shards
    args = (seq, micro_batch, computes or recipe, recompute, attention, device, tune)
    how = {"gathered": fsdp.FullyShard(engine.dp, engine.reshard, mixed=bool(computes))} if sharded else {}
    kept = shape  # the parameters as the rank stores them
    if sharded and engine.tp > 1:  # FSDP2 x TP: FSDP2's groups of the model one tensor-parallel rank runs
        shape = kept = tensor.TensorParallel(engine.tp).local(shape)
        how.update(tp=engine.tp, sp=engine.sequence)
    if isinstance(engine, tensor.TensorParallel):  # issue 31: a rank runs its share of every layer
        shape, kept = engine.local(shape), engine.stored(shape)
        how, engine = {"tp": engine.tp, "vocab_split": engine.vocab_split, "sp": engine.sequence}, None
    rp, st, replayed = _replayed(shape, args, loss_kind=loop.loss_kind, **how)
    start, tensors = _resident(kept, recipe, tune)
    start.append(Event("start", "token ids (int64), input and labels", "activations", 8 * st.tokens, "s x b x 8 bytes"))
    params = optim_step.trainable(kept, tune)  # issue 19: the optimizer's own state and step (calc.optim_step)
    if sharded:  # issue 31: a rank of FSDP2 holds its rows of the weights and of AdamW's state
        grouped = optim_step.model_groups(shape, tune)
        stored, trained = [p for g, _ in grouped for p in g], [p for _, t in grouped for p in t]
        start = fsdp.resident(start, stored, trained, engine, RECIPES[recipe].weights)
        params = list(engine.share)
    elif engine is not None:  # issue 31: what a rank of DDP holds beside the one-device step
        start.append(engine.buckets(params, finetune.trained_recipe(recipe, tune).gradients, rp.block))
        if engine.share is not None:
            share = list(engine.share)
            start, params, tensors = ddp.sharded(start, params, share), share, len(share)
    start += _optimizer_start(params, recipe, device, tune, loop, tensors, rp.block)
    start += loops.start_events(loop, shape, st.tokens, rp.block)  # the loop's own tensors (calc.loops)
    segs = [Segment(tuple(start)), *replayed]
    if loop.grad_accum > 1:
        segs += _later_micro_batches(shape, args, rp, loop)
    end = _optimizer_end(params, recipe, device, tune, loop, rp.block)
    end.append(phases.zero_grad(phases.gradients_held(replayed)))
    end += _graph_goes(rp)
    segs.append(Segment(tuple(end)))
    return segs


def _stage_segments(shape: Shape, args: tuple, loop: loops.Loop, stage: pipeline.PipelineStage) -> list[Segment]:
    """One pipeline rank's step (calc.engines.pipeline): its stages' parameters and AdamW's state (one AdamW over
    them all), the engine's buffers, each micro-batch's forward and backward through each stage's layers in the
    schedule's order, AdamW's step."""
    recipe, device, tune = args[2], args[5], args[6]
    parts, params, buffers, held = {}, [], [], 0
    autocast = RECIPES[recipe].autocast  # the layers' outputs in the weights' dtype, the head's in 16 bits
    local = tensor.TensorParallel(stage.tp).local if stage.tp > 1 else lambda sub: sub  # the layers plan's share
    stored, unit = [], finetune.trained_recipe(recipe, tune).gradients  # FSDP2's tensors, in model order
    for s in stage.stages:
        first, last = s == 0, s == stage.count - 1
        layers = stage_layers(shape, stage.count, s)
        sub = local(replace(shape, layers=len(layers)))  # the stage's layers, numbered from 1 in its replay
        below = layers.start - 1  # the model's numbers
        split = {"tp": stage.tp, "sp": stage.sequence} if stage.tp > 1 else {}  # the layers plan's
        how = {"stage": (first, last), "below": below, **split}
        rp, st, forward, backward, whole = _stage_replays(sub, args, stage, unit, how)
        mine = optim_step.stage_params(sub, tune, first, last)
        params += mine
        act = rp.blocks(st.tokens * shape.hidden * (4 if autocast else st.act) // (stage.tp if stage.sequence else 1))
        logits = rp.blocks(st.tokens * shape.vocab * (2 if autocast else st.act))
        buffers += stage.buffers(s, act, logits)
        gather, reduce = (), ()
        if stage.shard:  # FSDP2 around the stage's layers and module (calc.engines.fsdp.staged)
            stored += optim_step.stage_params(sub, tune, first, last, stored=True)
            gather, reduce = fsdp.staged(fsdp.FullyShard(stage.dp, False), optim_step.stage_groups(sub, first, last),
                                         unit, rp.blocks, below)  # fmt: skip
            gather = () if stage.reshard else gather  # resharding after forward: gathered in each micro-batch
            held += sum(e.bytes for e in reduce if e.category == "gradients")  # the shards for the unsharded
        elif stage.dp > 1:  # DDP around the stage's module: its buckets (calc.engines.pipeline)
            b = ddp.DataParallel(stage.dp).buckets(mine, unit, rp.block)
            buffers.append(b._replace(label=f"{b.label}{f' (stage {s})' if stage.looped else ''}"))
        after = [Event("backward", f"free {t.label}", t.category, rp.blocks(-t.nbytes), "the stage's backward returns: "
                       "the micro-batch's graph goes") for t in rp.after]  # fmt: skip
        parts[s] = pipeline.Part(forward, backward, 0 if last else act, rp.blocks(rp.sent.nbytes) if rp.sent else 0,
                                 after, tuple(gather), tuple(reduce), whole)  # fmt: skip
        held += phases.gradients_held(backward[0])
    start = resident_state(sum(p.numel for p in params), recipe)
    if stage.zero1:  # ZeroRedundancyOptimizer: the rank's share of the stage's parameters (calc.engines.ddp)
        share = ddp.partition(params, stage.dp)[stage.dp_rank]
        start, params = ddp.sharded(start, params, share), share
    if stage.shard:  # a rank of FSDP2: its rows of the weights and of AdamW's state
        share = tuple(fsdp.local(p, stage.dp, stage.dp_rank) for p in stored)
        start = fsdp.resident(start, stored, stored, fsdp.FullyShard(stage.dp, False, share), RECIPES[recipe].weights)
        params = list(share)
    if stage.first or stage.last:  # the step's input ids (first) or labels (last), every micro-batch's
        start.append(Event("start", f"token ids (int64) of the step's {stage.micro_batches} micro-batches",
                           "activations", 8 * st.tokens * stage.micro_batches, "s x b x 8 bytes a micro-batch"))
    start += buffers
    start += _optimizer_start(params, recipe, device, tune, loop, len(params), rp.block)
    end = _optimizer_end(params, recipe, device, tune, loop, rp.block)
    end.append(phases.zero_grad(held))
    return [Segment(tuple(start)), *stage.step(parts, logits), Segment(tuple(end))]


def _stage_replays(sub: Shape, args: tuple, stage: pipeline.PipelineStage, unit: int, how: dict) -> tuple:
    """(replay, step, a micro-batch's forward, (the first backward, a later one), Part.whole) of one stage whose
    layers are `sub`'s, numbered as in the model: one replay of the first micro-batch and one of a later one.
    Beside FSDP2 resharding after forward each is wrapped twice (calc.engines.fsdp.in_stage): the stage's groups
    gathered as the micro-batch runs (forward, backward), or found whole after a backward (whole); else None."""
    first, last = how["stage"]
    if not stage.reshard:
        rp, st, replayed = _replayed(sub, args, **how)
        return rp, st, *_stage_runs(replayed, _replayed(sub, args, accumulate=True, **how)[2], how["below"]), None
    engine, grouped = fsdp.FullyShard(stage.dp, True), optim_step.stage_groups(sub, first, last)
    wraps = tuple(lambda chunks, rp, gathering=g: fsdp.in_stage(chunks, engine, grouped, unit, rp.blocks, gathering)
                  for g in (True, False))  # fmt: skip
    rp, st, (replayed, found) = _replayed(sub, args, wraps=wraps, **how)
    later, later_found = _replayed(sub, args, accumulate=True, wraps=wraps, **how)[2]
    forward, backward = _stage_runs(replayed, later, how["below"])
    whole, (_, whole_later) = _stage_runs(found, later_found, how["below"])
    return rp, st, forward, backward, (whole, whole_later)


def _stage_runs(replayed: list[Segment], later: list[Segment], below: int) -> tuple[list, tuple[list, list]]:
    """(a micro-batch's forward, (the first backward, a later one)) of a stage's replays, numbered as in the model."""
    forward = [_shifted(g, below) for g in replayed if g.events[0].phase == "forward"]
    return forward, ([_shifted(g, below) for g in replayed if g.events[0].phase != "forward"],
                     [_shifted(g, below) for g in later if g.events[0].phase != "forward"])  # fmt: skip


def _shifted(seg: Segment, below: int) -> Segment:
    """A segment of a stage's replay (its layers numbered from 1) with its layers numbered as in the model."""
    if not below or seg.reps is None:
        return seg
    r = seg.reps.layers
    return seg._replace(reps=Reps(range(r.start + below, r.stop + below, r.step), seg.reps.micro_batches))


def _resident(shape: Shape, recipe: str, tune: finetune.Tuning) -> tuple[list[Event], int]:
    """(the state resident before the step, the parameter tensors AdamW keeps a step counter for). Fine-tuning:
    the base model's weights, the adapters', and AdamW's state for the trainable tensors only."""
    if tune.default:
        return resident_state(param_counts(shape)["total"], recipe), len(stored_tensors(shape))
    r, tr = RECIPES[recipe], finetune.trained_recipe(recipe, tune)  # tr: what the trainable parameters are
    trained = finetune.trainable_tensors(shape, tune)
    weights = finetune.weight_bytes(shape, recipe, tune)
    state = finetune.optimizer_bytes(shape, recipe, tune)
    start = [Event("start", "weights resident (frozen where they do not train)", "weights",
                   weights["base"] + weights["adapters"], r.source)]  # fmt: skip
    if tune.mode == "qlora":
        books = CODE_BOOKS * len(finetune.quantized(shape))
        start.append(Event("start", "bitsandbytes' code books (NF4 and the absmax's 8-bit code, fp32)", "weights",
                           books, "QuantState.code and state2.code: 1,088 bytes a 4-bit linear"))  # fmt: skip
    if state and tune.optimizer == "adamw":
        start.append(Event("start", "AdamW moments of the trainable parameters", "optimizer", state, tr.source))
    if tr.master:
        start.append(Event("start", "fp32 master weights of the trainable parameters", "master",
                           tr.master * finetune.numel(trained), tr.source))  # fmt: skip
    return start, sum(count for count, _, _ in trained)


def _optimizer_start(params: list, recipe: str, device: str, tune: finetune.Tuning, loop: loops.Loop, tensors: int,
                     block: int) -> list[Event]:  # fmt: skip
    """The optimizer's state (calc.optim_step) for the trainable `params` where it is not AdamW, else AdamW's
    step counters, one for each of `tensors` parameter tensors (calc.finetune gave AdamW's moments)."""
    opt, impl = tune.optimizer, loop.impl(device)
    unit = finetune.trained_recipe(recipe, tune).optimizer // 2  # bytes of one moment value
    out = []
    if opt != "adamw":
        out += optim_step.state_events(opt, params, loop.name, unit, OPTIMIZERS[opt].source)
    elif device == "cpu" or impl == "fused":  # AdamW's step counters: on the CPU unless fused (adam.py _init_group)
        counters = 4 * tensors if device == "cpu" else CUDA_BLOCK * tensors
        out.append(Event("start", "AdamW's step counters", "optimizer", counters, "a float32 tensor per parameter"))
    return out


def _optimizer_end(params: list, recipe: str, device: str, tune: finetune.Tuning, loop: loops.Loop,
                   block: int) -> list[Event]:  # fmt: skip
    """The loop's gradient clipping (calc.loops) and the optimizer step's temporaries (calc.optim_step) for
    the trainable `params`."""
    opt, unit = tune.optimizer, finetune.trained_recipe(recipe, tune).optimizer // 2
    temp, how = optim_step.temporaries(opt, loop.impl(device), optim_step.groups(params, loop.name), unit)
    name = OPTIMIZERS[opt].label
    end = loops.clip_events(loop, len(params), block)
    end += [Event("optimizer", f"{name} step: temporaries", "optimizer", temp, how),
            Event("optimizer", f"{name} step: temporaries freed", "optimizer", -temp, how)] if temp else []  # fmt: skip
    return end


def _graph_goes(rp: Replay) -> list[Event]:
    """What the training step held until it returned (enable_input_require_grads' leaf and its .grad)."""
    # in the allocator's blocks, as it was allocated
    return [Event("optimizer", f"free {t.label}", t.category, rp.blocks(-t.nbytes), "the step returns: the graph goes")
            for t in rp.after]  # fmt: skip


@lru_cache(maxsize=4)  # the ranks of ZeRO 1 or FSDP2 differ in their optimizer only: one replay for all (calc.api)
def _replayed(shape: Shape, args: tuple, gathered: fsdp.FullyShard | None = None, wraps: tuple | None = None, **how):
    """(replay, step, segments) of one micro-batch: a few periods of each run of layers replayed, stretched to the
    model's depth (layer_spans, _stretch), or the whole model where the stretch cannot be checked. `how`: replay's
    accumulate and loss_kind; `gathered`: FSDP2's groups gathered and reduced around the layers (calc.engines.fsdp);
    `wraps`: (chunks, replay) -> chunks functions, each an engine's events put around a pipeline stage's
    (_stage_replays): the segments are then a list for each, all of the one replay."""
    spans = layer_spans(shape, args[-1])
    arounds = wraps or (lambda chunks, rp: _sharded(chunks, shape, args[2], rp, gathered, args[-1]),)
    rp, st = replay(shape, *args, **how, layers=[lo for lo, _ in spans])
    chunks = _chunks(rp.events)
    replayed = [_stretch(around(chunks, rp), spans) for around in arounds]
    if None in replayed:
        rp, st = replay(shape, *args, **how)
        chunks = _chunks(rp.events)
        replayed = [_merge(around(chunks, rp)) for around in arounds]
    return rp, st, replayed if wraps else replayed[0]


def _sharded(chunks: list, shape: Shape, recipe: str, rp: Replay, gathered: fsdp.FullyShard | None,
             tune: finetune.Tuning = finetune.DEFAULT) -> list:  # fmt: skip
    """The chunks with FSDP2's events around them, or as they are without FSDP2."""
    if gathered is None:
        return chunks
    unit = 4 if gathered.mixed else RECIPES[recipe].weights  # the bf16 policy's shards (and reduction) are fp32
    return fsdp.around(chunks, gathered, optim_step.model_groups(shape, tune), unit, rp.blocks)


def whole(shape: Shape, args: tuple, gathered: fsdp.FullyShard | None = None, **how) -> list[Segment]:
    """The segments of every layer replayed, each op of each layer (what _replayed must equal: the tests)."""
    rp = replay(shape, *args, **how)[0]
    return _merge(_sharded(_chunks(rp.events), shape, args[2], rp, gathered, args[-1]))


def layer_kinds(shape: Shape, tune: finetune.Tuning) -> list:
    """The kind of each layer, 1 to shape.layers: the family's key (calc.families.family) and whether the
    layer is frozen (calc.finetune's freeze_layers: its parameters need no gradient)."""
    family = FAMILIES[shape.family]
    window = family.window_layer or (lambda shape, i: False)  # the layers given the window mask (GPT-OSS, Llama 4)
    layers = range(1, shape.layers + 1)
    return [(family.layer_kind(shape, i), i <= tune.freeze_layers, window(shape, i)) for i in layers]


def layer_spans(shape: Shape, tune: finetune.Tuning) -> list[tuple[int, int]]:
    """(first, last) layers each replayed layer stands for: itself and every period-th layer after it up to the
    last (the period: the number of consecutive replayed layers that stand for more than one, _wide_groups).

    The layers are cut into runs of one pattern of kinds (_period: Llama's one kind, Gemma 2's two alternating,
    Gemma 3's six). A run of more than SMALL periods is replayed as its first, second, third and last period: the
    first and the last meet other runs (or the embeddings, or the head), the second and the third show the run's
    steady state, and the third stands for every period up to the last but one. A shorter run of one kind is
    replayed whole, a layer of no run a period long on its own."""
    kinds, spans, start = layer_kinds(shape, tune), [], 0
    while start < len(kinds):
        period, count = _period(kinds, start)
        first = start + 1
        if count > SMALL:
            spans += [(i, i) for i in range(first, first + 2 * period)]
            spans += [(i, i + (count - 4) * period) for i in range(first + 2 * period, first + 3 * period)]
            start += count * period
            spans += [(i, i) for i in range(start - period + 1, start + 1)]
            continue
        run = next((i for i in range(start, len(kinds)) if kinds[i] != kinds[start]), len(kinds)) - start
        spans += [(i, i) for i in range(first, first + run)]
        start += run
    return spans


def _period(kinds: list, start: int) -> tuple[int, int]:
    """(period, whole periods) of the longest stretch of layers from `start` (counted from 0) whose kinds repeat
    with a period: the one that covers the most layers in more than SMALL periods, the shortest of equals;
    (1, 0) where none does."""
    best, left = (1, 0), len(kinds) - start
    for period in range(1, left // (SMALL + 1) + 1):
        end = next((i for i in range(start + period, len(kinds)) if kinds[i] != kinds[i - period]), len(kinds))
        count = (end - start) // period
        if count > SMALL and count * period > best[0] * best[1]:
            best = (period, count)
            if count * period > left - period:  # no longer period can cover more
                break
    return best


def _later_micro_batches(shape: Shape, args: tuple, first: Replay, loop: loops.Loop) -> list[Segment]:
    """Gradient accumulation (Trainer's gradient_accumulation_steps, or a bare loop calling backward k times):
    micro-batch 2 to k each run the first's allocations with every gradient already resident, each new
    parameter gradient added into .grad in place and freed as its node ends (AccumulateGrad). The first
    micro-batch's graph goes when its training step returns. The micro-batches after the second repeat it."""
    replayed = _replayed(shape, args, accumulate=True, loss_kind=loop.loss_kind)[2]
    k = loop.grad_accum
    label = "micro-batch 2" if k == 2 else f"micro-batches 2 to {k}"
    segs = [Segment(tuple(_graph_goes(first)))] if first.after else []
    for seg in replayed:
        events = tuple(e._replace(label=f"{e.label} ({label})") for e in seg.events)
        segs.append(Segment(events, seg.reps))
    return segs  # the last micro-batch's graph goes after the optimizer's step, as the first's sizes say


@lru_cache(maxsize=64)  # asked again for every sequence and batch of a fine-tuning (its frozen inputs are all it reads)
def trainable_params(shape: Shape, recipe: str, recompute: str, attention: str, tune: finetune.Tuning) -> int:
    """The parameters the replay writes a gradient for, each once (a tied weight's second gradient is added in
    place): the step replayed on the CPU allocator, whose sizes are exact, for one token."""
    segs = segments(shape, 1, 1, recipe, recompute, attention, "cpu", tune)
    grads = sum(seg.repeats * e.bytes for seg in segs for e in seg.events if e.category == "gradients"
                and e.phase == "backward")  # fmt: skip
    return grads // finetune.trained_recipe(recipe, tune).gradients


def _wide_groups(spans: list[tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """Each replayed layer that stands for several (layer_spans) -> (its period, how many periods it stands for):
    the period is the number of such layers in a row (the third period of a run, whose layers are consecutive)."""
    wide = [(lo, hi) for lo, hi in spans if hi > lo]
    out, i = {}, 0
    while i < len(wide):
        j = i + 1
        while j < len(wide) and wide[j][0] == wide[j - 1][0] + 1:
            j += 1
        for lo, hi in wide[i:j]:
            out[lo] = (j - i, (hi - lo) // (j - i) + 1)
        i = j
    return out


def _stretch(chunks: list[tuple[int, list[Event]]], spans: list[tuple[int, int]]) -> list[Segment] | None:
    """The segments of the whole model from the chunks of the replayed layers (_chunks, layers as numbered in the
    model): each run of the third period's chunks (forward: layers up; backward: down) is repeated over the
    periods it stands for, its layers shifted a period at a time, then the chunks are merged as _compress merges
    the whole replay's. None where the third period does not repeat the second, chunk for chunk (the run has no
    steady state to stretch)."""
    wide = _wide_groups(spans)
    if not wide:
        return _merge(chunks)
    second = {lo - period: period for lo, (period, _) in wide.items()}
    out, i, seen = [], 0, [0, 0]  # seen: chunks of the second periods, of the third
    for layer, _ in chunks:
        seen[0] += layer in second
    while i < len(chunks):
        j = i
        while j < len(chunks) and chunks[j][0] in wide:
            j += 1
        if j == i:
            out.append(chunks[i])
            i += 1
            continue
        group, seen[1] = chunks[i:j], seen[1] + j - i
        period, count = wide[group[0][0]]
        up = group[0][1][0].phase == "forward"
        twin = chunks[max(i - len(group), 0) : i] if up else chunks[j : j + len(group)]  # the second period's
        if [(k + period, e) for k, e in twin] != group or len({k for k, _ in group}) > period:
            return None
        # the same lists as the second period's: _merge sees them the same at once
        pairs = [(k, e) for (k, _), (_, e) in zip(group, twin, strict=True)]
        out += [(k + rep * period, e) for rep in (range(count) if up else range(count - 1, -1, -1)) for k, e in pairs]
        i = j
    return _merge(out) if seen[0] == seen[1] else None


def _chunks(events: list[tuple[int, Event]]) -> list[tuple[int, list[Event]]]:
    """The replayed events as chunks: runs of events of one layer (0: outside the layers) and one phase."""
    chunks: list[tuple[int, list[Event]]] = []
    for layer, e in events:
        if chunks and chunks[-1][0] == layer and chunks[-1][1][-1].phase == e.phase:
            chunks[-1][1].append(e)
        else:
            chunks.append((layer, [e]))
    return chunks


def _compress(events: list[tuple[int, Event]]) -> list[Segment]:
    """Segments of the replayed events: runs of consecutive layers whose events are the same become one
    segment repeated over those layers."""
    return _merge(_chunks(events))


def _merge(chunks: list[tuple[int, list[Event]]]) -> list[Segment]:
    """Segments of chunks (_chunks): runs of chunks of consecutive layers, up or down, whose events are the same
    become one segment repeated over those layers; a chunk outside the layers is a segment of its own."""
    segs: list[Segment] = []
    i, n = 0, len(chunks)
    while i < n:
        layer, evs = chunks[i]
        j = i + 1
        if layer:
            step = 1 if j < n and chunks[j][0] == layer + 1 else -1
            last, alike = layer, evs  # alike: the last list found equal (a stretched copy is the same list)
            while j < n:
                nxt, more = chunks[j]
                if nxt != last + step or not (more is alike or more == evs):
                    break
                last, alike, j = nxt, more, j + 1
            segs.append(Segment(tuple(evs), Reps(range(layer, last + step, step))))
        else:
            segs.append(Segment(tuple(evs)))
        i = j
    return segs
