"""transformers' TrainingArguments and TRL's SFTConfig (with `trl sft`'s ModelConfig and ScriptArguments), as
HfArgumentParser reads them from JSON or YAML, or as `args.to_json_string()` prints them.

Sources: the installed transformers 5.23 (training_args.py) and TRL 1.16 (trainer/sft_config.py,
trainer/model_config.py, trainer/sft_trainer.py, trainer/utils.py); tests/calc/test_trainers.py checks that
every field of those dataclasses is one of MEMORY, the keys handled below, or IGNORED.

- The model's dtype. TrainingArguments names none: the script loads the model, and calc takes fp32, as its
  Trainer preset does (a script that loads bf16 weights is --recipe bf16). TRL loads a model named by id in
  float32 unless `model_init_kwargs` (or `trl sft`'s `dtype`) says otherwise (create_model_from_path:
  `dtype = kwargs.get("dtype", "float32")`).
- `bf16`: TrainingArguments' default False; SFTConfig's None, which becomes True unless `fp16` is set.
- `gradient_checkpointing`: False in TrainingArguments, True in SFTConfig: every decoder layer checkpointed.
- `optim`: "adamw_torch_fused" in both (fused=True).
- SFTConfig's `max_length` (1024): each sequence is cut (or packed) to it, so a step's longest.
"""

from __future__ import annotations

from .reading import (
    Reading,
    Refused,
    attention,
    mapping,
    number,
    off,
    optimizer,
    recipe,
    shown,
    targets,
    truth,
    whole,
    words,
)

# Keys that change nothing a training step holds on the device: where the run writes and logs, evaluation,
# the schedule's numbers, the data's order, the host's loader, the Hub.
IGNORED = words(
    "output_dir overwrite_output_dir do_train do_eval do_predict eval_strategy eval_steps eval_delay eval_on_start "
    "eval_accumulation_steps eval_do_concat_batches eval_use_gather_object per_device_eval_batch_size "
    "prediction_loss_only batch_eval_metrics bf16_full_eval fp16_full_eval include_for_metrics "
    "learning_rate weight_decay adam_beta1 adam_beta2 adam_epsilon optim_args lr_scheduler_type lr_scheduler_kwargs "
    "warmup_steps warmup_ratio num_train_epochs max_steps seed data_seed full_determinism "
    "logging_dir logging_strategy logging_steps logging_first_step logging_nan_inf_filter log_level "
    "log_level_replica log_on_each_node report_to run_name project trackio_space_id trackio_bucket_id "
    "trackio_static_space_id disable_tqdm skip_memory_metrics include_num_input_tokens_seen "
    "save_strategy save_steps save_total_limit save_on_each_node save_only_model load_best_model_at_end "
    "metric_for_best_model greater_is_better resume_from_checkpoint restore_callback_states_from_checkpoint "
    "ignore_data_skip enable_jit_checkpoint push_to_hub hub_model_id hub_strategy hub_token hub_private_repo "
    "hub_always_push hub_revision dataloader_drop_last dataloader_num_workers dataloader_prefetch_factor "
    "dataloader_pin_memory dataloader_persistent_workers dataloader_multiprocessing_context dataloader_in_order "
    "train_sampling_strategy remove_unused_columns label_names length_column_name local_rank ddp_backend "
    "ddp_timeout ddp_find_unused_parameters ddp_broadcast_buffers ddp_static_graph debug accelerator_config "
    "tf32 use_cache torch_empty_cache_steps average_tokens_across_devices max_grad_norm "
    # SFTConfig's: the data's text and its preparation, and which tokens the loss counts (masks, same bytes)
    "dataset_text_field dataset_kwargs dataset_num_proc dataset_name dataset_config dataset_train_split "
    "dataset_test_split dataset_streaming eos_token pad_token chat_template_path truncation_mode shuffle_dataset "
    "packing_strategy pad_to_multiple_of eval_packing completion_only_loss assistant_only_loss loss_type "
    "trust_remote_code model_revision ignore_bias_buffers lora_dropout lora_task_type router_aux_loss_coef"
)
WHY_IGNORED = "changes nothing a training step holds on the device"
# Keys that change memory in a way calc does not model, refused unless left at their neutral value.
UNMODELLED = {
    "torch_compile": "a compiled step (torch.compile) frees and fuses differently: calc replays eager PyTorch",
    "torch_compile_backend": "", "torch_compile_mode": "",
    "auto_find_batch_size": "the batch size is found at run time, halving on each out-of-memory error",
    "label_smoothing_factor": "the Trainer's LabelSmoother takes a log_softmax of the logits beside the loss's",
    "neftune_noise_alpha": "NEFTune adds a noise tensor the size of the embeddings' output",
    "parallelism_config": "accelerate's ParallelismConfig (tensor, context parallel) is not read yet",
    "optim_target_modules": "GaLore-style optimizers (projected states) are not modelled",
    "ddp_bucket_cap_mb": "calc's DDP counts torch's default buckets (25 MiB)",
    "activation_offloading": "saved activations moved to the host are not modelled",
    "padding_free": "a padding-free batch is one row of every sequence's tokens: give --seq and --micro-batch",
    "liger_kernel_config": "", "use_rslora": "", "lora_target_parameters": "peft's target_parameters (adapters on "
    "experts' parameters) are not modelled yet", "lora_modules_to_save": "a trainable full copy of a module beside "
    "its frozen one is not modelled", "use_dora": "DoRA keeps a magnitude vector and a weight-norm pass not modelled",
    "load_in_8bit": "LoRA on an 8-bit (LLM.int8) base is not modelled: calc's QLoRA is 4-bit NF4",
    "bnb_4bit_quant_storage": "", "fsdp_config": "",
}  # fmt: skip
SFT_ONLY = ("max_length", "packing", "dataset_text_field", "completion_only_loss", "assistant_only_loss",
            "model_init_kwargs", "padding_free", "activation_offloading", "use_peft", "model_name_or_path")  # fmt: skip


def is_sft(doc: dict) -> bool:
    return any(k in doc for k in SFT_ONLY)


def read(doc: dict, r: Reading, device: str) -> None:
    """Read a TrainingArguments or SFTConfig (with trl's ModelConfig) document into `r`."""
    sft = is_sft(doc)
    r.tools.append("trl" if sft else "transformers")
    for key, value in doc.items():
        if key in HANDLED:
            continue
        if key in IGNORED:
            r.ignore(key, WHY_IGNORED)
        elif key in UNMODELLED:
            if not off(value) and not (key == "ddp_bucket_cap_mb" and value == 25):
                raise Refused(key, UNMODELLED[key] or "not modelled")
            r.ignore(key, "at its neutral value")
        else:
            raise Refused(key, "not a TrainingArguments, SFTConfig or trl ModelConfig key calc knows")
    _steps(doc, r, sft)
    _precision(doc, r, sft)
    _distributed(doc, r)
    _optimizer(doc, r, r.fields.get("device", device))
    _peft(doc, r)
    _attention(doc, r)
    if doc.get("model_name_or_path"):
        r.model, r.model_key = str(doc["model_name_or_path"]), "model_name_or_path"


def _steps(doc: dict, r: Reading, sft: bool) -> None:
    number(r, doc, "per_device_train_batch_size", 8, "TrainingArguments.per_device_train_batch_size = 8",
           "micro_batch")
    number(r, doc, "gradient_accumulation_steps", None, "", "grad_accum")
    r.default("SFTTrainer runs an SFTConfig" if sft else "Trainer runs TrainingArguments",
              loop="sft" if sft else "trainer")
    if sft:
        if "max_length" in doc and doc["max_length"] is None:
            raise Refused("max_length", "null keeps every sequence whole: give the longest as --seq")
        number(r, doc, "max_length", 1024, "SFTConfig.max_length = 1024", "seq")
    checkpoint = doc.get("gradient_checkpointing", doc.get("activation_checkpointing", sft))
    for key in ("gradient_checkpointing", "activation_checkpointing"):
        if key in doc and doc[key] is not None:
            r.set(key, doc[key], recompute="full" if truth(key, doc[key]) else "none")
    if not any(doc.get(k) is not None for k in ("gradient_checkpointing", "activation_checkpointing")):
        r.default("SFTConfig.gradient_checkpointing = True" if sft else "TrainingArguments.gradient_checkpointing"
                  " = False", recompute="full" if checkpoint else "none")  # fmt: skip
    for key in ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"):
        kwargs = mapping(key, doc.get(key))
        if any(k != "use_reentrant" for k in kwargs):
            raise Refused(key, "calc reads use_reentrant only (every layer checkpointed)")
        if key in doc:
            r.ignore(key, "use_reentrant or not, each checkpointed layer keeps its input")


INIT_IGNORED = ("trust_remote_code", "revision", "device_map", "low_cpu_mem_usage", "use_cache")


def _model_dtype(doc: dict, r: Reading) -> tuple[str, str]:
    """(the weights' dtype, the key that named it, "" for none) from model_init_kwargs or trl sft's dtype."""
    init = mapping("model_init_kwargs", doc.get("model_init_kwargs"))
    for k in init:
        if k in INIT_IGNORED:
            r.ignore(f"model_init_kwargs.{k}", WHY_IGNORED)
        elif k == "attn_implementation":
            attention(r, "model_init_kwargs.attn_implementation", init[k])
        elif k not in ("dtype", "torch_dtype"):
            raise Refused(f"model_init_kwargs.{k}", "not a from_pretrained argument calc reads (a quantized base: "
                                                   "trl sft's load_in_4bit with use_peft)")  # fmt: skip
    named = [(f"model_init_kwargs.{k}", init[k]) for k in ("dtype", "torch_dtype") if k in init]
    named += [(k, doc[k]) for k in ("dtype", "torch_dtype") if k in doc]
    if not named:
        return "fp32", ""
    key, dtype = named[0]
    weights = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(str(dtype))
    if weights is None:
        raise Refused(key, f"{shown(dtype)}: give float32 or bfloat16 (auto is the checkpoint's own: give --recipe)")
    return weights, key


def _precision(doc: dict, r: Reading, sft: bool) -> None:
    weights, named = _model_dtype(doc, r)
    fp16 = truth("fp16", doc.get("fp16", False))
    bf16 = doc.get("bf16")
    bf16 = (not fp16) if bf16 is None and sft else truth("bf16", bf16)
    autocast = "fp16" if fp16 else "bf16" if bf16 else ""
    key = "bf16" if "bf16" in doc else "fp16" if "fp16" in doc else named
    value = recipe(key or "bf16", weights, autocast)
    r.sixteen = autocast
    if not named:
        r.defaults.append({"gives": "fp32 weights", "why": "TRL loads a model named by id in float32 "
                           "(create_model_from_path)" if sft else "TrainingArguments names no dtype: the script loads "
                           "the model; calc takes fp32, as its Trainer preset does (bf16 weights: --recipe bf16)"})
    if key:
        r.set(key, doc.get(key, weights), recipe=value)
        if named and named != key:
            r.read.append({"key": named, "value": weights, "gives": f"{weights} weights"})
    else:
        r.default("SFTConfig.bf16 = None: True unless fp16" if sft else "TrainingArguments.bf16 = False",
                  recipe=value)


def _optimizer(doc: dict, r: Reading, device: str) -> None:
    optimizer(r, "optim", doc.get("optim"), device)
    if truth("use_liger_kernel", doc.get("use_liger_kernel", False)):
        r.set("use_liger_kernel", True, loss="liger-fused")
    elif "use_liger_kernel" in doc:
        r.ignore("use_liger_kernel", "false: the loss is the trainer's own")


def _attention(doc: dict, r: Reading) -> None:
    if doc.get("packing") is not None:
        r.ignore("packing", "a packed row holds max_length tokens, as --seq counts them")
    if doc.get("attn_implementation") is not None:
        attention(r, "attn_implementation", doc["attn_implementation"])


def _peft(doc: dict, r: Reading) -> None:
    """trl sft's ModelConfig: use_peft with lora_r, lora_alpha, lora_target_modules, load_in_4bit."""
    if not truth("use_peft", doc.get("use_peft", False)):
        for key in ("lora_r", "lora_alpha", "lora_target_modules", "load_in_4bit", "bnb_4bit_quant_type",
                    "use_bnb_nested_quant", "use_peft"):  # fmt: skip
            if key in doc:
                if key == "load_in_4bit" and truth(key, doc[key]):
                    raise Refused(key, "a 4-bit base trains only adapters: set use_peft true")
                r.ignore(key, "use_peft is false")
        return
    four = truth("load_in_4bit", doc.get("load_in_4bit", False))
    if four and (doc.get("bnb_4bit_quant_type", "nf4") != "nf4" or not truth("use_bnb_nested_quant",
                                                                           doc.get("use_bnb_nested_quant"))):
        raise Refused("use_bnb_nested_quant", "calc's QLoRA is NF4 with double-quantized absmax (QLoRA §3): set "
                                              "bnb_4bit_quant_type nf4 and use_bnb_nested_quant true")  # fmt: skip
    r.set("use_peft" if not four else "load_in_4bit", True, finetune="qlora" if four else "lora")
    for key, name, default in (("lora_r", "lora_rank", 16), ("lora_alpha", "lora_alpha", 32)):
        if key in doc:
            r.set(key, doc[key], **{name: whole(key, doc[key])})
        else:
            r.default(f"ModelConfig.{key} = {default}", **{name: default})
    if doc.get("lora_target_modules") is not None:
        r.set("lora_target_modules", doc["lora_target_modules"],
              lora_targets=targets("lora_target_modules", doc["lora_target_modules"]))
    else:
        r.defaults.append({"gives": "peft's targets for the model type", "why": "ModelConfig.lora_target_modules ="
                           " None: peft's own list (q_proj, v_proj for Llama and Qwen), calc's default too"})


FSDP_KEYS = ("version", "reshard_after_forward", "activation_checkpointing", "offload_params", "cpu_offload")
FSDP_IGNORED = words(
    "cpu_ram_efficient_loading transformer_layer_cls_to_wrap auto_wrap_policy backward_prefetch forward_prefetch "
    "state_dict_type sync_module_states use_orig_params min_num_params limit_all_gathers xla xla_fsdp_v2 "
    "xla_fsdp_grad_ckpt"
)


def _distributed(doc: dict, r: Reading) -> None:
    if doc.get("use_cpu") is not None:
        r.set("use_cpu", doc["use_cpu"], **({"device": "cpu"} if truth("use_cpu", doc["use_cpu"]) else {}))
    fsdp = doc.get("fsdp")
    if not off(fsdp):
        _fsdp(fsdp, mapping("fsdp_config", doc.get("fsdp_config")), r)
    elif not off(doc.get("fsdp_config")):
        raise Refused("fsdp_config", "given without fsdp")
    if isinstance(doc.get("deepspeed"), dict):
        r.read.append({"key": "deepspeed", "value": "a DeepSpeed config", "gives": "read as a DeepSpeed JSON"})
    elif not off(doc.get("deepspeed")):
        r.names_deepspeed("deepspeed", doc["deepspeed"])


def _fsdp(fsdp: object, given: dict, r: Reading) -> None:
    """TrainingArguments' fsdp words and fsdp_config (transformers drops each key's fsdp_ prefix)."""
    listed = fsdp.split() if isinstance(fsdp, str) else ["full_shard"] if fsdp is True else fsdp
    if not isinstance(listed, list) or not {"full_shard", "shard_grad_op"} & set(map(str, listed)):
        raise Refused("fsdp", f"{shown(fsdp)}: calc reads full_shard or shard_grad_op (with auto_wrap)")
    unknown = set(map(str, listed)) - {"full_shard", "shard_grad_op", "auto_wrap", "offload"}
    if unknown:
        raise Refused("fsdp", f"{', '.join(sorted(unknown))}: calc reads full_shard or shard_grad_op (with auto_wrap)")
    cfg = {}
    for k, v in given.items():
        name = k.removeprefix("fsdp_")
        if name in FSDP_IGNORED:
            r.ignore(f"fsdp_config.{k}", WHY_IGNORED)
        elif name in FSDP_KEYS:
            cfg[name] = v
        else:
            raise Refused(f"fsdp_config.{k}", "not an FSDP key calc knows")
    if "offload" in listed or truth("fsdp_config.offload_params", cfg.get("offload_params", cfg.get("cpu_offload"))):
        raise Refused("fsdp", "offload to the host is not modelled yet")
    version = str(cfg.get("version", 1))
    if version != "2":
        raise Refused("fsdp_config.version", f"{shown(version)}: calc's engine is FSDP2 (fully_shard): set version 2")
    if r.sixteen:
        raise Refused("bf16", "the Trainer's FSDP2 runs accelerate's bf16 policy, which reduces gradients in bf16 "
                              "(calc's fsdp-bf16 reduces them in fp32): not modelled yet")  # fmt: skip
    reshard = truth("fsdp_config.reshard_after_forward", cfg.get("reshard_after_forward", "shard_grad_op" not in
                                                                 listed))  # fmt: skip
    r.set("fsdp", fsdp, engine="fsdp2", zero=3 if reshard else 2)
    if cfg.get("activation_checkpointing") is not None:
        on = truth("fsdp_config.activation_checkpointing", cfg["activation_checkpointing"])
        r.set("fsdp_config.activation_checkpointing", on, recompute="full" if on else "none")


HANDLED = frozenset(
    words(
        "per_device_train_batch_size gradient_accumulation_steps max_length gradient_checkpointing "
        "activation_checkpointing gradient_checkpointing_kwargs activation_checkpointing_kwargs "
        "model_init_kwargs dtype torch_dtype bf16 fp16 optim use_liger_kernel use_peft lora_r lora_alpha "
        "lora_target_modules load_in_4bit bnb_4bit_quant_type use_bnb_nested_quant use_cpu fsdp fsdp_config "
        "deepspeed model_name_or_path attn_implementation packing"
    )
)
