#!/usr/bin/env python3
"""Measure data, tensor and pipeline parallelism as torch runs them, rank by rank (issue 31): DDP, DDP with
ZeroRedundancyOptimizer, FSDP2, tensor parallelism over the decoder layers' linears (with sequence parallelism, under
eager attention, and under FSDP2 on a 2D mesh), and torch.distributed.pipelining's schedules.

Each case is a real multi-process CPU step: `world` processes (torch.multiprocessing, gloo over loopback), each
building the same tiny transformers model from a config with random weights (hf_models.py, as measure_families.py
builds it), wrapped in DistributedDataParallel with torch's defaults and stepped with AdamW (ZeRO 0) or
ZeroRedundancyOptimizer(optimizer_class=AdamW) (ZeRO 1), or wrapped with FSDP2's fully_shard on each decoder
layer and then on the model, reshard_after_forward True (torch's default: ZeRO 3) or False (ZeRO 2), and
stepped with AdamW; each on its own batch. Tensor parallelism ("tp") is the plan most hand-written
parallelize_module calls give (calc.engines.tensor): ColwiseParallel on q, k, v, gate and up, RowwiseParallel on
o and down, on a one-dimensional device mesh, every rank on the same batch; "tp-hf" is transformers' own plan, the
model loaded with from_pretrained(tp_plan="auto") from a checkpoint saved in bf16, into fp32 (calc.engines.tensor:
the same split and the embedding and head split by vocabulary); "tp-sp" adds torchtitan's sequence parallelism
(sequence_parallel); "tp-eager" is "tp" under eager attention; "fsdp2-tp" and "fsdp2-zero2-tp" run fully_shard over
the "dp" dimension of a (world / 2, 2) mesh whose "tp" dimension runs the layers plan (fsdp_tp), "fsdp2-tp-sp"
with its sequence parallelism, as torchtitan runs 2D. Every rank measures with profile_step's harness: its
allocator's events from an empty start, two warm-up steps (DDP rebuilds its buckets in the second) and the third
measured. The prediction is the CLI's, from the config.json and the flags a user
types (`--walk eager --dp N --engine ddp|fsdp2 [--zero 1|2|3] --device cpu`, `--tp N [--tp-plan transformers |
--sequence-parallel]`, `--dp N/2 --tp 2 --zero 3|2 --engine fsdp2 [--sequence-parallel]`, or `--pp N ...`):
each rank's peak (`rank_peaks`) against that rank's.

gloo runs each collective on a worker thread of its own, and torch 2.13's profiler does not see a free made
there. Some are found (profile_step: a block whose address is handed out again, a collective's own buffers
counted freed when it returns); whether gloo's thread or the step drops a tensor's last reference changes from
run to run, so each case runs RUNS times and each rank's lowest peak is kept. DDP's broadcast of the module's
buffers from rank 0 (a flat copy of the rotary tables' inverse frequencies) is freed there, so rank 0's
running total keeps those few bytes (`measured_start` is higher than the other ranks' by them). They are left
in the measured figures.

    python scripts/training/measure_engines.py              # measure, print a table
    python scripts/training/measure_engines.py --write      # and write docs/data/engines.json
    python scripts/training/measure_engines.py --repredict --write   # ask the CLI again (calc changed)
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import calc_cli  # noqa: E402
import hf_models  # noqa: E402
import measure_families  # noqa: E402
import measure_lora  # noqa: E402
import measure_transformers  # noqa: E402
import profile_step  # noqa: E402
import torch  # noqa: E402
from transformers.loss.loss_utils import ForCausalLMLoss  # noqa: E402

from calc.engines.pipeline import STATIC_GRAPH  # noqa: E402
from calc.hf import shape_from_config  # noqa: E402
from calc.parallel import stage_layers  # noqa: E402

RESULTS = ROOT / "docs" / "data" / "engines.json"
SEQ, MICRO_BATCH = 128, 2
# llama-tied: 6 layers (the eager walk replays 5 and stretches the middle ones) and a tied head, FSDP2's root
# holding the one embedding matrix; qwen3_moe: 4 experts a layer (transformers' fused grouped_mm weights, which
# FSDP2 cuts by expert); llama-mha: as many key/value heads as query heads (4 processes split them) and a small
# vocabulary, so that the peak falls in the layers, where tensor parallelism's collectives are
MODELS = {"llama": measure_families.family("llama"), "qwen3": measure_families.FAMILIES["qwen3"],
          "llama-tied": hf_models.Model("llama", 6, 64, 4, 2, 128, 512, (*measure_families.TOKENS,
                                        *measure_families.HEAD, ("tie_word_embeddings", True))),
          "qwen3_moe": measure_families.FAMILIES["qwen3_moe"],
          "llama-mha": hf_models.Model("llama", 2, 64, 4, 4, 256, 128, (*measure_families.TOKENS,
                                       *measure_families.HEAD)),
          "llama-4": hf_models.Model("llama", 4, 64, 4, 2, 128, 512, (*measure_families.TOKENS,
                                     *measure_families.HEAD)),
          "qwen3-4": hf_models.Model("qwen3", 4, 64, 4, 2, 128, 512, (*measure_families.TOKENS,
                                     *measure_families.HEAD)),
          "llama-6": hf_models.Model("llama", 6, 64, 4, 2, 128, 512, (*measure_families.TOKENS,
                                     *measure_families.HEAD))}  # fmt: skip
FAMILIES = tuple(MODELS)
ENGINES = {"ddp": 0, "ddp-zero1": 1, "fsdp2": 3, "fsdp2-zero2": 2, "tp": 0, "tp-hf": 0, "tp-sp": 0, "tp-eager": 0,
           "fsdp2-tp": 3, "fsdp2-zero2-tp": 2, "fsdp2-tp-sp": 3, "fsdp2-lora": 3, "fsdp2-zero2-lora": 2,
           "pp-1f1b": 0, "pp-gpipe": 0, "pp-interleaved-1f1b": 0, "pp-1f1b-ddp": 0, "pp-1f1b-tp": 0,
           "pp-1f1b-fsdp2": 2, "pp-1f1b-fsdp2-tp": 2, "pp-1f1b-ddp-zero1": 1, "pp-interleaved-1f1b-ddp": 0,
           "pp-interleaved-1f1b-ddp-zero1": 1, "pp-1f1b-tp-sp": 0, "pp-1f1b-fsdp2-zero3": 3,
           "pp-gpipe-fsdp2-zero3": 3, "pp-1f1b-fsdp2-tp-zero3": 3, "pp-gpipe-ddp": 0, "pp-gpipe-fsdp2": 2,
           "pp-gpipe-tp": 0, "pp-interleaved-1f1b-tp": 0}  # its ZeRO
# pp-1f1b-ddp, pp-1f1b-tp: 1F1B over 2 stages beside DDP over each stage's module, or the layers plan over each
# stage's layers, on a (pp, dp) or (pp, tp) mesh of 4 processes (torchtitan's order: the pipeline's outermost)
BESIDE = {"pp-1f1b-ddp": ("dp",), "pp-1f1b-tp": ("tp",), "pp-1f1b-fsdp2": ("dp",), "pp-1f1b-fsdp2-tp": ("dp", "tp"),
          "pp-1f1b-ddp-zero1": ("dp",), "pp-interleaved-1f1b-ddp": ("dp",), "pp-interleaved-1f1b-ddp-zero1": ("dp",),
          "pp-1f1b-tp-sp": ("tp",), "pp-1f1b-fsdp2-zero3": ("dp",), "pp-gpipe-fsdp2-zero3": ("dp",),
          "pp-1f1b-fsdp2-tp-zero3": ("dp", "tp"), "pp-gpipe-ddp": ("dp",), "pp-gpipe-fsdp2": ("dp",),
          "pp-gpipe-tp": ("tp",), "pp-interleaved-1f1b-tp": ("tp",)}
# the mesh's dimensions beside the pipeline's, 2 processes each; pp-1f1b-fsdp2: fully_shard on each
# stage's layers and on the stage's module over "dp", reshard_after_forward=False (torchtitan's default beside a
# pipeline); pp-1f1b-ddp-zero1: DDP over each stage's module and ZeroRedundancyOptimizer(optimizer_class=AdamW) over
# the stage's parameters, both over the stage's "dp" group; pp-interleaved-1f1b-ddp(-zero1): the same under
# interleaved 1F1B, DDP over each of the rank's two stage modules and one ZeroRedundancyOptimizer over both;
# pp-1f1b-tp-sp: pp-1f1b-tp with torchtitan's sequence parallelism over "tp" (sequence_parallel), applied before the
# stages are cut: the first layer cuts the sequence, the stages send and receive s / tp positions;
# pp-1f1b-fsdp2-zero3, pp-gpipe-fsdp2-zero3: pp-1f1b-fsdp2 with reshard_after_forward=True (torch's default, and
# torchtitan's under its "always" policy), under 1F1B or GPipe; pp-1f1b-fsdp2-tp-zero3: pp-1f1b-fsdp2-tp
# resharding after forward; pp-gpipe-ddp, pp-gpipe-fsdp2, pp-gpipe-tp: pp-1f1b-ddp, pp-1f1b-fsdp2 and pp-1f1b-tp
# under GPipe; pp-interleaved-1f1b-tp: the layers plan beside interleaved 1F1B (2 ranks of 2 stages, 2 of tp)


def schedule_of(engine: str) -> str:
    """A pipeline case's schedule, as --pp-schedule names it."""
    for beside in ("-sp", "-zero1", "-zero3", "-ddp", "-tp", "-fsdp2"):
        engine = engine.removesuffix(beside)
    return engine[3:]
TWO_D = ("fsdp2-tp", "fsdp2-zero2-tp", "fsdp2-tp-sp")  # FSDP2 x TP: reshard_after_forward True (torch's default)
# or False; fsdp2-tp-sp: with torchtitan's sequence parallelism over the tp dimension (its 2D default)
LORA = {"fsdp2-lora": ["--finetune", "lora"], "fsdp2-zero2-lora": ["--finetune", "lora"]}  # peft's LoRA: r 8 on q, v
TP_PLAN = {
    **dict.fromkeys(
        ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"), "colwise"
    ),
    "self_attn.o_proj": "rowwise",
    "mlp.down_proj": "rowwise",
}
WORLDS = {"ddp": (2, 4), "ddp-zero1": (2, 4), "fsdp2": (2, 3, 4), "fsdp2-zero2": (2, 3, 4)}  # 3: FSDP2 pads rows
FSDP2 = {"fsdp2": (2, 3), "fsdp2-zero2": (2, 3)}
# 2 key/value heads; fsdp2-tp(-sp): a (2, 2) mesh
TP = {"tp": (2,), "tp-hf": (2,), "tp-sp": (2,), "fsdp2-tp": (4,), "fsdp2-tp-sp": (4,)}
FSDP2_LORA = {"fsdp2-lora": (2, 3), "fsdp2-zero2-lora": (2,)}
# 4 layers over 2 or 4 stages; 3 stages: uneven (2, 1, 1); interleaved 1F1B: 2 ranks, 2 stages each (one layer)
PIPELINES = {"pp-1f1b": (2, 4), "pp-gpipe": (2, 4), "pp-interleaved-1f1b": (2,)}
# a (2, 2) mesh: 2 pipeline ranks of 2 stages each (4 stages), each beside DDP over its data-parallel pair
INTERLEAVED_DDP = {"pp-interleaved-1f1b-ddp": (4,), "pp-interleaved-1f1b-ddp-zero1": (4,)}
FSDP2_ZERO3 = {"pp-1f1b-fsdp2-zero3": (4,), "pp-gpipe-fsdp2-zero3": (4,)}  # 2 stages of 2 FSDP2 processes
MEASURED = {
    "llama": {**WORLDS, **TP, "fsdp2-zero2-tp": (4,), **FSDP2_LORA},
    "qwen3": {**WORLDS, **TP, **FSDP2_LORA},
    "llama-tied": {**FSDP2, "tp-hf": (2,)},  # transformers' plan on a tied head: the embedding's shard its weight
    "qwen3_moe": FSDP2,
    "llama-mha": {"tp": (2, 4), "tp-hf": (2, 4), "tp-sp": (2, 4), "tp-eager": (2,), "fsdp2-tp": (4,),
                  "fsdp2-tp-sp": (4,)},
    "llama-4": {"pp-1f1b": (2, 3, 4), "pp-gpipe": (2, 3, 4), "pp-interleaved-1f1b": (2,), "pp-1f1b-ddp": (4,),
                "pp-1f1b-tp": (4,), "pp-1f1b-fsdp2": (4,), "pp-1f1b-fsdp2-tp": (8,), "pp-1f1b-ddp-zero1": (4,),
                "pp-1f1b-tp-sp": (4,), **INTERLEAVED_DDP, **FSDP2_ZERO3, "pp-1f1b-fsdp2-tp-zero3": (8,),
                "pp-gpipe-ddp": (4,), "pp-gpipe-fsdp2": (4,), "pp-gpipe-tp": (4,), "pp-interleaved-1f1b-tp": (4,)},
    "qwen3-4": {**PIPELINES, "pp-1f1b-ddp": (4,), "pp-1f1b-tp": (4,), "pp-1f1b-fsdp2": (4,), "pp-1f1b-tp-sp": (4,),
                "pp-1f1b-ddp-zero1": (4,), **INTERLEAVED_DDP, **FSDP2_ZERO3},
    "llama-6": {"pp-interleaved-1f1b": (2, 3), **INTERLEAVED_DDP},  # 4 stages over 6 layers (2, 2, 1, 1), or 6 of one
}


def attention(engine: str) -> str:
    """The attention a case's model runs: transformers' eager attention under "tp-eager" (the layers plan), sdpa
    (torch's CPU flash kernel) under every other engine."""
    return "eager" if engine == "tp-eager" else "sdpa"


def local_stages(engine: str) -> int:
    """The pipeline stages a rank runs: 2 under interleaved 1F1B (torchtitan's default for a looped schedule,
    calc.engines.pipeline.LOCAL_STAGES), else 1."""
    return 2 if engine.startswith("pp-interleaved-1f1b") else 1


def stages(engine: str, world: int) -> int:
    """A pipeline's ranks (pp): every process, or half of them beside DDP or tensor parallelism (a (pp, 2) mesh)."""
    return world // 2 ** len(BESIDE[engine]) if engine in BESIDE else world


def micro_batches(engine: str, world: int) -> int:
    """A pipeline's micro-batches a step (n_microbatches, the CLI's --grad-accum): twice its ranks, so that
    1F1B reaches its steady state on every stage but the first; 1 for the other engines."""
    return 2 * stages(engine, world) if engine.startswith("pp-") else 1
MIXED = "fsdp-bf16"  # FSDP2's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) over the fp32 model
GRID = [(name, engine, world, precision, checkpointing)
        for name in FAMILIES for engine, worlds in MEASURED[name].items() for world in worlds
        for precision, checkpointing in itertools.product(
            hf_models.PRECISIONS + ((MIXED,) if ENGINES[engine] > 1 and engine not in (*LORA, *TWO_D, *BESIDE) else ()),
            hf_models.CHECKPOINTING)]  # fmt: skip


def _rank(rank: int, world: int, port: int, case: tuple, out) -> None:
    """One process of a case: its measured step, put on `out` as (rank, measurements)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world),  # as torchrun sets them (from_pretrained's tp_plan reads them)
                      HF_DEACTIVATE_ASYNC_LOAD="1")  # from_pretrained loads on this thread, which the profiler sees
    torch.set_num_threads(1)  # world processes on the machine's cores
    warnings.simplefilter("ignore")
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    name, engine, precision, checkpointing = case
    model = MODELS[name]

    def make():
        if engine.startswith("pp-"):  # the rank's stages of the model's layers (calc.parallel.stage_layers)
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

            net = hf_models.build(model, "sdpa", checkpointing)
            local, pp, group = local_stages(engine), stages(engine, world), None  # group: the pipeline's processes
            if engine in BESIDE:  # a (pp, 2[, 2]) mesh: the layers plan over "tp" first, as torchtitan applies it
                dims = BESIDE[engine]
                mesh = init_device_mesh("cpu", (pp, *(2 for _ in dims)), mesh_dim_names=("pp", *dims))
                group = mesh["pp"].get_group()
                if engine.endswith("-sp"):  # the layers plan with its sequence parallelism, on the whole model
                    sequence_parallel(net, mesh["tp"])
                elif "tp" in BESIDE[engine]:
                    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

                    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
                    for layer in net.model.layers:
                        parallelize_module(layer, mesh["tp"], {n: styles[style]() for n, style in TP_PLAN.items()})
            modules, pipes = [], []  # a rank runs stages stage, stage + pp, ... (torchtitan's default)
            for s in range(rank // (world // pp), local * pp, pp):
                layers = stage_layers(shape_from_config(model.config()), local * pp, s)
                modules.append(Stage(net, layers.start - 1, layers.stop - 1, s == 0, s == local * pp - 1,
                                     precision == "autocast", 2 if engine.endswith("-sp") and s else 1))  # fmt: skip
                if "-ddp" in engine:  # DDP over the stage's data-parallel group, torch's defaults; under interleaved
                    # 1F1B and GPipe static_graph=True: with the defaults torch 2.13's reducer fails at the second
                    # step, its bucket rebuild counting every parameter twice (INTERNAL ASSERT, reducer.cpp)
                    modules[-1] = torch.nn.parallel.DistributedDataParallel(
                        modules[-1], process_group=mesh["dp"].get_group(),
                        static_graph=schedule_of(engine) in STATIC_GRAPH)
                if "-fsdp2" in engine:  # FSDP2 over it: each layer a group, then the stage's module
                    from torch.distributed.fsdp import fully_shard

                    reshard = ENGINES[engine] == 3
                    for layer in modules[-1].layers:
                        fully_shard(layer, mesh=mesh["dp"], reshard_after_forward=reshard)
                    fully_shard(modules[-1], mesh=mesh["dp"], reshard_after_forward=reshard)
                pipes.append(PipelineStage(modules[-1], s, local * pp, torch.device("cpu"), group=group))
            del net  # the stages keep their own modules; the rest of the model goes
            schedule = {"1f1b": Schedule1F1B, "gpipe": ScheduleGPipe,
                        "interleaved-1f1b": ScheduleInterleaved1F1B}[schedule_of(engine)]
            pipe = schedule(pipes if local > 1 else pipes[0], micro_batches(engine, world),
                            loss_fn=lambda logits, labels: ForCausalLMLoss(logits, labels, vocab_size=model.vocab))
            params = [p for m in modules for p in m.parameters()]  # one AdamW over the rank's stages, in order
            if ENGINES[engine] == 1:  # ZeroRedundancyOptimizer over the stage's data-parallel group
                from torch.distributed.optim import ZeroRedundancyOptimizer

                return pipe, ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, lr=1e-3,
                                                     process_group=mesh["dp"].get_group())  # fmt: skip
            return pipe, torch.optim.AdamW(params, lr=1e-3)
        if engine == "tp-hf":  # transformers' own plan, as from_pretrained(tp_plan="auto") applies it
            from torch.distributed.device_mesh import init_device_mesh
            from transformers import AutoModelForCausalLM

            net = AutoModelForCausalLM.from_pretrained(saved(name), tp_plan="auto", dtype=torch.float32,
                                                       device_mesh=init_device_mesh("cpu", (world,)),
                                                       attn_implementation="sdpa")  # fmt: skip
            if checkpointing == "full":
                net.activation_checkpointing_enable()
            return net.train(), hf_models.make_optimizer(net)
        if engine in TWO_D:  # FSDP2 over the dp dimension of a (dp, 2) mesh, the layers plan over its tp one
            return fsdp_tp(hf_models.build(model, "sdpa", checkpointing), world, ENGINES[engine] == 3,
                           engine.endswith("-sp"))  # fmt: skip
        if engine == "tp-sp":  # the layers plan with torchtitan's sequence parallelism
            from torch.distributed.device_mesh import init_device_mesh

            net = hf_models.build(model, "sdpa", checkpointing)
            sequence_parallel(net, init_device_mesh("cpu", (world,)))
            return net, hf_models.make_optimizer(net)
        if engine in ("tp", "tp-eager"):  # one parallelize_module call a decoder layer, torch's defaults
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

            net, mesh = hf_models.build(model, attention(engine), checkpointing), init_device_mesh("cpu", (world,))
            styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
            for layer in net.model.layers:
                parallelize_module(layer, mesh, {name: styles[style]() for name, style in TP_PLAN.items()})
            return net, hf_models.make_optimizer(net)
        if ENGINES[engine] > 1:  # FSDP2: each decoder layer a group, then the root (embedding, final norm, head)
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            if engine in LORA:  # peft's LoRA first, as accelerate and TRL wrap a peft model
                net = measure_lora.tuned(model, "sdpa", checkpointing, measure_lora.Tune("lora"))
                layers = net.base_model.model.model.layers
                for layer in layers:
                    fully_shard(layer, reshard_after_forward=ENGINES[engine] == 3)
                fully_shard(net, reshard_after_forward=ENGINES[engine] == 3)
                return net, torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=1e-3)
            net = hf_models.build(model, "sdpa", checkpointing)
            bf16 = precision == MIXED  # MixedPrecisionPolicy() casts nothing: torch's default
            policy = MixedPrecisionPolicy(torch.bfloat16, torch.float32) if bf16 else MixedPrecisionPolicy()
            for layer in net.model.layers:
                fully_shard(layer, reshard_after_forward=ENGINES[engine] == 3, mp_policy=policy)
            fully_shard(net, reshard_after_forward=ENGINES[engine] == 3, mp_policy=policy)
            return net, hf_models.make_optimizer(net)
        net = torch.nn.parallel.DistributedDataParallel(hf_models.build(model, "sdpa", checkpointing))
        if ENGINES[engine]:
            from torch.distributed.optim import ZeroRedundancyOptimizer

            return net, ZeroRedundancyOptimizer(net.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3)
        return net, hf_models.make_optimizer(net)

    def step(state, x):  # under FSDP2's bf16 policy the model computes in bf16 without autocast
        if engine.startswith("pp-"):
            pipeline_step(*state, x, stage, stages(engine, world))
            return
        hf_models.train_step(*state, x, "fp32-full" if precision == MIXED else precision)

    seed = 0 if engine.startswith(("tp", "pp-")) else rank  # tp, pp: every rank on the same batch
    seed = rank // TP_OF_2D if engine in TWO_D else seed  # a data-parallel group's ranks: one batch
    if "dp" in BESIDE.get(engine, ()):  # a stage's data-parallel ranks: a batch each (mesh (pp, dp[, tp]))
        seed = rank // (2 if "tp" in BESIDE[engine] else 1) % 2
    m = micro_batches(engine, world)
    batches = [hf_models.tokens(model.vocab, SEQ, MICRO_BATCH * m, 100 * i + seed) for i in range(3)]
    stage = rank // (world // stages(engine, world))  # a pipeline's: (pp, 2) meshes put the pipeline outermost
    if engine.startswith("pp-") and 0 < stage < stages(engine, world) - 1:  # a stage in between is given no batch
        batches = [torch.empty(0, dtype=torch.long) for _ in batches]
    got = profile_step.on_cpu(profile_step.two_steps(make, step, batches))[0]
    out.put((rank, got))
    torch.distributed.destroy_process_group()


TP_OF_2D = 2  # fsdp2-tp: the tensor-parallel size of its mesh; its data-parallel size is world / 2


def fsdp_tp(net, world: int, reshard: bool, sp: bool = False):
    """(the model, AdamW) under FSDP2 x TP as torchtitan composes them: the layers plan over the mesh's "tp"
    dimension (ranks 2i and 2i + 1 split each layer), with its sequence parallelism where `sp`, then fully_shard on
    each decoder layer and on the model over its "dp" dimension, torch's defaults but `reshard`
    (reshard_after_forward)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (world // TP_OF_2D, TP_OF_2D), mesh_dim_names=("dp", "tp"))
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    for layer in () if sp else net.model.layers:
        parallelize_module(layer, mesh["tp"], {name: styles[style]() for name, style in TP_PLAN.items()})
    if sp:
        sequence_parallel(net, mesh["tp"])
    for layer in net.model.layers:
        fully_shard(layer, mesh=mesh["dp"], reshard_after_forward=reshard)
    fully_shard(net, mesh=mesh["dp"], reshard_after_forward=reshard)
    return net, hf_models.make_optimizer(net)


def sequence_parallel(net, mesh) -> None:
    """`net` under the layers plan over `mesh` (one dimension) with sequence parallelism, torchtitan's way over a
    transformers model: each decoder layer's norms SequenceParallel, the attention's and the MLP's input gathered
    (Shard(1) to Replicate), o_proj and down_proj RowwiseParallel(output_layouts=Shard(1)); the sequence split at the
    first layer's input and gathered again at the head's, the final norm SequenceParallel. The embedding, the
    rotary tables and the head see the whole sequence, as the model's forward makes them."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    styles = {"colwise": ColwiseParallel, "rowwise": lambda: RowwiseParallel(output_layouts=Shard(1))}
    for layer in net.model.layers:
        plan = {name: styles[style]() for name, style in TP_PLAN.items()}
        plan.update({"input_layernorm": SequenceParallel(), "post_attention_layernorm": SequenceParallel(),
                     "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                                     desired_input_kwarg_layouts={"hidden_states": Replicate()}),
                     "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))})
        parallelize_module(layer, mesh, plan)
    parallelize_module(net.model.layers[0], mesh, PrepareModuleInput(
        input_layouts=(Replicate(),), desired_input_layouts=(Shard(1),), use_local_output=True))
    parallelize_module(net.model.norm, mesh, SequenceParallel(use_local_output=True))
    parallelize_module(net.lm_head, mesh, PrepareModuleInput(
        input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True))


class Stage(torch.nn.Module):
    """One pipeline stage of a transformers causal LM: LlamaModel.forward (Qwen3Model's) over the decoder layers
    lo to hi (0-based, hi excluded), with the embedding on the first stage and the final norm and head on the
    last (torchtitan's way of cutting a model: what a stage lacks is None). The position ids and rotary tables
    are made on every stage, as the model's forward makes them; under sdpa the causal mask is is_causal."""

    def __init__(self, net, lo: int, hi: int, first: bool, last: bool, autocast: bool, split: int = 1):
        super().__init__()
        self.autocast, self.split = autocast, split  # split: the input holds 1 / split of the positions (sp)
        inner = net.model
        self.embed = inner.embed_tokens if first else None
        self.layers = torch.nn.ModuleList(inner.layers[lo:hi])
        self.rotary = inner.rotary_emb
        self.norm, self.head = (inner.norm, net.lm_head) if last else (None, None)

    def forward(self, x):
        if not self.autocast:
            return self.run(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # the stage's forward is the autocast region
            return self.run(x)

    def run(self, x):
        h = self.embed(x) if self.embed is not None else x
        positions = torch.arange(h.shape[1] * self.split).unsqueeze(0)  # the whole sequence's
        rotary = self.rotary(h, positions)
        for layer in self.layers:
            h = layer(h, attention_mask=None, position_ids=positions, position_embeddings=rotary)
        return self.head(self.norm(h)) if self.head is not None else h


def pipeline_step(pipe, optimizer, x, stage: int, pp: int) -> None:
    """One step of a pipeline rank: the schedule's step (the first stage given the input ids, the last the
    labels; the merged logits it returns are dropped), then AdamW's. Under autocast the stage's forward is the
    autocast region (Stage)."""
    if stage == 0:
        pipe.step(x)
    elif stage == pp - 1:
        pipe.step(target=x)
    else:
        pipe.step()
    optimizer.step()
    optimizer.zero_grad()


TIMEOUT = 600  # seconds a rank may take to report (a rank that failed leaves the others waiting)
RUNS = 3  # each case is run this many times; each rank's lowest peak is kept (measured)
RUNS_OF = {"pp-1f1b-tp": 6, "pp-1f1b-fsdp2-tp": 6, "pp-1f1b-fsdp2-tp-zero3": 6, "pp-gpipe-tp": 6,
           "pp-interleaved-1f1b-tp": 6}  # a pipeline beside the layers
# plan: every micro-batch's
# all-reduces may leave a block freed unseen on gloo's thread (3 runs left 14 of pp-1f1b-tp's 32 ranks high by such
# blocks, 6 runs 1)


def measured(case: tuple, world: int) -> list[dict]:
    """Every rank's measurements of one case, rank 0 first: of RUNS runs, each rank's with the lowest peak. A
    block gloo's worker thread frees is not seen freed (profile_step.unseen_frees, collective_frees count
    what they can find); what stays unseen only ever raises a rank's running sum, and whether gloo's thread or
    the step drops the last reference changes from run to run."""
    runs = [_run(case, world) for _ in range(RUNS_OF.get(case[1], RUNS))]
    return [min((run[r] for run in runs), key=lambda got: got["measured_peak"]) for r in range(world)]


def saved(name: str) -> str:
    """Where the model `name` is saved, with random weights in bf16 as the Hub ships them, for from_pretrained
    (tp-hf: transformers' own tensor-parallel plan shards a model as it loads it, here into fp32). A checkpoint
    stored in the dtype it is loaded in would keep, on the CPU, each row-split weight's whole tensor: the rank's
    shard is a view of it (DtensorShardOperation.shard_tensor's `source[slices].to(dtype)` copies nothing)."""
    import hashlib

    import transformers

    key = hashlib.sha256(json.dumps([MODELS[name].config(), transformers.__version__]).encode()).hexdigest()[:12]
    return str(Path(os.environ.get("TMPDIR", "/tmp")) / f"calc-engines-{name}-{key}")  # a new one as either changes


def _run(case: tuple, world: int) -> list[dict]:
    """Every rank's measurements of one run of a case, rank 0 first."""
    if case[1] == "tp-hf" and not Path(saved(case[0]), "config.json").exists():
        hf_models.build(MODELS[case[0]], "sdpa", "none").to(torch.bfloat16).save_pretrained(saved(case[0]))
    ctx = torch.multiprocessing.get_context("spawn")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, world, port, case, out)) for r in range(world)]
    for p in procs:
        p.start()
    got = dict(out.get(timeout=TIMEOUT) for _ in procs)
    for p in procs:
        p.join()
    return [got[r] for r in range(world)]


def cli_args(name: str, engine: str, world: int, precision: str, checkpointing: str) -> list[str]:
    """The command a user types: their config.json, the step, and the layout."""
    m = MODELS[name]
    config = calc_cli.config_file(f"engine-{name}", m.config())
    run = ["--hf-config", config, "--seq", SEQ, "--micro-batch", MICRO_BATCH, "--walk", "eager", "--recipe",
           precision, "--attention", attention(engine), "--recompute", checkpointing, "--device", "cpu"]  # fmt: skip
    if engine.startswith("pp-"):
        pipe = ["--pp", stages(engine, world), "--pp-schedule", schedule_of(engine), "--grad-accum",
                micro_batches(engine, world)]
        beside = {"pp-1f1b-ddp": ["--dp", 2, "--engine", "ddp"], "pp-1f1b-tp": ["--tp", 2],
                  "pp-1f1b-ddp-zero1": ["--dp", 2, "--engine", "ddp", "--zero", 1],
                  "pp-1f1b-fsdp2": ["--dp", 2, "--zero", 2, "--engine", "fsdp2"],
                  "pp-1f1b-fsdp2-tp": ["--dp", 2, "--zero", 2, "--engine", "fsdp2", "--tp", 2],
                  "pp-interleaved-1f1b-ddp": ["--dp", 2, "--engine", "ddp"],
                  "pp-interleaved-1f1b-ddp-zero1": ["--dp", 2, "--engine", "ddp", "--zero", 1],
                  "pp-1f1b-tp-sp": ["--tp", 2, "--sequence-parallel"],
                  "pp-1f1b-fsdp2-zero3": ["--dp", 2, "--zero", 3, "--engine", "fsdp2"],
                  "pp-gpipe-fsdp2-zero3": ["--dp", 2, "--zero", 3, "--engine", "fsdp2"],
                  "pp-1f1b-fsdp2-tp-zero3": ["--dp", 2, "--zero", 3, "--engine", "fsdp2", "--tp", 2],
                  "pp-gpipe-ddp": ["--dp", 2, "--engine", "ddp"], "pp-gpipe-tp": ["--tp", 2],
                  "pp-gpipe-fsdp2": ["--dp", 2, "--zero", 2, "--engine", "fsdp2"],
                  "pp-interleaved-1f1b-tp": ["--tp", 2]}.get(engine, [])
        return [str(a) for a in [*run, *pipe, *beside]]
    tp = engine.startswith("tp")
    run += ["--tp" if tp else "--dp", world // TP_OF_2D if engine in TWO_D else world]
    run += ["--tp", TP_OF_2D] if engine in TWO_D else []
    run += [] if tp else ["--engine", engine.split("-")[0]]  # ddp or fsdp2, as --zero picks
    run += ["--tp-plan", "transformers"] if engine == "tp-hf" else []  # the layers plan is the default
    run += ["--sequence-parallel"] if engine.endswith("-sp") else []

    run += ["--zero", ENGINES[engine]] if ENGINES[engine] else []
    run += LORA.get(engine, [])
    return [str(a) for a in run]


def predicted(row: dict) -> None:
    """The CLI's answer for a row, in place: each rank's predicted peak and its ratio to the rank's measured one."""
    args = cli_args(row["family"], row["engine"], row["world"], row["precision"], row["checkpointing"])
    said = calc_cli.compared(args, max(r["measured_peak"] for r in row["ranks"]))
    row["eager"] = said
    for r, got in enumerate(row["ranks"]):
        if "rank_peaks" in said:
            got["predicted_peak"] = said["rank_peaks"][r]
            got["ratio"] = round(said["rank_peaks"][r] / got["measured_peak"], 4)
    row["deck"] = calc_cli.compared(calc_cli.deck_args(args), max(r["measured_peak"] for r in row["ranks"]))


def measure(name: str, engine: str, world: int, precision: str, checkpointing: str) -> dict:
    t0 = time.perf_counter()
    ranks = measured((name, engine, precision, checkpointing), world)
    pipe = {"micro_batches": micro_batches(engine, world)} if engine.startswith("pp-") else {}
    row = {"family": name, "model": MODELS[name].config(), "engine": engine, "world": world, "seq": SEQ,
           "micro_batch": MICRO_BATCH, **pipe, "precision": precision, "attention": attention(engine),
           "checkpointing": checkpointing, "backend": "gloo", "ranks": ranks}  # fmt: skip
    predicted(row)
    return {**row, "seconds": round(time.perf_counter() - t0, 2)}


def show(row: dict) -> str:
    run = f"{row['family']:6} {row['engine']:9} x{row['world']} {row['precision']:9} {row['checkpointing']:4}"
    if "refused" in row["eager"]:
        return f"{run} refused: {row['eager']['refused']}"
    ratios = " ".join(f"{r['ratio']:.4f}" for r in row["ranks"])
    deck = row["deck"].get("ratio", "refused")
    return f"{run} {max(r['measured_peak'] for r in row['ranks']):>10,}  eager per rank {ratios}  deck {deck}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="measure_engines.py", description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help=f"write {RESULTS.relative_to(ROOT)}")
    p.add_argument("--repredict", action="store_true", help="ask the CLI again; measure nothing")
    p.add_argument(
        "--only",
        choices=FAMILIES + tuple(ENGINES) + (MIXED, "lora") + tuple(f"{f}:{e}" for f in MEASURED for e in MEASURED[f]),
        help="measure this family's (engine's, precision's, family:engine's) cases, keep the others' as recorded",
    )
    args = p.parse_args(argv)
    if args.repredict:
        data = json.loads(RESULTS.read_text())
        for row in data["runs"]:
            predicted(row)
            print(show(row), flush=True)
    else:
        old = json.loads(RESULTS.read_text())["runs"] if args.only else []
        kept = [r for r in old if args.only not in (r["family"], r["engine"], r["precision"],
                                                     f"{r['family']}:{r['engine']}",
                                                     "lora" if r["engine"] in LORA else "")]  # fmt: skip
        data = {"environment": measure_transformers.environment("cpu"), "runs_each": RUNS, "runs_of": RUNS_OF,
                "runs": []}
        for case in GRID:
            old = next((r for r in kept if (r["family"], r["engine"], r["world"], r["precision"],
                                             r["checkpointing"]) == case), None)  # fmt: skip
            data["runs"].append(old or measure(*case))
            print(show(data["runs"][-1]), flush=True)
    if args.write:
        RESULTS.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
