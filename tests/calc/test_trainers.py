"""Trainer configs (calc.trainers, --trainer-config): the tools' own shipped examples (tests/trainer_configs,
copied verbatim; PROVENANCE.md says from where) read into the fields each tool means, refusals naming the key,
and the same fields through the CLI as through calc.trainers."""

import dataclasses
import json
import warnings

import pytest

import calc
from calc import trainers
from calc.cli import main
from calc.trainers import accelerate, hf_args
from conftest import ROOT

CONFIGS = ROOT / "tests" / "trainer_configs"


def text(*names):
    return [(CONFIGS / n).read_text(encoding="utf-8") for n in names]


def reading(*names, **raw):
    return trainers.apply(raw, text(*names))


# Each shipped example with the fields its tool means (a subset: the rest are in the reading's lists).
READS = {
    ("llamafactory/llama3_lora_sft.yaml",): {
        "seq": "1024", "micro-batch": "1", "grad-accum": "8", "finetune": "lora", "lora-rank": "8",
        "lora-alpha": "16", "lora-targets": "all-linear", "recipe": "bf16", "adapter-dtype": "fp32",
        "recompute": "full", "optimizer": "adamw", "adamw-impl": "fused", "loop": "trainer",
        "preset": "llama-3.1-8b", "attention": "sdpa"},
    ("llamafactory/llama3_lora_sft_otfq.yaml",): {"finetune": "qlora", "recipe": "bf16", "adapter-dtype": "fp32"},
    ("llamafactory/llama3_full_sft.yaml", "llamafactory/deepspeed/ds_z3_config.json"): {
        "finetune": "full", "zero": "3", "recipe": "mixed", "seq": "2048", "grad-accum": "2"},
    ("llamafactory/llama3_lora_sft_ds3.yaml", "llamafactory/deepspeed/ds_z3_config.json"): {
        "finetune": "lora", "zero": "3", "recipe": "mixed"},
    ("axolotl/qlora.yml",): {"finetune": "qlora", "lora-targets": "all-linear", "optimizer": "adamw",
                             "paged-optimizer": "true", "recipe": "bf16", "attention": "sdpa", "loop": "trainer"},
    ("axolotl/fft-8b.yaml",): {"finetune": "full", "recipe": "bf16", "recompute": "full", "attention": "sdpa"},
    ("accelerate/trl_multi_gpu.yaml",): {"dp": "3", "engine": None, "zero": "0", "recipe": "autocast"},  # the
    # deck walk counts no engine (test_the_eager_walk_takes_the_engine)
    ("accelerate/trl_single_gpu.yaml",): {"recipe": "autocast"},
    ("axolotl/deepspeed_configs/zero3_bf16.json",): {"zero": "3", "recipe": "mixed"},
    ("llamafactory/deepspeed/ds_z0_config.json",): {"zero": "0"},
    ("axolotl/deepspeed_configs/zero2.json",): {"zero": "2", "offload": "optimizer"},  # tests/calc/test_offload.py
    ("axolotl/deepspeed_configs/zero3_bf16_cpuoffload_all.json",): {"zero": "3", "offload": "optimizer+params"},
    ("llamafactory/deepspeed/ds_z3_offload_config.json",): {"zero": "3", "offload": "optimizer+params"},
}  # fmt: skip
# Each shipped example calc refuses, with the key it names.
REFUSES = {
    ("axolotl/lora-8b.yml",): "load_in_8bit",
    ("axolotl/instruct-lora-8b.yml",): "load_in_8bit",
    ("axolotl/fft-8b-liger-fsdp.yaml",): "liger_rope",
    ("axolotl/gpt-oss-20b-fft-deepspeed-zero3.yaml",): "model_quantization_config",
    ("llamafactory/llama3_full_sft.yaml",): "deepspeed",  # names a DeepSpeed JSON not given
    ("accelerate/trl_fsdp1.yaml",): "fsdp_config.fsdp_version",
    ("accelerate/trl_fsdp2.yaml",): "mixed_precision",
    ("trl/example_config.yaml",): "model_name_or_path",  # Qwen2.5-0.5B: no preset of its shape
    ("torchtitan/llama3_8b.toml",): "activation_checkpoint.mode",  # selective by op: not Korthikanti's
    ("torchtitan/debug_model.toml",): "model.flavor",  # the debug model: no preset
}  # fmt: skip


@pytest.mark.parametrize("names", list(READS), ids=lambda n: "+".join(n))
def test_shipped_examples_read_as_their_tool_means(names):
    out, r = reading(*names)
    assert {k: out.get(k) for k in READS[names]} == READS[names]
    assert r.tools and r.read and r.ignored  # every key is read, defaulted or listed as ignored


@pytest.mark.parametrize("names", list(REFUSES), ids=lambda n: "+".join(n))
def test_shipped_examples_calc_cannot_model_are_refused_naming_the_key(names):
    with pytest.raises(trainers.Refused) as e:
        reading(*names)
    assert e.value.key == REFUSES[names]


def test_every_key_of_a_shipped_example_is_accounted_for():
    """Each top-level key of a file read is in the read list, the ignored list or gave a default's neighbour."""
    for names in READS:
        _, r = reading(*names)
        listed = {e["key"].split(".")[0] for e in (*r.read, *r.ignored)}
        for name in names:
            for doc in trainers.parse((CONFIGS / name).read_text()):
                assert set(doc) - listed <= {"model_type"} | set(_handled_silently(doc)), (name, set(doc) - listed)


def _handled_silently(doc):
    """Keys a reader takes in with another (stage, lora_dropout...) or at their default: none may be lost."""
    return {"stage", "do_train", "lora_target_linear", "load_in_4bit", "load_in_8bit", "adapter", "lora_r",
            "lora_alpha", "pure_bf16", "flash_attention", "quantization_method", "use_cpu", "distributed_type",
            "num_processes", "mixed_precision", "deepspeed_config", "fsdp_config", "zero_optimization", "bf16",
            "fp16", "gradient_checkpointing"} & set(doc)  # fmt: skip


def test_flags_override_the_config_and_an_error_names_the_key_that_set_the_field():
    out, r = reading("llamafactory/llama3_lora_sft.yaml", seq="512")
    assert out["seq"] == "512" and "seq" not in r.fields
    assert {"key": "cutoff_len", "value": "1024", "gives": "(--seq: the flag's 512 instead)"} in r.read
    assert trainers.blame("seq", "too long", r, {"seq": "512"}) == ("seq", "too long")
    field, message = trainers.blame("grad-accum", "too many", r, {})
    assert (field, message) == ("trainer-config", "gradient_accumulation_steps gives --grad-accum 8: too many")


def test_the_eager_walk_takes_the_engine():
    out, _ = reading("accelerate/trl_multi_gpu.yaml", walk="eager")
    assert (out["dp"], out["engine"]) == ("3", "ddp")


def test_a_deepspeed_json_decides_the_precision_and_drops_the_trainers_loop():
    out, r = reading("llamafactory/llama3_lora_sft_ds3.yaml", "llamafactory/deepspeed/ds_z3_config.json")
    assert out["recipe"] == "mixed" and "loop" not in out and "adamw-impl" not in out
    assert any("DeepSpeed's engine decides" in e["gives"] for e in r.read)


def test_the_eager_walk_refuses_deepspeeds_engine():
    with pytest.raises(trainers.Refused, match="DeepSpeed's engine is not in the eager walk"):
        reading("axolotl/deepspeed_configs/zero3_bf16.json", walk="eager")


def test_two_files_that_disagree_are_refused_naming_the_key():
    sft = json.dumps({"per_device_train_batch_size": 2, "max_length": 512})
    ds = json.dumps({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 1}})
    with pytest.raises(trainers.Refused, match="the files disagree") as e:
        trainers.apply({}, [sft, ds])
    assert e.value.key == "train_micro_batch_size_per_gpu"


def test_trainingarguments_may_hold_its_deepspeed_config_inline():
    args = {"per_device_train_batch_size": 2, "bf16": True, "deepspeed": {"zero_optimization": {"stage": 2},
                                                                          "bf16": {"enabled": "auto"}}}  # fmt: skip
    out, r = trainers.apply({}, [json.dumps(args)])
    assert (out["zero"], out["recipe"], r.tools) == ("2", "mixed", ["transformers", "deepspeed"])


def test_a_deepspeed_batch_of_numbers_gives_the_process_count():
    ds = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
          "zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}  # fmt: skip
    out, _ = trainers.apply({}, [json.dumps(ds)])
    assert (out["dp"], out["micro-batch"], out["grad-accum"], out["zero"], out["recipe"]) == ("8", "2", "4", "2",
                                                                                            "mixed")
    with pytest.raises(trainers.Refused) as e:
        trainers.apply({}, [json.dumps({**ds, "train_batch_size": 63})])
    assert e.value.key == "train_batch_size"


def test_sft_defaults_are_trls():
    out, _ = trainers.apply({}, ["per_device_train_batch_size: 2\nmax_length: 2048\n"])
    assert (out["loop"], out["recipe"], out["recompute"], out["seq"]) == ("sft", "autocast", "full", "2048")
    out, _ = trainers.apply({}, ["per_device_train_batch_size: 2\nmodel_init_kwargs: {dtype: bfloat16}\n"])
    assert out["recipe"] == "bf16" and out["seq"] == "1024"
    out, _ = trainers.apply({}, ["per_device_train_batch_size: 2\noutput_dir: out\n"])  # plain TrainingArguments
    assert (out["loop"], out["recipe"], out["recompute"]) == ("trainer", "fp32-full", "none")


@pytest.mark.parametrize("bad, key", [
    ("per_device_train_batch_size: 0\n", "per_device_train_batch_size"),
    ("per_device_train_batch_size: two\n", "per_device_train_batch_size"),
    ("per_device_train_batch_size: 1\noptim: muon\n", "optim"),
    ("per_device_train_batch_size: 1\nfp16: true\n", "fp16"),
    ("per_device_train_batch_size: 1\ntorch_compile: true\n", "torch_compile"),
    ("per_device_train_batch_size: 1\nnot_a_key: 3\n", "not_a_key"),
    ("- a list\n- not a mapping\n", "trainer-config"),
    ("a: [unclosed\n", "trainer-config"),
    ("just: text\n", "trainer-config"),
    ("{\"zero_optimization\": {\"stage\": 5}}", "zero_optimization.stage"),
    ("base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nlora_alpha: 16\nlora_target_linear: true\n", "lora_r"),
])  # fmt: skip
def test_bad_configs_are_refused_naming_the_key(bad, key):
    with pytest.raises(trainers.Refused) as e:
        trainers.apply({}, [bad])
    assert e.value.key == key


def test_a_control_character_is_refused_in_one_line():
    """PyYAML's reader says where a NUL byte is on a second line: the refusal is one line (the CLI's, the page's)."""
    with pytest.raises(trainers.Refused) as e:
        trainers.apply({}, ["\x00base_model: x\n"])
    assert e.value.key == "trainer-config" and "\n" not in e.value.why and "special characters" in e.value.why


def test_hostile_yaml_is_refused_quickly():
    """An alias bomb (each list nine of the one before: 9^9 values) is refused before any reader turns one of
    its values into text (some format a value whole); a large but bounded use of aliases is read as references,
    and shown by its size."""
    bomb = "dataset_kwargs:\n- &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"- &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))
    with pytest.raises(trainers.Refused) as e:
        trainers.apply({}, [bomb + "per_device_train_batch_size: *i\n"])
    assert e.value.key == "trainer-config" and "aliases repeat more than 100,000 values" in e.value.why
    small = "dataset_kwargs:\n- &a [x, x, x, x, x, x, x, x, x]\n- &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    with pytest.raises(trainers.Refused) as e:
        trainers.apply({}, [small + "per_device_train_batch_size: *b\n"])
    assert e.value.key == "per_device_train_batch_size" and "a list of 9" in e.value.why
    with pytest.raises(trainers.Refused, match="characters is not a trainer config"):
        trainers.apply({}, ["a: b\n" * 100_000])


def test_cli_reads_the_files_and_lists_what_it_read(capsys):
    files = [str(CONFIGS / n) for n in ("llamafactory/llama3_lora_sft.yaml",)]
    assert main(["--trainer-config", files[0], "--walk", "eager", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    t = data["trainer_config"]
    assert t["tools"] == ["llamafactory"] and t["fields"]["lora-targets"] == "all-linear"
    assert {"cutoff_len", "model_name_or_path"} <= {e["key"] for e in t["read"]}
    assert "output_dir" in {e["key"] for e in t["ignored"]}
    assert data["config"]["seq"] == 1024 and data["config"]["finetune"]["targets"] == ["q", "k", "v", "o", "gate",
                                                                                         "up", "down"]
    # the same as the flags it stands for
    flags = [f"--{k}={v}" for k, v in t["fields"].items()] + ["--preset", "llama-3.1-8b", "--walk", "eager", "--json"]
    assert main(flags) == 0
    alone = json.loads(capsys.readouterr().out)
    assert alone["peak"] == data["peak"] and alone["events"] == data["events"]


def test_cli_refusals_are_one_line_with_exit_2(capsys, tmp_path):
    path = tmp_path / "args.yaml"
    path.write_text("per_device_train_batch_size: 1\noptim: galore_adamw\n")
    assert main(["--trainer-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --trainer-config: optim: galore_adamw")
    assert main(["--trainer-config", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err
    lora = str(CONFIGS / "llamafactory/llama3_lora_sft.yaml")
    assert main(["--trainer-config", lora, "--recipe", "fp16"]) == 2  # a bad flag beside the file: the flag's
    assert capsys.readouterr().err.startswith("error: --recipe: ")


def test_plan_leaves_out_what_it_chooses_itself(capsys):
    ds = str(CONFIGS / "axolotl/deepspeed_configs/zero3_bf16.json")
    assert main(["--trainer-config", ds, "--plan", "--preset", "llama-3.1-8b", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)


@pytest.mark.torch
def test_every_trainingarguments_and_sftconfig_field_is_read_ignored_or_refused():
    """A key a later transformers or TRL adds fails here, not silently in a user's file."""
    from transformers import TrainingArguments
    from trl import ModelConfig, ScriptArguments, SFTConfig

    known = hf_args.HANDLED | set(hf_args.IGNORED) | set(hf_args.UNMODELLED)
    for cls in (TrainingArguments, SFTConfig, ModelConfig, ScriptArguments):
        missing = {f.name for f in dataclasses.fields(cls)} - known
        assert not missing, (cls.__name__, missing)


@pytest.mark.torch
def test_a_real_sftconfig_as_to_json_string_prints_it_reads_as_trl_means():
    from trl import SFTConfig

    with warnings.catch_warnings():  # SFTConfig's own default (gradient_checkpointing) is deprecated in 5.x
        warnings.simplefilter("ignore", FutureWarning)
        args = SFTConfig(output_dir="/tmp/out", per_device_train_batch_size=4, gradient_accumulation_steps=2,
                         max_length=2048, report_to="none", use_cpu=True)  # fmt: skip
    out, _ = trainers.apply({"preset": "llama-3.2-1b"}, [args.to_json_string()])
    assert (out["micro-batch"], out["grad-accum"], out["seq"], out["loop"], out["recipe"], out["recompute"]) == (
        "4", "2", "2048", "sft", "autocast", "full")
    assert out["optimizer"] == "adamw" and out["adamw-impl"] == "fused" and out["device"] == "cpu"


# A fresh-eyes review's findings, each held by a test.
@pytest.mark.parametrize("doc, key", [
    ({"output_dir": "x", "fsdp": "full_shard", "fsdp_config": {"fsdp_version": 2, "fsdp_offload_params": True}},
     "fsdp"),  # transformers drops the fsdp_ prefix: the prefixed key is read, not lost
    ({"output_dir": "x", "fsdp": "full_shard", "fsdp_config": {"version": 2, "cpu_offload_x": 1}},
     "fsdp_config.cpu_offload_x"),
    ({"output_dir": "x", "fsdp": "no_shard", "fsdp_config": {"version": 2}}, "fsdp"),
    ({"output_dir": "x", "bf16": True, "fsdp": "full_shard", "fsdp_config": {"version": 2}}, "bf16"),
    ({"max_length": 512, "model_init_kwargs": {"quantization_config": {"load_in_4bit": True}}},
     "model_init_kwargs.quantization_config"),
    ({"output_dir": "x", "attn_implementation": ["sdpa"]}, "attn_implementation"),
    ({"output_dir": "x", "per_device_train_batch_size": "\u00b2"}, "per_device_train_batch_size"),
    ({"output_dir": "x", "torch_compile": "true"}, "torch_compile"),
    ({"distributed_type": "FSDP", "num_processes": 2, "fsdp_config": [1]}, "fsdp_config"),
    ({"zero_optimization": {"stage": 1}, "activation_checkpointing": [1]}, "activation_checkpointing"),
])  # fmt: skip
def test_what_a_review_found_is_refused_naming_the_key(doc, key):
    with pytest.raises(trainers.Refused) as e:
        trainers.apply({}, [json.dumps(doc)])
    assert e.value.key == key


def test_axolotl_takes_transformers_default_attention_and_its_own_words():
    axolotl = "base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nlora_r: 8\nlora_alpha: 16\n" \
              "lora_target_linear: true\n"  # fmt: skip
    out, r = trainers.apply({}, [axolotl])
    assert out["attention"] == "sdpa" and any("sdpa" in d["why"] for d in r.defaults)
    for value, recompute in (("offload", None), ("False", "none"), ("true", "full")):
        text = axolotl + f"gradient_checkpointing: {value!r}\n"
        if recompute is None:
            with pytest.raises(trainers.Refused, match="host"):
                trainers.apply({}, [text])
        else:
            assert trainers.apply({}, [text])[0]["recompute"] == recompute
    with pytest.raises(trainers.Refused) as e:
        trainers.apply({}, [axolotl + "fp16: true\nbf16: false\n"])
    assert e.value.key == "fp16"
    out, _ = trainers.apply({}, [axolotl + "peft_autocast_adapter_dtype: 'false'\n"])
    assert out["adapter-dtype"] == "model"


def test_deepspeed_auto_accumulation_takes_the_trainers_for_the_process_count():
    args = json.dumps({"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4, "output_dir": "x"})
    ds = json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": "auto",
                     "gradient_accumulation_steps": "auto", "zero_optimization": {"stage": 2}})  # fmt: skip
    out, _ = trainers.apply({}, [args, ds])
    assert out["dp"] == "8"


def test_accelerate_sets_what_deepspeeds_auto_takes_and_the_cpu():
    acc = "distributed_type: DEEPSPEED\nnum_processes: 4\nmixed_precision: bf16\n" \
          "deepspeed_config:\n  deepspeed_config_file: ds.json\n"  # fmt: skip
    ds = json.dumps({"zero_optimization": {"stage": 3}, "bf16": {"enabled": True}})
    with pytest.raises(trainers.Refused) as e:  # accelerate launch: a ValueError (_deepspeed_config_checks)
        trainers.apply({}, [acc, ds])
    assert e.value.key == "mixed_precision" and "--mixed_precision" in str(e.value)
    acc = acc.replace("mixed_precision: bf16\n", "")  # the launch command's --mixed_precision, or the JSON's bf16
    out, _ = trainers.apply({}, [acc, ds])
    assert (out["dp"], out["zero"], out["recipe"]) == ("4", "3", "mixed")
    with pytest.raises(trainers.Refused) as e:
        trainers.apply({}, [acc])  # the JSON it names is missing: said, naming the key
    assert e.value.key == "deepspeed_config.deepspeed_config_file"
    out, _ = trainers.apply({"walk": "eager"}, ["distributed_type: MULTI_CPU\nnum_processes: 2\n"])
    assert (out["device"], out["engine"], out["dp"]) == ("cpu", "ddp", "2")
    out, _ = trainers.apply({}, [json.dumps({"output_dir": "x", "use_cpu": True, "optim": "adamw_torch"})])
    assert out["adamw-impl"] == "single"  # torch's own pick on the CPU


def test_a_file_s_text_in_a_message_stays_one_line():
    with pytest.raises(trainers.Refused) as e:
        trainers.apply({}, ['output_dir: x\n"evil\\nkey\\x1b[31m": 1\n'])
    assert "\n" not in str(e.value) and "\x1b" not in str(e.value) and "\\n" in e.value.key


def test_a_field_is_in_one_list_only():
    out, r = reading("accelerate/trl_multi_gpu.yaml")  # the deck walk over 3 processes: no engine
    gives = " ".join(e["gives"] for e in (*r.read, *r.defaults))
    assert "engine" not in out and "--engine ddp" not in gives.replace("(--engine:", "")
    assert not {e["key"] for e in r.read} & {e["key"] for e in r.ignored}


def test_every_output_mode_reads_a_trainer_config(capsys):
    lora = str(CONFIGS / "llamafactory/llama3_lora_sft.yaml")
    assert main(["--trainer-config", lora, "--fit-card", "--card", "rtx-4090"]) == 0
    assert "trainer config (llamafactory)" in capsys.readouterr().out
    full = ["--trainer-config", str(CONFIGS / "llamafactory/llama3_full_sft.yaml"), "--trainer-config",
            str(CONFIGS / "llamafactory/deepspeed/ds_z3_config.json")]  # fmt: skip
    for mode in ("--plan", "--table", "--events"):
        assert main([*full, mode, *(["--dp", "8"] if mode != "--plan" else [])]) == 0, mode
        assert "trainer config (llamafactory, deepspeed)" in capsys.readouterr().out
    axolotl = str(CONFIGS / "axolotl/fft-8b.yaml")  # its paged 8-bit AdamW: the planner's rows are AdamW's
    assert main(["--trainer-config", axolotl, "--plan"]) == 2
    assert capsys.readouterr().err.startswith("error: --trainer-config: optimizer gives --optimizer adamw-8bit")


def test_the_file_s_loop_gives_the_eager_figure_beside_the_deck_walk_where_it_can(capsys):
    args = json.dumps({"output_dir": "x", "per_device_train_batch_size": 1, "use_liger_kernel": True})
    out, _ = trainers.apply({}, [args])
    assert out["loss"] == "liger-fused"
    path = CONFIGS / "axolotl" / "qlora.yml"  # a paged optimizer: the eager walk refuses it, the deck walk not
    assert main(["--trainer-config", str(path), "--grad-accum", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "eager" not in data and data["config"]["finetune"]["paged"]
    assert any("no eager figure beside" in e["gives"] for e in data["trainer_config"]["defaults"] +
               data["trainer_config"]["read"])


def test_torchtitan_toml_and_its_json_read_alike():
    """torchtitan's own 8B config with full checkpointing: FSDP2's bf16 policy over fp32 shards, as TOML and as
    the same tables in JSON; its global batch gives the accumulation over the ranks it names."""
    import tomllib

    text = (CONFIGS / "torchtitan/llama3_8b.toml").read_text().replace('mode = "selective"', 'mode = "full"')
    out, r = trainers.apply({"walk": "eager"}, [text])
    assert (out["preset"], out["seq"], out["micro-batch"], out["recipe"], out["recompute"], out["engine"],
            out["zero"]) == ("llama-3.1-8b", "8192", "1", "fsdp-bf16", "full", "fsdp2", "3")  # fmt: skip
    assert "dp" not in out and any("give --dp" in d["why"] for d in r.defaults)
    doc = tomllib.loads(text)
    doc["parallelism"].update(data_parallel_shard_degree=8, fsdp_reshard_after_forward="never")
    doc["training"]["global_batch_size"] = 32
    out, _ = trainers.apply({"walk": "eager"}, [json.dumps(doc)])
    assert (out["dp"], out["grad-accum"], out["zero"]) == ("8", "4", "2")
    doc["parallelism"]["tensor_parallel_degree"] = 2
    with pytest.raises(trainers.Refused) as e:
        trainers.apply({}, [json.dumps(doc)])
    assert e.value.key == "parallelism.tensor_parallel_degree"


EXAMPLES = sorted(str(p.relative_to(CONFIGS)) for p in CONFIGS.rglob("*") if p.is_file() and p.suffix != ".md")


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_page_reads_every_shipped_file_as_the_cli_does(name, capsys):
    """The page's trainer box (calc.web.trainer_answer, beside the page's walk and device) gives, for every
    shipped example, what `python -m calc --trainer-config FILE --json` gives: the same reading (the keys read,
    the defaults, the keys ignored) and, with the fields it sets, the same step; or the same refusal."""
    from calc.web import handle

    page = json.loads(handle(json.dumps({"trainer": text(name), "inputs": {"walk": "deck", "device": "cuda"}})))
    rc = main(["--trainer-config", str(CONFIGS / name), "--json"])
    out, err = capsys.readouterr()
    if rc:
        assert not page["ok"] and err == f"error: --{page['field']}: {page['message']}\n"
        return
    cli = json.loads(out)
    assert page["ok"] and page["trainer"]["reading"] == cli["trainer_config"]
    step = json.loads(handle(json.dumps({"inputs": page["trainer"]["fields"], "sweep": False})))
    assert step["step"]["peak"] == cli["peak"] and step["step"]["events"] == cli["events"]


def test_the_page_refuses_what_is_no_trainer_config():
    """No text, an empty one, or not a list of texts: refused naming the box, never an exception."""
    from calc.web import handle

    for sent in ([], "  \n", [1], {"a": 1}, None):
        answer = json.loads(handle(json.dumps({"trainer": sent, "inputs": {}})))
        assert answer["ok"] is False and answer["field"] == "trainer-config", sent


def test_the_tools_every_linear_on_a_mixture_of_experts_is_its_attention(capsys):
    """LLaMA-Factory's `lora_target: all` (its default) and axolotl's `lora_target_linear` name every nn.Linear
    the model has (find_all_linear_modules, find_all_linear_names), not peft's all-linear. In transformers 5 a
    mixture of experts' experts are fused parameters and its router no nn.Linear, so on Mixtral or Qwen3-MoE they
    find q_proj, k_proj, v_proj and o_proj: the same step as --lora-targets q,k,v,o, the key saying so. A shared
    expert (Qwen2-MoE) adds gate_proj, up_proj and down_proj, which peft reads by model type: refused, naming the
    key."""
    lora = str(CONFIGS / "llamafactory" / "llama3_lora_sft.yaml")
    for model in (["--preset", "mixtral-8x7b"], ["--preset", "qwen3-30b-a3b"]):
        assert main(["--trainer-config", lora, *model, "--walk", "eager", "--json"]) == 0
        got = json.loads(capsys.readouterr().out)
        given = dict(got["trainer_config"]["fields"], **{"lora-targets": "q,k,v,o"})
        flags = [a for k, v in given.items() if k != "preset" for a in (f"--{k}", v)]
        assert main([*flags, *model, "--walk", "eager", "--json"]) == 0
        want = json.loads(capsys.readouterr().out)
        assert (got["trainable_params"], got["peak"]) == (want["trainable_params"], want["peak"])
        entry = next(r for r in got["trainer_config"]["read"] if r["key"] == "lora_target")
        assert entry["gives"].startswith("--lora-targets q,k,v,o (every nn.Linear's name"), entry
    qwen2_moe = ["--hf-config", str(ROOT / "tests" / "hf_configs" / "qwen1.5-moe-a2.7b.json"), "--walk", "eager"]
    assert main(["--trainer-config", lora, *qwen2_moe]) == 2
    said = capsys.readouterr().err
    assert said.startswith("error: --trainer-config: lora_target gives --lora-targets all-linear: the tool names "
                           "every nn.Linear, which on this mixture of experts") and said.endswith("o_proj\n"), said
    axolotl = str(CONFIGS / "axolotl" / "qlora.yml")  # lora_target_linear, and a paged optimizer: refused by that
    assert main(["--trainer-config", axolotl, "--preset", "qwen3-30b-a3b", "--walk", "eager"]) == 2
    assert capsys.readouterr().err.startswith("error: --trainer-config: optimizer gives --paged-optimizer true: a "
                                              "mixture of experts is modelled with AdamW on the device only")


def test_peft_all_linear_in_a_trainer_config_is_peft_s_on_a_mixture_of_experts(capsys, tmp_path):
    """TRL's `lora_target_modules: all-linear` hands peft its own all-linear, which peft 0.21 converts on
    Qwen3-MoE (the router and the experts too: calc.finetune.all_linear): the same step as --lora-targets
    all-linear, and not the attention alone that LLaMA-Factory's `lora_target: all` names there."""
    trl = tmp_path / "sft.yaml"
    trl.write_text("model_name_or_path: Qwen/Qwen3-30B-A3B\nuse_peft: true\nlora_target_modules: all-linear\n"
                   "bf16: true\nmax_length: 512\nper_device_train_batch_size: 1\n")
    model = ["--preset", "qwen3-30b-a3b", "--walk", "eager", "--json"]
    assert main(["--trainer-config", str(trl), *model]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["trainer_config"]["fields"]["lora-targets"] == "all-linear"
    flags = [a for k, v in got["trainer_config"]["fields"].items() if k != "preset" for a in (f"--{k}", v)]
    for targets in ("all-linear", "q,k,v,o"):
        assert main([*flags, *model, "--lora-targets", targets]) == 0
        want = json.loads(capsys.readouterr().out)
        same = (got["trainable_params"], got["peak"]) == (want["trainable_params"], want["peak"])
        assert same == (targets == "all-linear"), targets


def test_llamafactory_freeze_trains_the_last_blocks_alone(capsys, tmp_path):
    """LLaMA-Factory's finetuning_type freeze (model/adapter.py, _setup_freeze_tuning) trains the last
    freeze_trainable_layers blocks (2 by default) and freezes the rest, the embedding, final norm and head too
    unless freeze_extra_modules names them: --freeze-layers is the model's layers less those, with
    --freeze-head. Its bf16 (trainable blocks cast to fp32 over a bf16 model), the first blocks training
    (a negative count) and part of a block are refused, naming the key."""
    def run(text: str, *flags: str) -> tuple[int, str]:
        path = tmp_path / "freeze.yaml"
        path.write_text("model_name_or_path: meta-llama/Llama-2-7b-hf\nfinetuning_type: freeze\n" + text)
        code = main(["--trainer-config", str(path), "--preset", "llama-7b", "--walk", "eager", *flags, "--json"])
        out = capsys.readouterr()
        return code, out.out if code == 0 else out.err

    code, out = run("pure_bf16: true\ncutoff_len: 256\nper_device_train_batch_size: 1\n")
    assert code == 0, out
    got = json.loads(out)
    fields = got["trainer_config"]["fields"]
    assert (fields["finetune"], fields["freeze-layers"], fields["freeze-head"]) == ("freeze", "30", "true")
    def typed(k: str, v: str) -> list[str]:  # a switch is typed bare
        return {"true": [f"--{k}"], "false": [f"--no-{k}"]}.get(v, [f"--{k}", v])

    flags = [a for k, v in fields.items() if k != "preset" for a in typed(k, v)]
    assert main([*flags, "--preset", "llama-7b", "--walk", "eager", "--json"]) == 0
    want = json.loads(capsys.readouterr().out)
    assert (got["trainable_params"], got["peak"]) == (want["trainable_params"], want["peak"])
    assert got["trainable_params"] == 2 * calc.param_counts(calc.PRESETS["llama-7b"])["per_layer"]
    code, out = run("pure_bf16: true\nfreeze_trainable_layers: 40\nfreeze_extra_modules: [embed_tokens]\n")
    assert code == 0 and json.loads(out)["trainer_config"]["fields"]["freeze-layers"] == "0"  # every block trains
    assert json.loads(out)["trainer_config"]["fields"]["freeze-embedding"] == "false"
    code, out = run("pure_bf16: true\n", "--freeze-layers", "5")  # a flag's frozen layers win, the reading says so
    entry = next(e for e in json.loads(out)["trainer_config"]["read"] if e["key"] == "freeze_trainable_layers")
    assert code == 0 and entry["gives"] == "(--freeze-layers: the flag's 5 instead)"
    assert json.loads(out)["config"]["finetune"]["freeze_layers"] == 5
    path = tmp_path / "freeze.yaml"  # --fit-card chooses its own fine-tuning: the file's frozen layers go with it
    assert main(["--trainer-config", str(path), "--preset", "llama-7b", "--fit-card", "--capacity-gb", "80"]) == 0
    capsys.readouterr()
    for text, key in (("bf16: true\n", "bf16"), ("pure_bf16: true\nfreeze_trainable_layers: -2\n",
                                                   "freeze_trainable_layers"),
                      ("pure_bf16: true\nfreeze_trainable_layers: '2'\n", "freeze_trainable_layers"),
                      ("pure_bf16: true\nfreeze_trainable_layers: 0\n", "freeze_trainable_layers"),
                      ("pure_bf16: true\nfreeze_trainable_modules: mlp\n", "freeze_trainable_modules"),
                      ("pure_bf16: true\nfreeze_extra_modules: lm_head\n", "freeze_extra_modules"),
                      ("pure_bf16: true\nfreeze_extra_modules: norm\n", "freeze_extra_modules")):  # fmt: skip
        code, err = run(text)
        assert code == 2 and err.startswith(f"error: --trainer-config: {key}: "), err


def test_yaml_aliases_that_repeat_without_end_are_refused():
    """A few hundred characters of YAML aliases (a "billion laughs") make a value of millions of items, and a
    recursive alias one without end: refused before any reader turns a value into text, in the CLI and the page."""
    from calc.web import handle

    laughs = "finetuning_type: &l0 [" + ",".join(["x"] * 9) + "]\n" + "".join(
        f"k{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 7))
    for text in (laughs, "base_model: &a [*a]\n", "a: &a {b: *a}\nsequence_len: 1\n"):
        with pytest.raises(trainers.Refused, match="aliases repeat more than 100,000 values"):
            trainers.parse(text)
        answer = json.loads(handle(json.dumps({"trainer": text, "inputs": {}})))
        assert answer["ok"] is False and len(answer["message"]) < 300, answer


@pytest.mark.parametrize("key", accelerate.BESIDE_FILE)
def test_accelerate_refuses_a_plugin_key_beside_the_deepspeed_json_it_names(key):
    acc = f"distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n  {key}: 2\n" \
          "  deepspeed_config_file: ds.json\n"  # fmt: skip
    ds = json.dumps({"zero_optimization": {"stage": 1}})
    with pytest.raises(trainers.Refused) as e:  # accelerate ignores none of them silently: it raises
        trainers.apply({}, [acc, ds])
    assert e.value.key == f"deepspeed_config.{key}" and "deepspeed_config_file" in str(e.value)
    out, _ = trainers.apply({}, [acc.replace(f"  {key}: 2\n", ""), ds])  # the JSON alone: its stage
    assert out["zero"] == "1"
