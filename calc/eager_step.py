"""The eager walk of a transformers model (calc.families: a family's layer): one training step replayed op by op.

The step is the loop most people write with transformers: `loss = model(input_ids=x, labels=x).loss`
(under torch.autocast for the "autocast" recipe), `loss.backward()`, `optimizer.step()` (AdamW as PyTorch
picks it: single-tensor on the CPU, foreach on CUDA), `optimizer.zero_grad()`. Checkpointing is
transformers' gradient_checkpointing_enable(): non-reentrant torch.utils.checkpoint around each decoder
layer, which keeps the layer's input, re-runs the layer's forward when its backward first needs a saved
value, and saves the CPU generator's state.
"""

from __future__ import annotations

from . import counts, finetune, inventory, loops, optim_step, trl_head
from .counts import param_counts
from .families import FAMILIES
from .optimizers import OPTIMIZERS
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
    the final norm and an untied head (calc.finetune.trainable_tensors)."""
    if tune.mode == "full":
        return None
    if tune.adapters:
        return lambda layer, name: ".lora_" in name
    return lambda layer, name: layer > tune.freeze_layers if layer else not name.startswith(("embedding", "positions"))


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
):
    """The step's events as (layer, Event) pairs; layer 0 for events outside the layers. `accumulate`: a later
    micro-batch of gradient accumulation, whose parameter gradients are added into .grad (calc.replay)."""
    r = RECIPES[recipe]
    act = r.activations if not r.autocast else 4
    lora = (tune.rank, frozenset(f"{t}_proj" for t in tune.targets)) if tune.adapters else (0, frozenset())
    st = Step(shape, seq, micro_batch, act, r.autocast, attention, r.gradients, device, *lora, r.weights,
              tune.mode == "qlora")  # fmt: skip
    rp = Replay("forward", CUDA_BLOCK if device == "cuda" else 1, trainable(tune))
    rp.accumulating = accumulate  # issue 19: gradient accumulation (calc.loops)
    ops = Ops(rp, st)
    h, n, v = shape.hidden, st.tokens, shape.vocab
    unit = st.act if not r.autocast else 4  # the embedding's output: the weights' dtype
    # forward: embedding (its backward writes a dense gradient of the table), positions, mask
    x = ops.new(n * h, unit, "token embeddings", "embedding: s x b x h values")
    rp.node("embedding", x, inputs=[("embedding.weight", v * h * st.param_bytes, "param")])
    leaf = None
    if recompute == "full" and not x.requires_grad:
        # transformers' activation_checkpointing_enable() (and peft's get_peft_model on a checkpointed model)
        # calls enable_input_require_grads(): a forward hook makes a frozen embedding's output require grad,
        # a leaf whose AccumulateGrad node holds it (and, after backward, its .grad) until the graph goes with
        # the loss, when the training step returns. Every layer then records its nodes.
        x.requires_grad, leaf = True, rp.keep(x)
    family = FAMILIES[shape.family]
    if family.embed:  # the family's model rebinds inputs_embeds to its own function of them
        scaled = family.embed(ops, x)
        rp.drop(x)
        x = scaled
    held = [rp.keep(x)]  # the model's forward holds its inputs_embeds (and position_embeds) until it returns
    if shape.positions == "learned":
        pos = ops.new(seq * h, unit, "position embeddings", "wpe(position_ids): s x h values")
        rp.node("embedding", pos, inputs=[("positions", shape.context * h * st.param_bytes, "param")])
        held.append(pos)
        summed = ops.add(x, pos, "token + position embeddings")
        rp.drop(x)
        x = ops.dropout(summed, "embeddings")
        rp.drop(summed)
        cos = sin = None
    else:
        # LlamaRotaryEmbedding: cos and sin of (1, s, head_dim), in the embedding's dtype (GPT-OSS's: head_dim / 2)
        d = family.rotary_width(shape) if family.rotary_width else shape.head_dim
        cos = ops.new(seq * d, unit, "rotary cos", "cos(position x inverse frequency)")
        sin = ops.new(seq * d, unit, "rotary sin", "sin(position x inverse frequency)")
        cos.requires_grad = sin.requires_grad = False
    mask = window = None
    if attention == "eager":  # a (b, 1, s, s) additive causal mask in the embedding's dtype
        mask = ops.new(micro_batch * seq * seq, unit, "causal mask", "create_causal_mask: b x s x s values")
        mask.requires_grad = False
        if family.window_mask and family.window_mask(shape):  # a sliding-window mask too, used or not (Qwen2-MoE)
            window = ops.new(micro_batch * seq * seq, unit, "sliding-window mask", "create_sliding_window_causal_mask")
            window.requires_grad = False
            held.append(window)
    elif family.sdpa_window and family.sdpa_window(shape):  # under sdpa the causal mask is is_causal, not a tensor
        window = ops.new(micro_batch * seq * seq, 1, "chunked mask", "create_chunked_causal_mask: b x s x s booleans")
        window.requires_grad = False
        held.append(window)
    layer_fn = family.layer
    for layer in range(1, shape.layers + 1):
        rp.layer = layer
        slides = window is not None and family.window_layer and family.window_layer(shape, layer)
        layer_mask = window if slides else mask  # the mask this layer is given (a checkpoint keeps it)
        if recompute == "full":
            x = _checkpointed(ops, layer_fn, x, cos, sin, layer_mask, device)
        else:
            y = layer_fn(ops, x, cos, sin, layer_mask)
            rp.drop(x)
            x = y
    rp.layer = 0
    norm = ops.rms_norm if shape.norm == "rms" else ops.layer_norm
    final = norm(x, "final norm") if shape.final_norm else rp.keep(x)
    rp.drop(x)
    # the base model's forward returns (LlamaModel, GPT2Model), letting go of what it held; its output
    # (last_hidden_state) stays with the causal-LM forward, which applies the head and the loss
    rp.drop(*held, *(t for t in (cos, sin, mask) if t is not None), why="the base model's forward returns")
    head = "embedding" if shape.tied else "lm_head"
    if loss_kind == "trl-chunked":  # issue 19: TRL's chunked log-prob head, no logits (calc.trl_head)
        compute = 2 if r.autocast else final.unit
        loss = trl_head.head(ops, final, head, compute, device)
        rp.drop(final, why="the model's forward returns")
        ops.end_autocast()
        return _backward(rp, loss, leaf), st
    head_bias = shape.bias and shape.head_bias and not shape.tied
    logits = ops.linear(final, h, v, head, head_bias, "logits", "logits")
    if family.head:  # the family's causal-LM forward rebinds the logits to its own function of them
        scaled = family.head(ops, logits)
        rp.drop(logits)
        logits = scaled
    # ForCausalLMLoss: logits.float(), labels padded and shifted (a copy), cross_entropy = log_softmax +
    # nll_loss. The model's outputs still hold the final hidden states (last_hidden_state).
    logits32 = logits if logits.unit == 4 else ops.unary("logits in fp32", logits, [], 4, "logits")
    padded = ops.new(n + micro_batch, 8, "padded labels", "nn.functional.pad(labels, (0, 1))")
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
    rp.drop(logits, why="the model's output is dropped once the loop has taken .loss")
    return _backward(rp, loss, leaf), st


def _backward(rp: Replay, loss: T, leaf: T | None) -> Replay:
    """loss.backward(): every node's backward, then what the graph keeps until the step returns."""
    rp.grads[id(loss)] = T(0, "1")
    rp.backward()
    if leaf is not None:
        rp.after = [leaf, rp.grads.pop(id(leaf))]
    for g in rp.grads.values():
        rp.drop(g, why="gradient of an input that needs none")
    rp.grads.clear()
    return rp


def _checkpointed(ops: Ops, layer_fn, x: T, cos, sin, mask, device: str) -> T:
    """A layer under non-reentrant checkpoint: its forward keeps nothing but its input (and the RNG state);
    its backward re-runs the forward, then runs the re-created nodes' backward."""
    rp = ops.rp
    outer, rp.nodes = rp.nodes, []
    y = layer_fn(ops, x, cos, sin, mask)
    for node in rp.nodes:  # nothing is saved: release what the nodes held
        rp.drop(*node.saved, why="checkpoint: not saved")
    rp.nodes = outer
    rng = rp.new(RNG_STATE if device == "cpu" else 0, "RNG state", "checkpoint(preserve_rng_state=True)")
    if not y.requires_grad:  # a frozen layer below every trainable one: nothing packed, nothing kept
        rp.drop(rng, x, why="checkpoint: nothing in the layer needs a gradient")
        return y
    # the checkpoint keeps every tensor argument for the re-run: the input, and the rotary tables and mask
    saved = [x, rng, *(t for t in (cos, sin, mask) if t is not None)]
    for t in saved:
        rp.keep(t)
    rp.nodes.append(Node("checkpoint", saved, y, [], [], rp.layer))
    rp.drop(rng)
    def rerun(x0: T) -> T:  # under the autocast state of the forward, whose weight cache it clears
        out = layer_fn(ops, x0, cos, sin, mask)
        ops.end_autocast()
        return out

    rp.nodes[-1].recompute = rerun
    rp.drop(x)
    return y


SMALL = 4  # layers replayed: the first, two in the middle (which every deeper model repeats), the last


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
):
    """The step as walk segments: the state, the replayed forward and backward (a layer's events once,
    repeated over the layers where they are the same), AdamW's step and zero_grad.

    A deep model is replayed with SMALL layers: every layer but the first and the last runs the same ops
    on the same sizes, so the middle layers' segments are stretched to the real depth (checked: where the
    middle layers' events differ, the whole model is replayed). Frozen layers (`tune`) break that sameness:
    a model with some frozen is replayed whole."""
    r = RECIPES[recipe]
    args = (seq, micro_batch, recipe, recompute, attention, device, tune)
    rp, st, replayed = _replayed(shape, args, loss_kind=loop.loss_kind)
    if tune.default:
        start = resident_state(param_counts(shape)["total"], recipe)
        tensors = len(stored_tensors(shape))
    else:  # the base model's weights, the adapters', and AdamW's state for the trainable tensors only
        trained = finetune.trainable_tensors(shape, tune)
        weights = finetune.weight_bytes(shape, recipe, tune)
        state = finetune.optimizer_bytes(shape, recipe, tune)
        start = [Event("start", "weights resident (frozen where they do not train)", "weights",
                       weights["base"] + weights["adapters"], r.source)]  # fmt: skip
        if tune.mode == "qlora":
            books = CODE_BOOKS * shape.layers * len(finetune.linears(shape))
            start.append(Event("start", "bitsandbytes' code books (NF4 and the absmax's 8-bit code, fp32)", "weights",
                               books, "QuantState.code and state2.code: 1,088 bytes a 4-bit linear"))  # fmt: skip
        if state and tune.optimizer == "adamw":
            start.append(Event("start", "AdamW moments of the trainable parameters", "optimizer", state, r.source))
        if r.master:
            start.append(Event("start", "fp32 master weights of the trainable parameters", "master",
                               r.master * finetune.numel(trained), r.source))  # fmt: skip
        tensors = sum(count for count, _, _ in trained)
    start.append(Event("start", "token ids (int64), input and labels", "activations", 8 * st.tokens, "s x b x 8 bytes"))
    # issue 19: the loop's own tensors and the optimizer's state and step (calc.loops, calc.optim_step)
    opt, impl, unit = tune.optimizer, loop.impl(device), r.optimizer // 2  # unit: bytes of one moment value
    params = optim_step.trainable(shape, tune)
    if opt != "adamw":
        start += optim_step.state_events(opt, params, loop.name, unit, OPTIMIZERS[opt].source)
    elif device == "cpu" or impl == "fused":  # AdamW's step counters: on the CPU unless fused (adam.py _init_group)
        counters = 4 * tensors if device == "cpu" else CUDA_BLOCK * tensors
        start.append(Event("start", "AdamW's step counters", "optimizer", counters, "a float32 tensor per parameter"))
    start += loops.start_events(loop, shape, st.tokens, rp.block)
    segs = [Segment(tuple(start)), *replayed]
    if loop.grad_accum > 1:
        segs += _later_micro_batches(shape, args, rp, loop)
    grads = sum(seg.repeats * e.bytes for seg in replayed for e in seg.events if e.category == "gradients")
    temp, how = optim_step.temporaries(opt, impl, optim_step.groups(params, loop.name), unit)
    name = OPTIMIZERS[opt].label
    end = loops.clip_events(loop, len(params), rp.block)
    end += [Event("optimizer", f"{name} step: temporaries", "optimizer", temp, how),
            Event("optimizer", f"{name} step: temporaries freed", "optimizer", -temp, how)] if temp else []  # fmt: skip
    end.append(Event("optimizer", "zero_grad: free gradients", "gradients", -grads,
                     "optimizer.zero_grad(set_to_none=True)"))  # fmt: skip
    end += _graph_goes(rp)
    segs.append(Segment(tuple(end)))
    return segs


def _graph_goes(rp: Replay) -> list[Event]:
    """What the training step held until it returned (enable_input_require_grads' leaf and its .grad)."""
    # in the allocator's blocks, as it was allocated
    return [Event("optimizer", f"free {t.label}", t.category, rp.blocks(-t.nbytes), "the step returns: the graph goes")
            for t in rp.after]  # fmt: skip


def _replayed(shape: Shape, args: tuple, **how):
    """(replay, step, segments) of one micro-batch, SMALL layers stretched to the model's depth where they can be.
    `how`: replay's accumulate and loss_kind."""
    tune = args[-1]
    small = shape.replace(layers=SMALL) if shape.layers > SMALL and not tune.freeze_layers else shape
    rp, st = replay(small, *args, **how)
    replayed = _compress(rp.events)
    if small is not shape:
        replayed = _stretch(replayed, shape.layers)
        if replayed is None:
            replayed = _compress(replay(shape, *args, **how)[0].events)
    return rp, st, replayed


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


def trainable_params(shape: Shape, recipe: str, recompute: str, attention: str, tune: finetune.Tuning) -> int:
    """The parameters the replay writes a gradient for, each once (a tied weight's second gradient is added in
    place): the step replayed on the CPU allocator, whose sizes are exact, for one token."""
    segs = segments(shape, 1, 1, recipe, recompute, attention, "cpu", tune)
    grads = sum(seg.repeats * e.bytes for seg in segs for e in seg.events if e.category == "gradients"
                and e.phase == "backward")  # fmt: skip
    return grads // RECIPES[recipe].gradients


def _stretch(segs: list[Segment], layers: int) -> list[Segment] | None:
    """The segments of a SMALL-layer replay for a model of `layers`: layer 1 stays 1, SMALL becomes `layers`,
    the middle ones cover 2 to layers - 1. None if a segment splits the middle layers."""
    big = {1: 1, SMALL: layers, **{k: (2 if k == 2 else layers - 1) for k in range(2, SMALL)}}
    out = []
    for seg in segs:
        if seg.reps is None:
            out.append(seg)
            continue
        small = list(seg.reps.layers)
        middle = set(range(2, SMALL))
        if middle & set(small) and not middle <= set(small):
            return None
        first, last = big[small[0]], big[small[-1]]
        step = 1 if last >= first else -1
        out.append(Segment(seg.events, Reps(range(first, last + step, step))))
    return out


def _compress(events: list[tuple[int, Event]]) -> list[Segment]:
    """Segments of the replayed events: runs of consecutive layers whose events are the same become one
    segment repeated over those layers."""
    chunks: list[tuple[int, list[Event]]] = []
    for layer, e in events:
        if chunks and chunks[-1][0] == layer and chunks[-1][1][-1].phase == e.phase:
            chunks[-1][1].append(e)
        else:
            chunks.append((layer, [e]))
    segs: list[Segment] = []
    i = 0
    while i < len(chunks):
        layer, evs = chunks[i]
        j = i + 1
        if layer:
            step = 1 if j < len(chunks) and chunks[j][0] == layer + 1 else -1
            while j < len(chunks) and chunks[j][0] == chunks[j - 1][0] + step and chunks[j][1] == evs:
                j += 1
            last = chunks[j - 1][0]
            segs.append(Segment(tuple(evs), Reps(range(layer, last + step, step))))
        else:
            segs.append(Segment(tuple(evs)))
        i = j
    return segs
