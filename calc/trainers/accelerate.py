"""`accelerate launch`'s config YAML (`accelerate config` writes it), as accelerate 1.16 reads it
(commands/config/config_args.py, utils/dataclasses.py FullyShardedDataParallelPlugin and DeepSpeedPlugin).

- `distributed_type` NO: one process; MULTI_GPU (MULTI_CPU): DDP over `num_processes` (the processes of every
  machine together); FSDP: fully_shard over them (`fsdp_version` 2; `fsdp_reshard_after_forward`, default true,
  is ZeRO 3, false ZeRO 2); DEEPSPEED: its ZeRO stage (`deepspeed_config.zero_stage`, default 2), or the JSON
  `deepspeed_config_file` names; `offload_optimizer_device` and `offload_param_device` cpu: --offload (as the
  DeepSpeed JSON's offload blocks, calc.trainers.deepspeed). Beside `deepspeed_config_file` the JSON decides:
  `accelerate launch` raises on the plugin's stage, accumulation, clipping and offload keys and on the config's
  own `mixed_precision` (DeepSpeedPlugin._deepspeed_config_checks), and calc refuses them likewise, naming each.
- `mixed_precision` bf16: autocast over the fp32 model under DDP; under FSDP2 a MixedPrecisionPolicy with
  param_dtype and reduce_dtype bf16 over fp32 shards (set_mixed_precision), whose bf16 reduction calc's
  fsdp-bf16 (an fp32 reduction) does not model: refused; under DeepSpeed its bf16 (mixed-precision Adam).
"""

from __future__ import annotations

from . import deepspeed
from .reading import Reading, Refused, mapping, truth, whole, words

IGNORED = words(
    "compute_environment debug downcast_bf16 machine_rank main_training_function rdzv_backend "
    "same_network tpu_env tpu_use_cluster tpu_use_sudo gpu_ids enable_cpu_affinity main_process_ip "
    "main_process_port num_machines tpu_name tpu_zone commands command_file ipex_config mpirun_config"
)
FSDP_IGNORED = words(
    "fsdp_auto_wrap_policy fsdp_backward_prefetch fsdp_forward_prefetch fsdp_cpu_ram_efficient_loading "
    "fsdp_state_dict_type fsdp_sync_module_states fsdp_use_orig_params fsdp_transformer_layer_cls_to_wrap "
    "fsdp_min_num_params fsdp_sharding_strategy"
)
DEEPSPEED_IGNORED = ("deepspeed_multinode_launcher", "zero3_init_flag", "zero3_save_16bit_model",
                     "deepspeed_hostfile", "gradient_clipping")  # fmt: skip
WHY = "changes nothing a training step holds on the device"


def read(doc: dict, r: Reading, device: str = "cuda") -> None:
    r.tools.append("accelerate")
    for key, value in doc.items():
        if key in IGNORED:
            r.ignore(key, WHY)
        elif key == "use_cpu":
            if truth(key, value):
                r.set(key, value, device="cpu")
            else:
                r.ignore(key, "false")
        elif key in ("dynamo_config", "dynamo_backend"):
            backend = value.get("dynamo_backend", "NO") if isinstance(value, dict) else value
            if str(backend).upper() != "NO":
                raise Refused(key, "a compiled step (torch.compile) frees and fuses differently: calc replays eager "
                                   "PyTorch")  # fmt: skip
            r.ignore(key, "no: eager PyTorch")
        elif key not in ("distributed_type", "num_processes", "mixed_precision", "fsdp_config", "deepspeed_config"):
            raise Refused(key, "not an accelerate config key calc knows")
    kind = str(doc.get("distributed_type", "NO"))
    precision = str(doc.get("mixed_precision", "no"))
    if precision not in ("no", "bf16"):
        raise Refused("mixed_precision", f"{precision}: calc counts bf16 or no mixed precision")
    if kind == "NO":
        r.ignore("num_processes", "distributed_type NO: one process")
        _autocast(r, precision)
        return
    processes = whole("num_processes", doc.get("num_processes"))
    r.set("num_processes", processes, dp=processes)
    if kind in ("MULTI_GPU", "MULTI_CPU"):
        r.set("distributed_type", kind, engine="ddp", zero=0, **({"device": "cpu"} if kind ==
                                                                                "MULTI_CPU" else {}))  # fmt: skip
        _autocast(r, precision)
    elif kind == "FSDP":
        _fsdp(mapping("fsdp_config", doc.get("fsdp_config")), r, precision)
    elif kind == "DEEPSPEED":
        _deepspeed(mapping("deepspeed_config", doc.get("deepspeed_config")), r, precision, "mixed_precision" in doc)
    else:
        raise Refused("distributed_type", f"{kind}: calc reads NO, MULTI_GPU, FSDP and DEEPSPEED")


def _autocast(r: Reading, precision: str) -> None:
    """DDP or one process: accelerate's autocast (the trainer's own bf16, where a trainer's file is read too,
    must say the same)."""
    r.set("mixed_precision", precision, recipe="autocast" if precision == "bf16" else "fp32-full")
    r.sixteen = "bf16" if precision == "bf16" else r.sixteen


def _fsdp(cfg: dict, r: Reading, precision: str) -> None:
    for key, value in cfg.items():
        if key in FSDP_IGNORED:
            r.ignore(f"fsdp_config.{key}", "FSDP1's: FSDP2 reads fsdp_reshard_after_forward" if key ==
                     "fsdp_sharding_strategy" else WHY)  # fmt: skip
        elif key == "fsdp_offload_params" and truth(key, value):
            raise Refused("fsdp_config.fsdp_offload_params", "offload to the host is not modelled yet")
        elif key not in ("fsdp_version", "fsdp_reshard_after_forward", "fsdp_activation_checkpointing",
                         "fsdp_offload_params"):  # fmt: skip
            raise Refused(f"fsdp_config.{key}", "not an FSDP key calc knows")
    version = str(cfg.get("fsdp_version", 1))
    if version != "2":
        raise Refused("fsdp_config.fsdp_version", f"{version}: calc's engine is FSDP2 (fully_shard): set 2")
    if precision == "bf16":
        raise Refused("mixed_precision", "accelerate's FSDP2 bf16 policy reduces gradients in bf16 (calc's fsdp-bf16 "
                                         "reduces them in fp32): not modelled yet")  # fmt: skip
    reshard = truth("fsdp_config.fsdp_reshard_after_forward", cfg.get("fsdp_reshard_after_forward", True))
    r.set("distributed_type", "FSDP", engine="fsdp2", zero=3 if reshard else 2, recipe="fp32-full")
    if cfg.get("fsdp_activation_checkpointing") is not None:
        on = truth("fsdp_config.fsdp_activation_checkpointing", cfg["fsdp_activation_checkpointing"])
        r.set("fsdp_config.fsdp_activation_checkpointing", on, recompute="full" if on else "none")


OFFLOAD_KEYS = {"offload_optimizer_device": "optimizer", "offload_param_device": "weights"}  # what each moves
# what accelerate refuses beside deepspeed_config_file, the plugin's keys and the config's own mixed_precision
# (DeepSpeedPlugin._deepspeed_config_checks, fed by `accelerate launch` with the plugin's keys: a ValueError)
BESIDE_FILE = words("gradient_accumulation_steps gradient_clipping zero_stage offload_optimizer_device "
                    "offload_param_device offload_param_nvme_path offload_optimizer_nvme_path zero3_save_16bit_model")


def _deepspeed(cfg: dict, r: Reading, precision: str, mixed: bool) -> None:
    """The DeepSpeed plugin `cfg` under `precision` (`mixed`: the config gives mixed_precision)."""
    if "deepspeed_config_file" in cfg:  # the JSON decides; accelerate refuses a second say
        said = next((f"deepspeed_config.{key}" for key in cfg if key in BESIDE_FILE), None)
        if said:
            raise Refused(said, "accelerate refuses it beside deepspeed_config_file (the DeepSpeed JSON decides): "
                                "set it in that JSON, or leave out deepspeed_config_file")  # fmt: skip
        if mixed:
            raise Refused("mixed_precision", "accelerate launch refuses it from the config beside "
                                             "deepspeed_config_file: give it on the launch command (--mixed_precision) "
                                             "and leave it out here, or set the JSON's bf16")  # fmt: skip
    moved = {}  # what the plugin offloads to the CPU: the key that says so (calc.trainers.deepspeed.offloaded)
    for key, value in cfg.items():
        where = f"deepspeed_config.{key}"
        if key in DEEPSPEED_IGNORED:
            r.ignore(where, WHY)
        elif key in OFFLOAD_KEYS:
            if deepspeed.offload_device(where, value) == "none":
                r.ignore(where, "none: nothing moves")
            else:
                moved[OFFLOAD_KEYS[key]] = where
        elif key == "gradient_accumulation_steps":
            if value != "auto":
                r.set(where, value, grad_accum=whole(where, value))
            else:
                r.ignore(where, "auto: the trainer's")
        elif key == "deepspeed_config_file":
            r.names_deepspeed(where, value)
        elif key not in ("zero_stage",):
            raise Refused(where, "not a DeepSpeed plugin key calc knows")
    r.engine, r.engine_key = "deepspeed", "distributed_type"
    r.sixteen = "bf16" if precision == "bf16" else r.sixteen  # what the JSON's "auto" takes
    if "deepspeed_config_file" in cfg:  # mixed_precision from the launch command, "no" unless given there
        r.read.append({"key": "mixed_precision", "value": precision, "gives": "what the DeepSpeed JSON's auto takes"})
    else:
        stage = whole("deepspeed_config.zero_stage", cfg.get("zero_stage", 2), smallest=0)
        r.set("deepspeed_config.zero_stage", stage, zero=stage)
        deepspeed.offloaded(moved, stage, r)
        r.set("mixed_precision", precision, recipe="mixed" if precision == "bf16" else "fp32")
