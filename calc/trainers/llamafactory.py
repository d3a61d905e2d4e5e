"""A LLaMA-Factory YAML (`llamafactory-cli train FILE`), as LLaMA-Factory reads it: src/llamafactory/hparams/
(finetuning_args.py, model_args.py, data_args.py, parser.py) and model/ (patcher.py, adapter.py,
model_utils/checkpointing.py, quantization.py) at commit 00577a85775a2a78b14641ff8f68c58c6f46b027.

- `finetuning_type` defaults to lora; freeze trains the last `freeze_trainable_layers` (2) blocks alone, the
  embedding, final norm and head frozen (`freeze_extra_modules` read for embed_tokens alone: _freeze); `lora_target`
  defaults to all (every linear but the head); `lora_rank` to 8,
  `lora_alpha` to twice the rank. `quantization_bit` 4: bitsandbytes NF4 with double quantization (QLoRA).
- `cutoff_len` (2048): each row's tokens. `per_device_train_batch_size` (8) and `gradient_accumulation_steps`
  (1) are TrainingArguments'.
- Precision: the model is loaded in the compute dtype (bf16 with `bf16` or `pure_bf16`), and every trainable
  parameter is cast to fp32 unless `pure_bf16` (init_adapter, cast_trainable_params_to_fp32), under the
  Trainer's bf16 autocast. So a full fine-tune with `bf16` trains fp32 weights under autocast; with `pure_bf16`
  bf16 throughout; a LoRA's adapters are fp32 on a bf16 base (or bf16 with `pure_bf16`).
- `disable_gradient_checkpointing` defaults to false: every layer checkpointed unless it is set.
- `flash_attn` auto leaves transformers' default (sdpa); disabled is eager; fa2 is FlashAttention-2.
- `stage` sft or pt runs a Seq2SeqTrainer, a transformers Trainer: the trainer loop.
"""

from __future__ import annotations

from .reading import Reading, Refused, attention, number, off, optimizer, recipe, shown, targets, truth, whole, words

IGNORED = words(
    "trust_remote_code do_train do_eval do_predict dataset eval_dataset dataset_dir template max_samples "
    "overwrite_cache preprocessing_num_workers dataloader_num_workers output_dir logging_steps save_steps "
    "plot_loss overwrite_output_dir save_only_model learning_rate num_train_epochs max_steps "
    "lr_scheduler_type warmup_ratio warmup_steps ddp_timeout val_size per_device_eval_batch_size "
    "eval_strategy eval_steps resume_from_checkpoint report_to run_name seed lora_dropout use_rslora "
    "weight_decay max_grad_norm save_strategy save_total_limit logging_dir tokenized_path streaming "
    "buffer_size mix_strategy interleave_probs train_on_prompt mask_history packing neat_packing "
    "default_system enable_thinking adapter_name_or_path export_dir hub_model_id push_to_hub cache_dir "
    "model_revision tf32 use_reentrant_gc low_cpu_mem_usage"
)
WHY_IGNORED = "changes nothing a training step holds on the device"
UNMODELLED = {
    "additional_target": "a trainable full copy of a module beside its frozen one is not modelled",
    "use_dora": "DoRA's magnitude vector and weight-norm pass are not modelled",
    "enable_liger_kernel": "Liger's kernels change what a layer saves: not modelled",
    "use_unsloth": "unsloth's kernels are not modelled", "use_unsloth_gc": "checkpoints kept on the host are not "
    "modelled", "use_galore": "GaLore's projected states are not modelled", "use_apollo": "APOLLO is not modelled",
    "use_badam": "BAdam (a block at a time) is not modelled", "use_adam_mini": "Adam-mini is not modelled",
    "use_muon": "Muon is not modelled", "upcast_layernorm": "norms upcast to fp32 beside bf16 layers are not "
    "modelled", "upcast_lmhead_output": "an fp32 copy of the logits is not modelled", "pissa_init": "PiSSA's "
    "initialisation keeps a residual copy not modelled", "use_llama_pro": "LLaMA Pro's added blocks are not "
    "modelled", "torch_compile": "a compiled step frees and fuses differently: calc replays eager PyTorch",
    "fp16": "fp16 (GradScaler's unscaled copies and inf checks) is not modelled: calc counts bf16",
    "neftune_noise_alpha": "NEFTune's noise tensor is not modelled",
}  # fmt: skip
STAGES = ("sft", "pt")  # rm (a value head), ppo, dpo and kto (a reference model) are not modelled


def read(doc: dict, r: Reading, device: str = "cuda") -> None:
    r.tools.append("llamafactory")
    for key, value in doc.items():
        if key in HANDLED:
            continue
        if key in UNMODELLED:
            if not off(value):
                raise Refused(key, UNMODELLED[key])
            r.ignore(key, "off")
        elif key in IGNORED:
            r.ignore(key, WHY_IGNORED)
        else:
            raise Refused(key, "not a LLaMA-Factory key calc knows")
    stage = doc.get("stage", "sft")
    if stage not in STAGES:
        raise Refused("stage", f"{stage}: calc models sft and pt (a value head or a reference model is not modelled)")
    r.default("LLaMA-Factory's CustomSeq2SeqTrainer is a transformers Trainer", loop="trainer")
    number(r, doc, "cutoff_len", 2048, "LLaMA-Factory: cutoff_len = 2048", "seq")
    number(r, doc, "per_device_train_batch_size", 8, "TrainingArguments.per_device_train_batch_size = 8",
           "micro_batch")
    number(r, doc, "gradient_accumulation_steps", None, "", "grad_accum")
    no_checkpoints = truth("disable_gradient_checkpointing", doc.get("disable_gradient_checkpointing", False))
    if "disable_gradient_checkpointing" in doc:
        r.set("disable_gradient_checkpointing", doc["disable_gradient_checkpointing"],
              recompute="none" if no_checkpoints else "full")
    else:
        r.default("LLaMA-Factory: disable_gradient_checkpointing = false: every layer checkpointed", recompute="full")
    _tuning(doc, r)
    _precision(doc, r)
    optimizer(r, "optim", doc.get("optim"), device)
    flash = doc.get("flash_attn", "auto")
    impl = {"auto": None, "sdpa": "sdpa", "disabled": "eager", "fa2": "flash_attention_2"}.get(flash, flash) if \
        isinstance(flash, str) else flash  # fmt: skip
    if impl is not None:
        attention(r, "flash_attn", impl)
        r.read[-1]["value"] = shown(flash)
    else:
        r.default("LLaMA-Factory: flash_attn = auto leaves transformers' default, sdpa", attention="sdpa")
    if doc.get("deepspeed"):
        r.names_deepspeed("deepspeed", doc["deepspeed"])
    if not doc.get("model_name_or_path"):
        raise Refused("model_name_or_path", "missing: LLaMA-Factory needs the model to train")
    r.model, r.model_key = str(doc["model_name_or_path"]), "model_name_or_path"


def _tuning(doc: dict, r: Reading) -> None:
    kind = doc.get("finetuning_type", "lora")
    bits = doc.get("quantization_bit")
    if kind not in ("lora", "full", "freeze"):
        raise Refused("finetuning_type", f"{kind}: calc reads lora, freeze and full (oft is not read yet)")
    if kind == "freeze":
        if bits is not None:
            raise Refused("quantization_bit", "a quantized base trains only adapters: finetuning_type lora")
        _freeze(doc, r)
        return
    if bits not in (None, 4):
        raise Refused("quantization_bit", f"{bits}: calc's QLoRA is 4-bit NF4")
    method, kind4 = doc.get("quantization_method", "bnb"), doc.get("quantization_type", "nf4")
    if bits == 4 and (method not in ("bnb", "bitsandbytes") or kind4 != "nf4"
                      or doc.get("double_quantization") is False):
        raise Refused("quantization_bit", "calc's QLoRA is bitsandbytes NF4 with double quantization")
    mode = "full" if kind == "full" else "qlora" if bits == 4 else "lora"
    if bits == 4 and kind == "full":
        raise Refused("quantization_bit", "a quantized base trains only adapters: finetuning_type lora")
    if "finetuning_type" in doc:
        r.set("finetuning_type", kind, finetune=mode)
    else:
        r.default("LLaMA-Factory: finetuning_type = lora", finetune=mode)
    if bits == 4:
        r.set("quantization_bit", 4, finetune=mode)
    if mode == "full":
        return
    rank = whole("lora_rank", doc.get("lora_rank", 8))
    number(r, doc, "lora_rank", 8, "LLaMA-Factory: lora_rank = 8", "lora_rank")
    number(r, doc, "lora_alpha", 2 * rank, "LLaMA-Factory: lora_alpha = 2 x lora_rank", "lora_alpha")
    target = doc.get("lora_target", "all")
    value = "all-linear" if target == "all" else targets("lora_target", target)
    if "lora_target" in doc:
        r.set("lora_target", target, lora_targets=value)
    else:
        r.default("LLaMA-Factory: lora_target = all (every linear but the head)", lora_targets=value)
    r.linear_names = target == "all"  # model/model_utils/misc.py find_all_linear_modules: by module name


def _freeze(doc: dict, r: Reading) -> None:
    """finetuning_type freeze (model/adapter.py, _setup_freeze_tuning): the last freeze_trainable_layers blocks
    (2) train, every module of them (freeze_trainable_modules all); every other parameter is frozen, the
    embedding, the final norm and the head included, unless freeze_extra_modules names them (each matched
    anywhere in a parameter's name: calc reads embed_tokens alone, --no-freeze-embedding). calc's
    --freeze-layers is the model's layers less those, set once the model is known (Reading.trainable_last)."""
    n = doc.get("freeze_trainable_layers", 2)
    if isinstance(n, bool) or not isinstance(n, int):
        raise Refused("freeze_trainable_layers", f"{n!r} is not a whole number of blocks")
    if n <= 0:
        raise Refused("freeze_trainable_layers", f"{n}: " + ("trains no block" if n == 0 else "the first blocks "
                      "training below frozen ones is not modelled (calc freezes from the first block up)") +
                      ": give a positive number")  # fmt: skip
    if _names("freeze_trainable_modules", doc.get("freeze_trainable_modules", "all")) != {"all"}:
        raise Refused("freeze_trainable_modules", "some modules of the trained blocks alone is not modelled: all is")
    extra = _names("freeze_extra_modules", doc.get("freeze_extra_modules") or "")
    if extra - {"embed_tokens"}:  # LLaMA-Factory matches each by substring: "norm" trains every block's norms too
        raise Refused("freeze_extra_modules", f"{sorted(extra - {'embed_tokens'})[0]}: calc reads embed_tokens alone "
                      "(LLaMA-Factory matches a name anywhere in a parameter's: norm trains every block's norms, "
                      "lm_head the head without the final norm, which is not modelled)")  # fmt: skip
    fields = {"finetune": "freeze", "freeze_embedding": str("embed_tokens" not in extra).lower(), "freeze_head": "true"}
    r.set("finetuning_type", "freeze", **fields)  # freeze is never the default (lora is)
    r.trainable_last = n
    r.read.append({"key": "freeze_trainable_layers", "value": shown(n) if "freeze_trainable_layers" in doc else
                   "2 (LLaMA-Factory's default)", "gives": f"--freeze-layers the model's layers less {n}"})


def _names(key: str, value: object) -> set[str]:
    """A LLaMA-Factory list of module names: a comma string, as its parser splits it, or a YAML list."""
    items = value if isinstance(value, list) else str(value).split(",")
    return {str(m).strip() for m in items if str(m).strip()}


def _precision(doc: dict, r: Reading) -> None:
    pure = truth("pure_bf16", doc.get("pure_bf16", False))
    bf16 = truth("bf16", doc.get("bf16", False))
    if not (pure or bf16):
        give = "pure_bf16: true" if r.fields.get("finetune") == "freeze" else "bf16: true or pure_bf16: true"
        raise Refused("bf16", f"not set: LLaMA-Factory then infers the dtype from the card and checkpoint; give {give}")
    full = r.fields.get("finetune") == "full"
    key = "pure_bf16" if pure else "bf16"
    if r.fields.get("finetune") == "freeze" and not pure:
        raise Refused("bf16", "LLaMA-Factory casts a freeze's trainable blocks to fp32 over the bf16 model "
                              "(cast_trainable_params_to_fp32): two dtypes in one model, not modelled yet; "
                              "pure_bf16: true keeps them bf16")  # fmt: skip
    value = recipe(key, "bf16" if pure or not full else "fp32", "bf16")
    r.sixteen = "bf16"
    r.set(key, True, recipe=value)
    if r.fields.get("finetune") in ("lora", "qlora"):
        dtype = "model" if pure else "fp32"
        r.default("LLaMA-Factory casts trainable parameters to fp32 unless pure_bf16", adapter_dtype=dtype)


HANDLED = frozenset(
    words(
        "model_name_or_path stage finetuning_type lora_target lora_rank lora_alpha quantization_bit "
        "cutoff_len per_device_train_batch_size gradient_accumulation_steps disable_gradient_checkpointing "
        "pure_bf16 bf16 optim flash_attn deepspeed quantization_method quantization_type double_quantization "
        "freeze_trainable_layers freeze_trainable_modules freeze_extra_modules"
    )
)
