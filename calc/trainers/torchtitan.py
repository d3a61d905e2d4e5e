"""A torchtitan job config (`--job.config_file`: the TOML of its releases, or the same tables as JSON), as
torchtitan reads it: torchtitan/config/job_config.py at 000204a4 (its earlier config_manager.py at 391ddd3d names
training.local_batch_size `batch_size`).

- [model] name and flavor: llama3 8B, 70B and 405B are the Llama 3.1 presets' shapes (the debug model is not).
- [training] local_batch_size (8) and seq_len (2048) a rank's micro-batch; global_batch_size (-1: one
  micro-batch a step) over the data-parallel ranks gives the accumulation.
- FSDP2 (data_parallel_shard_degree, -1: every rank the others leave) with MixedPrecisionPolicy(param_dtype=
  mixed_precision_param, reduce_dtype=mixed_precision_reduce), bfloat16 and float32 by default: calc's
  fsdp-bf16 over fp32 shards; fsdp_reshard_after_forward "default" reshards (ZeRO 3) unless a pipeline runs,
  "never" keeps the gathered weights (ZeRO 2).
- [activation_checkpoint] mode: full checkpoints every block; its default, selective (every n-th block, or by op),
  is not Korthikanti's selective recomputation calc counts: refused, naming the key.
- Tensor parallelism, context parallelism, replication (HSDP) and float8 are torchtitan's own plans: refused.
"""

from __future__ import annotations

from .reading import Reading, Refused, mapping, off, shown, truth, whole, words

TABLES = ("job", "model", "training", "parallelism", "activation_checkpoint", "optimizer", "lr_scheduler",
          "metrics", "checkpoint", "profiling", "float8", "comm", "validation", "experimental", "compile",
          "memory_estimation", "fault_tolerance", "mx", "quantize")  # fmt: skip
IGNORED_TABLES = ("job", "lr_scheduler", "metrics", "checkpoint", "profiling", "comm", "validation",
                  "experimental", "memory_estimation", "fault_tolerance")  # fmt: skip
WHY = "changes nothing a training step holds on the device"
FLAVORS = {("llama3", "8B"): "llama-3.1-8b", ("llama3", "70B"): "llama-3.1-70b", ("llama3", "405B"): "llama-3.1-405b"}
TRAINING_IGNORED = words("max_norm steps dataset dataset_path warmup_steps seed deterministic gc_freq dataloader")


def is_torchtitan(doc: dict) -> bool:
    return any(isinstance(doc.get(t), dict) for t in ("training", "parallelism", "activation_checkpoint"))


def read(doc: dict, r: Reading, device: str = "cuda") -> None:
    r.tools.append("torchtitan")
    for table, value in doc.items():
        if table not in TABLES:
            raise Refused(table, "not a torchtitan table calc knows")
        mapping(table, value)
        if table in IGNORED_TABLES:
            r.ignore(f"[{table}]", WHY)
    for table in ("float8", "mx", "quantize"):
        if any(not off(v) for k, v in mapping(table, doc.get(table)).items() if k != "filter_fqns"):
            raise Refused(table, "low-precision training (float8, MX) is not modelled")
        if table in doc:
            r.ignore(f"[{table}]", "off")
    if truth("compile.enable", mapping("compile", doc.get("compile")).get("enable")):
        raise Refused("compile.enable", "a compiled step frees and fuses differently: calc replays eager PyTorch")
    _model(mapping("model", doc.get("model")), r)
    _training(mapping("training", doc.get("training")), r)
    _parallel(mapping("parallelism", doc.get("parallelism")), r)
    _checkpointing(mapping("activation_checkpoint", doc.get("activation_checkpoint")), r)
    _optimizer(mapping("optimizer", doc.get("optimizer")), r)


def _model(model: dict, r: Reading) -> None:
    name, flavor = model.get("name", "llama3"), model.get("flavor", "debugmodel")
    if any(k not in ("name", "flavor", "tokenizer_path", "hf_assets_path", "converters", "print_after_conversion")
           for k in model):  # fmt: skip
        raise Refused("model", f"{', '.join(k for k in model if k not in ('name', 'flavor'))}: not a key calc knows")
    if model.get("converters"):
        raise Refused("model.converters", f"{shown(model['converters'])}: converted layers are not modelled")
    preset = FLAVORS.get((str(name), str(flavor)))
    if preset is None:
        raise Refused("model.flavor", f"{shown(name)} {shown(flavor)} is not a model calc has a preset for: give "
                                      "its config.json (--hf-config)")  # fmt: skip
    r.set("model.flavor", f"{name} {flavor}", preset=preset)


def _training(t: dict, r: Reading) -> None:
    for key, value in t.items():
        where = f"training.{key}"
        if key in ("local_batch_size", "batch_size"):
            r.set(where, value, micro_batch=whole(where, value))
        elif key == "seq_len":
            r.set(where, value, seq=whole(where, value))
        elif key in ("compile", "enable_cpu_offload") and truth(where, value):
            raise Refused(where, "a compiled step, or state offloaded to the host, is not modelled")
        elif key == "dtype" and str(value) != "float32":
            raise Refused(where, f"{shown(value)}: calc reads float32 training under FSDP2's policy")
        elif key == "mixed_precision_param" and str(value) != "bfloat16":
            raise Refused(where, f"{shown(value)}: calc's fsdp-bf16 computes in bfloat16")
        elif key == "mixed_precision_reduce" and str(value) != "float32":
            raise Refused(where, f"{shown(value)}: calc's fsdp-bf16 reduces in float32")
        elif key == "global_batch_size" and whole(where, value, smallest=-1) not in (-1,):
            r.pending_global = whole(where, value)
        elif key in TRAINING_IGNORED or key in ("compile", "enable_cpu_offload", "dtype", "mixed_precision_param",
                                                 "mixed_precision_reduce", "global_batch_size"):  # fmt: skip
            r.ignore(where, WHY)
        else:
            raise Refused(where, "not a torchtitan training key calc knows")
    for key, default, field in (("local_batch_size", 8, "micro_batch"), ("seq_len", 2048, "seq")):
        if key not in t and not (key == "local_batch_size" and "batch_size" in t):
            r.default(f"torchtitan: training.{key} = {default}", **{field: default})
    r.default("torchtitan: FSDP2's MixedPrecisionPolicy(bfloat16, float32) over fp32 shards", recipe="fsdp-bf16")


def _parallel(p: dict, r: Reading) -> None:
    for key in ("data_parallel_replicate_degree", "tensor_parallel_degree", "context_parallel_degree",
                "pipeline_parallel_degree", "expert_parallel_degree"):  # fmt: skip
        if key in p and whole(f"parallelism.{key}", p[key]) != 1:
            raise Refused(f"parallelism.{key}", "torchtitan's own plan for it is not modelled (calc's eager engines "
                                                "are FSDP2 over data-parallel ranks)")  # fmt: skip
        if key in p:
            r.ignore(f"parallelism.{key}", "1: none")
    shard = p.get("data_parallel_shard_degree", -1)
    if shard == -1:
        r.defaults.append({"gives": "--dp: the processes torchrun starts", "why": "torchtitan: "
                           "data_parallel_shard_degree = -1 (every rank): give --dp"})  # fmt: skip
    else:
        r.set("parallelism.data_parallel_shard_degree", shard, dp=whole("parallelism.data_parallel_shard_degree",
                                                                        shard))  # fmt: skip
    reshard = str(p.get("fsdp_reshard_after_forward", "default"))
    if reshard not in ("default", "always", "never"):
        raise Refused("parallelism.fsdp_reshard_after_forward", f"{shown(reshard)}: default, always or never")
    zero = 2 if reshard == "never" else 3
    r.set("parallelism.fsdp_reshard_after_forward", reshard, engine="fsdp2", zero=zero)
    for key in p:
        if key not in ("data_parallel_replicate_degree", "tensor_parallel_degree", "context_parallel_degree",
                       "pipeline_parallel_degree", "expert_parallel_degree", "data_parallel_shard_degree",
                       "fsdp_reshard_after_forward", "enable_async_tensor_parallel", "disable_loss_parallel"):
            raise Refused(f"parallelism.{key}", "not a torchtitan parallelism key calc knows")
        if key in ("enable_async_tensor_parallel", "disable_loss_parallel"):
            r.ignore(f"parallelism.{key}", "no tensor parallelism: nothing")
    if r.pending_global:
        dp = int(r.fields.get("dp", 0)) or None
        micro = int(r.fields.get("micro-batch", 8))
        if dp is None:
            raise Refused("training.global_batch_size", "needs data_parallel_shard_degree (not -1) to give the "
                                                        "accumulation")  # fmt: skip
        accum, left = divmod(r.pending_global, micro * dp)
        if left or not accum:
            raise Refused("training.global_batch_size", f"{r.pending_global} is not local_batch_size {micro} x "
                                                        f"{dp} ranks x an accumulation")  # fmt: skip
        r.set("training.global_batch_size", r.pending_global, grad_accum=accum)


def _checkpointing(ac: dict, r: Reading) -> None:
    mode = str(ac.get("mode", "selective"))
    if mode not in ("none", "full"):
        raise Refused("activation_checkpoint.mode", f"{shown(mode)}: torchtitan's selective checkpointing (every n-th "
                      "block, or by op) is not Korthikanti's selective recomputation calc counts: set none or full")
    r.set("activation_checkpoint.mode", mode, recompute=mode)
    for key in ac:
        if key != "mode":
            r.ignore(f"activation_checkpoint.{key}", f"mode {mode}: not read")


def _optimizer(opt: dict, r: Reading) -> None:
    name = str(opt.get("name", "AdamW"))
    if name.lower() not in ("adamw", "adam"):
        raise Refused("optimizer.name", f"{shown(name)}: calc models AdamW here")
    impl = {"fused": "fused", "foreach": "foreach", "for-loop": "single"}.get(str(opt.get("implementation", "fused")))
    if impl is None:
        raise Refused("optimizer.implementation", f"{shown(opt['implementation'])}: fused, foreach or for-loop")
    r.set("optimizer.name", name, optimizer="adamw", adamw_impl=impl)
    for key in opt:
        if key not in ("name", "implementation"):
            r.ignore(f"optimizer.{key}", WHY)
