"""An axolotl YAML, as axolotl reads it (src/axolotl/utils/schemas/*.py, utils/config/__init__.py normalize_config
and resolve_dtype, loaders/model.py; commit 00ce8882ab23c7e72e4d705b6dec41c9a2dcf94a).

- `sequence_len` (default 512): each row of a step (packed rows with `sample_packing`, padded ones with
  `pad_to_sequence_len`). `micro_batch_size` (default 1) is the Trainer's per-device batch;
  `gradient_accumulation_steps` (default 1), or `batch_size` // `micro_batch_size`.
- `bf16` ("auto": True on a card with bf16): the model is loaded in bf16 (`torch_dtype`) and the Trainer's bf16
  autocast is on; neither bf16 nor fp16: fp32 without autocast. A LoRA's adapters stay fp32 (peft's
  autocast_adapter_dtype, unless `peft_autocast_adapter_dtype: false`). A full fine-tune keeps the norms, the
  embedding and the head upcast to fp32 unless flash or flex attention (or an adapter, FSDP, CCE) casts them
  back: a model of two dtypes calc does not model, refused.
- `adapter` lora / qlora (with `load_in_4bit`: bitsandbytes NF4, double-quantized), `lora_r`, `lora_alpha`,
  `lora_target_linear` (every linear but the head) or `lora_target_modules`.
- `gradient_checkpointing` (default False): every decoder layer. `optimizer` (default adamw_torch_fused).
- `flash_attention` is attn_implementation flash_attention_2, `sdp_attention` sdpa, `eager_attention` eager;
  none given: transformers' default (sdpa).
- AxolotlTrainer is a transformers Trainer: the trainer loop.
"""

from __future__ import annotations

from .reading import Reading, Refused, attention, number, off, optimizer, recipe, shown, targets, truth, whole, words

IGNORED_PREFIXES = ("wandb_", "mlflow_", "comet_", "hub_", "eval_", "dataset_", "save_", "logging_", "lr_",
                    "warmup_", "loss_watchdog", "early_stopping", "swanlab_", "trackio_")  # fmt: skip
IGNORED = words(
    "model_type tokenizer_type tokenizer_config tokenizer_use_fast trust_remote_code strict datasets "
    "test_datasets val_set_size output_dir chat_template default_system_message special_tokens eot_tokens "
    "train_on_inputs group_by_length num_epochs max_steps learning_rate lr_scheduler cosine_min_lr_ratio "
    "weight_decay evals_per_epoch saves_per_epoch resume_from_checkpoint auto_resume_from_checkpoints "
    "local_rank lora_model_dir lora_dropout lora_fan_in_fan_out peft_use_rslora max_grad_norm tf32 seed "
    "shuffle_merged_datasets experimental_skip_move_to_device use_tensorboard "
    "gradient_checkpointing_kwargs debug base_model_config is_llama_derived_model "
    "is_mistral_derived_model is_qwen_derived_model deepspeed_configs plugins"
)
WHY_IGNORED = "changes nothing a training step holds on the device"
PACKING = ("sample_packing", "eval_sample_packing", "pad_to_sequence_len", "sample_packing_sequentially")
UNMODELLED = {  # key -> why, refused unless left off (None, false, empty)
    "load_in_8bit": "LoRA on an 8-bit (LLM.int8) base is not modelled: calc's QLoRA is 4-bit NF4",
    "lora_modules_to_save": "a trainable full copy of a module beside its frozen one is not modelled",
    "peft_use_dora": "DoRA's magnitude vector and weight-norm pass are not modelled",
    "rl": "preference training (a policy and a reference model) is not modelled",
    "xformers_attention": "xformers' attention is not modelled (sdpa, eager and flash are)",
    "flex_attention": "flex attention is not modelled (sdpa, eager and flash are)",
    "activation_offloading": "saved activations moved to the host are not modelled",
    "torch_compile": "a compiled step frees and fuses differently: calc replays eager PyTorch",
    "liger_rope": "Liger's kernels change what a layer saves: only its fused loss is modelled",
    "liger_rms_norm": "", "liger_glu_activation": "", "liger_layer_norm": "", "liger_swiglu": "",
    "cut_cross_entropy": "Cut Cross-Entropy's loss is not modelled (Liger's fused loss is)",
    "tokens": "added tokens grow the embedding and the head: give the new vocabulary as a config",
    "unsloth_lora_mlp": "unsloth's kernels are not modelled", "unsloth_lora_qkv": "", "unsloth_lora_o": "",
    "lora_mlp_kernel": "axolotl's LoRA kernels save other tensors than peft's layers", "lora_qkv_kernel": "",
    "lora_o_kernel": "", "use_kernels": "the Hub's kernels (transformers' use_kernels) are not modelled",
    "model_quantization_config": "a quantized base other than bitsandbytes NF4 is not modelled",
    "model_quantization_config_kwargs": "", "tensor_parallel_size": "tensor parallelism (DeepSpeed AutoTP) is "
    "not read yet", "context_parallel_size": "context parallelism is not modelled", "dp_shard_size": "",
    "dp_replicate_size": "", "gptq": "a GPTQ base is not modelled", "relora_steps": "ReLoRA is not modelled",
    "neftune_noise_alpha": "NEFTune's noise tensor is not modelled", "fp8": "fp8 training is not modelled",
    "qat": "quantization-aware training is not modelled",
}  # fmt: skip


def left_off(key: str, value: object) -> bool:
    """A key left off: None, false or empty, or a parallel size of 1."""
    if key.endswith("_size"):
        return value is None or (value == 1 and not isinstance(value, bool))
    return off(value)


def read(doc: dict, r: Reading, device: str = "cuda") -> None:
    r.tools.append("axolotl")
    for key, value in doc.items():
        if key in HANDLED or key in PACKING:
            continue
        if key in UNMODELLED:
            if not left_off(key, value):
                raise Refused(key, UNMODELLED[key] or UNMODELLED[_family(key)])
            r.ignore(key, "off")
        elif key in IGNORED or key.startswith(IGNORED_PREFIXES):
            r.ignore(key, WHY_IGNORED)
        else:
            raise Refused(key, "not an axolotl key calc knows")
    for key in PACKING:
        if key in doc:
            r.ignore(key, "a packed (or padded) row holds sequence_len tokens, as --seq counts them")
    if doc.get("liger_fused_linear_cross_entropy"):
        r.set("liger_fused_linear_cross_entropy", True, loss="liger-fused")
    _steps(doc, r)
    _tuning(doc, r)
    _precision(doc, r)
    optimizer(r, "optimizer", doc.get("optimizer"), device)
    _attention(doc, r)
    _distributed(doc, r)
    if not doc.get("base_model"):
        raise Refused("base_model", "missing: axolotl needs the model to train")
    r.model, r.model_key = str(doc["base_model"]), "base_model"


def _family(key: str) -> str:
    """The UNMODELLED key whose message a key of the same kind shares."""
    return next(k for k in UNMODELLED if UNMODELLED[k] and k.split("_")[0] == key.split("_")[0])


def _steps(doc: dict, r: Reading) -> None:
    r.default("AxolotlTrainer is a transformers Trainer", loop="trainer")
    number(r, doc, "sequence_len", 512, "axolotl: sequence_len = 512", "seq")
    number(r, doc, "micro_batch_size", 1, "axolotl: micro_batch_size = 1", "micro_batch")
    if doc.get("gradient_accumulation_steps") is None and doc.get("batch_size") is not None:
        micro = whole("micro_batch_size", doc.get("micro_batch_size", 1))
        r.set("batch_size", doc["batch_size"], grad_accum=max(1, whole("batch_size", doc["batch_size"]) // micro))
    else:
        number(r, doc, "gradient_accumulation_steps", 1, "axolotl: gradient_accumulation_steps = 1", "grad_accum")
        if doc.get("batch_size") is not None:
            r.ignore("batch_size", "gradient_accumulation_steps is given")
    if doc.get("gradient_checkpointing") is not None:
        value = doc["gradient_checkpointing"]
        if isinstance(value, str) and value.lower() in ("offload", "offload_disk", "unsloth"):
            raise Refused("gradient_checkpointing", f"{shown(value)}: checkpoints kept on the host are not modelled")
        on = truth("gradient_checkpointing", value)
        r.set("gradient_checkpointing", value, recompute="full" if on else "none")
    else:
        r.default("axolotl: gradient_checkpointing = false", recompute="none")


def _tuning(doc: dict, r: Reading) -> None:
    adapter = doc.get("adapter")
    if adapter in (None, ""):
        if truth("load_in_4bit", doc.get("load_in_4bit")):
            raise Refused("load_in_4bit", "a 4-bit base trains only adapters: set adapter qlora")
        r.default("axolotl: no adapter trains every parameter", finetune="full")
        return
    if adapter not in ("lora", "qlora"):
        raise Refused("adapter", f"{adapter}: calc models lora and qlora")
    four = truth("load_in_4bit", doc.get("load_in_4bit"))
    if (adapter == "qlora") != four:
        raise Refused("load_in_4bit", "qlora loads the base in 4 bits (load_in_4bit: true); lora does not")
    r.set("adapter", adapter, finetune=adapter)
    for key, field in (("lora_r", "lora_rank"), ("lora_alpha", "lora_alpha")):
        if doc.get(key) is None:
            raise Refused(key, "axolotl has no default for it: give it")
        r.set(key, doc[key], **{field: whole(key, doc[key])})
    if truth("lora_target_linear", doc.get("lora_target_linear")):
        r.set("lora_target_linear", True, lora_targets="all-linear")
        r.linear_names = True  # utils/models.py find_all_linear_names: every nn.Linear's name but the head's
        if doc.get("lora_target_modules"):
            r.ignore("lora_target_modules", "lora_target_linear takes every linear")
    elif doc.get("lora_target_modules"):
        r.set("lora_target_modules", doc["lora_target_modules"],
              lora_targets=targets("lora_target_modules", doc["lora_target_modules"]))
    else:
        raise Refused("lora_target_modules", "give lora_target_modules or lora_target_linear: true")
    autocast = doc.get("peft_autocast_adapter_dtype")
    if autocast is not None and not truth("peft_autocast_adapter_dtype", autocast):
        r.set("peft_autocast_adapter_dtype", False, adapter_dtype="model")
    else:
        r.default("peft: get_peft_model(autocast_adapter_dtype=True) keeps adapters in fp32", adapter_dtype="fp32")


def _precision(doc: dict, r: Reading) -> None:
    fp16 = truth("fp16", doc.get("fp16")) or truth("float16", doc.get("float16"))
    if fp16:
        raise Refused("fp16" if truth("fp16", doc.get("fp16")) else "float16", "fp16 (GradScaler's unscaled copies and "
                      "inf checks) is not modelled: calc counts bf16")  # fmt: skip
    bf16 = doc.get("bf16", "auto")
    bf16 = True if bf16 == "auto" else truth("bf16", bf16)
    bf16 = bf16 or truth("bfloat16", doc.get("bfloat16"))
    key = next((k for k in ("bf16", "bfloat16", "fp16", "float16") if doc.get(k) not in (None, False)), "bf16")
    weights = "bf16" if bf16 else "fp16" if fp16 else "fp32"
    value = recipe(key, weights, "bf16" if bf16 else "fp16" if fp16 else "")
    r.sixteen = "bf16" if bf16 else ""
    full = doc.get("adapter") in (None, "")
    flash = any(truth(k, doc.get(k)) for k in ("flash_attention", "flex_attention")) or doc.get(
        "attn_implementation") in ("flash_attention_2", "flash_attention_3", "flex_attention")  # fmt: skip
    if full and bf16 and not flash and not (doc.get("fsdp_config") or doc.get("fsdp")):
        raise Refused(key, "a full fine-tune in bf16 without flash attention keeps the norms, embedding and head "
                           "upcast to fp32 beside bf16 layers: a model of two dtypes calc does not model")
    if key in doc:
        r.set(key, doc[key], recipe=value)
    else:
        r.default("axolotl: bf16 = auto (true on a card with bf16): the model loaded in bf16", recipe=value)


def _attention(doc: dict, r: Reading) -> None:
    if doc.get("attn_implementation") is not None:
        attention(r, "attn_implementation", doc["attn_implementation"])
        return
    for key, impl in (("flash_attention", "flash_attention_2"), ("sdp_attention", "sdpa"),
                      ("eager_attention", "eager")):  # fmt: skip
        if doc.get(key) is not None:
            if truth(key, doc[key]):
                attention(r, key, impl)
                r.read[-1]["value"] = shown(doc[key])
                return
            r.ignore(key, "false")
    r.default("axolotl passes no attn_implementation: transformers' default, sdpa", attention="sdpa")


def _distributed(doc: dict, r: Reading) -> None:
    if doc.get("deepspeed"):
        r.names_deepspeed("deepspeed", doc["deepspeed"])
    fsdp = doc.get("fsdp_config") or {}
    if doc.get("fsdp") or fsdp:
        raise Refused("fsdp_config", "axolotl's FSDP runs accelerate's bf16 policy, which reduces gradients in "
                                     "bf16 (calc's fsdp-bf16 reduces in fp32): not modelled yet")  # fmt: skip
    for key in ("fsdp_version",):
        if key in doc:
            r.ignore(key, "no fsdp_config")


HANDLED = frozenset(
    words(
        "base_model sequence_len micro_batch_size gradient_accumulation_steps batch_size "
        "gradient_checkpointing adapter load_in_4bit lora_r lora_alpha lora_target_linear lora_target_modules "
        "peft_autocast_adapter_dtype bf16 bfloat16 fp16 float16 optimizer attn_implementation flash_attention "
        "sdp_attention eager_attention deepspeed fsdp fsdp_config fsdp_version "
        "liger_fused_linear_cross_entropy"
    )
)
