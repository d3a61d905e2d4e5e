"""A DeepSpeed JSON, as its engine reads it (deepspeed/runtime/config.py, zero/config.py; 0.19), read as
ZeRO's accounting over the data-parallel processes: the deck walk's --zero K.

- `zero_optimization.stage` K: the deck walk's ZeRO K (ZeRO, Rajbhandari et al. 2020, Figure 1). DeepSpeed's own
  engine is not modelled yet: its gradient buckets (`reduce_bucket_size`, doubled by `overlap_comm`), stage 3's
  prefetch and persistent small parameters are listed as not counted, and the eager walk refuses the file.
- `zero_optimization.offload_optimizer` / `offload_param` with device cpu: --offload optimizer, or
  optimizer+params (ZeRO 3): the deck walk's device figure and the host's (calc.recipes.host_bytes).
- `bf16.enabled` or `fp16.enabled`: 16-bit weights and gradients, fp32 master weights and Adam moments in the
  optimizer (DeepSpeed's BF16_Optimizer / FP16 optimizer, and ZeRO's own): the deck's mixed-precision Adam
  (2 + 2 + 12 bytes). Neither: fp32 throughout.
- "auto": transformers fills the field from TrainingArguments (integrations/deepspeed.py, trainer_config_process:
  the batch sizes, accumulation, bf16/fp16; the bucket sizes from the model's hidden size).
- `train_batch_size` = micro-batch x accumulation x processes: where all three are numbers, the processes.
"""

from __future__ import annotations

from .reading import Reading, Refused, mapping, off, shown, truth, whole, words

NOT_COUNTED = "DeepSpeed's engine (its buckets, prefetch and persistent parameters) is not modelled yet: the " \
              "deck walk counts ZeRO's accounting"  # fmt: skip
ZERO_KEYS_NOT_COUNTED = words(
    "overlap_comm contiguous_gradients reduce_bucket_size allgather_bucket_size allgather_partitions "
    "reduce_scatter round_robin_gradients sub_group_size stage3_prefetch_bucket_size "
    "stage3_param_persistence_threshold stage3_max_live_parameters stage3_max_reuse_distance "
    "prefetch_bucket_size param_persistence_threshold max_live_parameters max_reuse_distance "
    "load_from_fp32_weights elastic_checkpoint ignore_unused_parameters zero_quantized_weights "
    "zero_hpz_partition_size zero_quantized_gradients"
)
ZERO_KEYS_IGNORED = ("stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
                     "memory_efficient_linear", "cpu_offload_use_pin_memory")  # fmt: skip
IGNORED = words(
    "gradient_clipping steps_per_print wall_clock_breakdown zero_allow_untested_optimizer "
    "zero_force_ds_cpu_optimizer scheduler prescale_gradients gradient_predivide_factor sparse_gradients "
    "communication_data_type flops_profiler tensorboard wandb csv_monitor comet dump_state "
    "memory_breakdown checkpoint timers"
)
OPTIMIZERS = {"adamw": "adamw", "adam": "adamw", "lion": "lion"}  # DeepSpeed's optimizer "type", lower case


def read(doc: dict, r: Reading) -> None:
    r.tools.append("deepspeed")
    r.engine, r.engine_key = "deepspeed", "zero_optimization.stage"
    for key in doc:
        if key in IGNORED:
            r.ignore(key, WHY)
        elif key not in HANDLED:
            raise Refused(key, "not a DeepSpeed key calc knows")
    _batches(doc, r)
    _precision(doc, r)
    _zero(mapping("zero_optimization", doc.get("zero_optimization")), r)
    opt = doc.get("optimizer")
    if opt is not None:
        kind = str(mapping("optimizer", opt).get("type", "")).lower()
        if kind not in OPTIMIZERS:
            raise Refused("optimizer.type", f"{shown(kind)}: calc models {', '.join(OPTIMIZERS)}")
        r.set("optimizer.type", opt["type"], optimizer=OPTIMIZERS[kind])
    for key, value in mapping("activation_checkpointing", doc.get("activation_checkpointing")).items():
        where = f"activation_checkpointing.{key}"
        if key in ("partition_activations", "cpu_checkpointing", "contiguous_memory_optimization") and not off(value):
            raise Refused(where, "DeepSpeed's partitioned or host-kept checkpoints are not modelled")
        r.ignore(where, "off" if key in ("partition_activations", "cpu_checkpointing") else WHY)
    for key, value in mapping("data_types", doc.get("data_types")).items():
        if value is not None:
            raise Refused(f"data_types.{key}", "a gradient accumulation dtype of its own is not modelled")
        r.ignore(f"data_types.{key}", "null: the gradients' own dtype")


WHY = "changes nothing a training step holds on the device"


def _auto(r: Reading, key: str) -> None:
    r.ignore(key, "auto: transformers fills it from TrainingArguments (the other file)")


def _batches(doc: dict, r: Reading) -> None:
    numbers = {}
    for key, field in (("train_micro_batch_size_per_gpu", "micro_batch"), ("gradient_accumulation_steps",
                                                                           "grad_accum"),
                       ("train_batch_size", "")):  # fmt: skip
        value = doc.get(key)
        if value is None:
            continue
        if value == "auto":
            _auto(r, key)
            continue
        numbers[key] = whole(key, value)
        if field:
            r.set(key, value, **{field: numbers[key]})
    micro = numbers.get("train_micro_batch_size_per_gpu") or int(r.fields.get("micro-batch", 0)) or None
    accum = numbers.get("gradient_accumulation_steps") or int(r.fields.get("grad-accum", 1))  # "auto": the trainer's
    if "train_batch_size" in numbers and micro:
        dp, left = divmod(numbers["train_batch_size"], micro * accum)
        if left or not dp:
            raise Refused("train_batch_size", f"{numbers['train_batch_size']} is not micro-batch {micro} x "
                                              f"accumulation {accum} x processes")  # fmt: skip
        r.set("train_batch_size", numbers["train_batch_size"], dp=dp)
    elif "train_batch_size" in numbers:
        r.ignore("train_batch_size", "without train_micro_batch_size_per_gpu it names no process count")


def _precision(doc: dict, r: Reading) -> None:
    on = {}
    for key in ("bf16", "fp16"):
        block = doc.get(key)
        if block is None:
            continue
        enabled = block.get("enabled", False) if isinstance(block, dict) else block
        if enabled == "auto":
            on[key] = "auto"
            _auto(r, f"{key}.enabled")
        else:
            on[key] = truth(f"{key}.enabled", enabled)
    if "auto" in on.values():  # TrainingArguments' bf16/fp16 decide (calc.trainers._after)
        return
    sixteen = next((k for k, v in on.items() if v), None)
    if sixteen:
        r.set(f"{sixteen}.enabled", True, recipe="mixed")
    else:
        r.default("DeepSpeed: neither bf16 nor fp16 enabled trains in fp32", recipe="fp32")


def _zero(zero: dict, r: Reading) -> None:
    stage = whole("zero_optimization.stage", zero.get("stage", 0), smallest=0)
    if stage > 3:
        raise Refused("zero_optimization.stage", f"{stage}: ZeRO has stages 0 to 3")
    r.set("zero_optimization.stage", stage, zero=stage)
    _offload(zero, stage, r)
    for key in zero:
        where = f"zero_optimization.{key}"
        if key in OFFLOAD_KEYS:
            continue
        elif key in ZERO_KEYS_NOT_COUNTED:
            r.ignore(where, NOT_COUNTED)
        elif key in ZERO_KEYS_IGNORED:
            r.ignore(where, "changes nothing a training step holds on the device")
        elif key != "stage":
            raise Refused(where, "not a ZeRO key calc knows")


# zero_optimization's offload blocks (DeepSpeed 0.19 zero/offload_config.py), and the deprecated booleans it still
# reads in their place (zero/config.py: cpu_offload for the optimizer, cpu_offload_param for the weights)
OFFLOAD_KEYS = {"offload_optimizer": "optimizer", "cpu_offload": "optimizer", "offload_param": "weights",
                "cpu_offload_param": "weights"}  # fmt: skip
DEPRECATED = {"cpu_offload": "offload_optimizer", "cpu_offload_param": "offload_param"}
OFFLOAD_IGNORED = words("pin_memory buffer_count buffer_size max_in_cpu fast_init pipeline_read pipeline_write "
                        "pipeline nvme_path")  # how the host's buffers are pinned and staged, not what they hold


def _offload(zero: dict, stage: int, r: Reading) -> None:
    """zero_optimization's offload to the CPU, as --offload (calc.recipes.OFFLOADED): the optimizer
    (offload_optimizer), and beside it the weights (offload_param, ZeRO 3). NVMe and the weights without the
    optimizer are refused, naming the key."""
    moved = {}  # what is offloaded: the key that says so
    both = next((old for old, new in DEPRECATED.items() if old in zero and new in zero), None)
    if both:  # DeepSpeed's config asserts against a deprecated key beside its replacement
        raise Refused(f"zero_optimization.{both}", f"deprecated for {DEPRECATED[both]}, which is given too: give one")
    for key, what in OFFLOAD_KEYS.items():
        if key not in zero:
            continue
        value, where = zero[key], f"zero_optimization.{key}"
        block = value if isinstance(value, dict) else {"device": "cpu" if truth(where, value) else "none"}
        device = offload_device(f"{where}.device" if isinstance(value, dict) else where, block.get("device"))
        for sub in block:
            if sub == "ratio" and (isinstance(block[sub], bool) or block[sub] not in (1, 1.0)):
                raise Refused(f"{where}.ratio", "a partial offload (ZeRO++'s ratio) is not modelled: 1, or leave it")
            if sub not in ("device", "ratio", *OFFLOAD_IGNORED):
                raise Refused(f"{where}.{sub}", "not an offload key calc knows")
            if sub != "device":
                r.ignore(f"{where}.{sub}", "1: all of it" if sub == "ratio" else
                         "how the host's buffers are kept, not what they hold")  # fmt: skip
        where = f"{where}.device" if isinstance(value, dict) else where
        if device == "cpu":
            moved[what] = where
        else:
            r.ignore(where, "none: nothing moves")
    offloaded(moved, stage, r)


def offload_device(where: str, device: object) -> str:
    """An offload's device, "cpu" or "none" (None too), as DeepSpeed's OffloadDeviceEnum spells them (lower case);
    NVMe and anything else refused, naming `where`."""
    device = "none" if device is None else device
    if device == "nvme":
        raise Refused(where, "nvme: offload to a disk (ZeRO-Infinity) is not modelled; cpu is")
    if device not in ("cpu", "none"):
        raise Refused(where, f"{shown(device)}: DeepSpeed's offload devices are cpu, nvme and none, in lower case")
    return device


def offloaded(moved: dict[str, str], stage: int, r: Reading) -> None:
    """--offload from what is offloaded to the CPU ({"optimizer" or "weights": the key that says so}) under ZeRO
    `stage`: the optimizer, or the optimizer and the weights (ZeRO 3); the rest refused, naming the key."""
    if "weights" in moved and "optimizer" not in moved:
        raise Refused(moved["weights"], "the weights offloaded without the optimizer are not modelled: offload "
                                        "the optimizer too (offload_optimizer)")  # fmt: skip
    if "weights" in moved and stage != 3:
        raise Refused(moved["weights"], f"DeepSpeed offloads the weights under ZeRO stage 3, not {stage}")
    if moved and not stage:
        raise Refused(moved["optimizer"], "DeepSpeed offloads ZeRO's partitions: stage 1, 2 or 3")
    if moved:
        offload = "optimizer+params" if "weights" in moved else "optimizer"
        r.set(moved["optimizer"], "cpu", offload=offload)
        if "weights" in moved:
            r.read.append({"key": moved["weights"], "value": "cpu", "gives": f"--offload {offload}"})


HANDLED = frozenset(("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size", "bf16",
                     "fp16", "zero_optimization", "optimizer", "activation_checkpointing", "data_types"))  # fmt: skip
