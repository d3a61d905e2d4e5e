"""Offload to the host (--offload, issue 32): ZeRO-Offload's optimizer and ZeRO-Infinity's weights as DeepSpeed
offloads them, counted by the deck walk on the device and on the host, read from DeepSpeed's JSON and accelerate's
plugin, refused where it cannot be counted, naming the field or the key."""

import json
from dataclasses import replace

import pytest

import calc
from calc import api, trainers
from calc.cli import main
from calc.counts import param_counts
from calc.parallel import Parallel, split
from calc.recipes import RECIPES
from calc.web import host_text
from conftest import ROOT

LLAMA = calc.PRESETS["llama-7b"]
N = param_counts(LLAMA)["total"]


def step(**par):
    return api.step(LLAMA, 4096, 1, par.pop("recipe", "mixed"), "full", par=Parallel(**par))


@pytest.mark.parametrize("zero", [1, 2, 3])
@pytest.mark.parametrize("dp", [1, 8])
def test_the_optimizer_goes_to_the_host_with_its_master_copy_and_fp32_gradients(zero, dp):
    """On the device nothing of Adam or the master copy stays; the host keeps the rank's partition of the fp32
    weights, Adam's two moments and the fp32 gradients (ZeRO-Offload's 16 bytes a parameter of it) and DeepSpeed's
    copy of the partition in the model's dtype (its 16-bit weights under ZeRO 1 and 2, its reduced gradients under
    ZeRO 3): 18."""
    kept, moved = step(dp=dp, zero=zero), step(dp=dp, zero=zero, offload="optimizer")
    assert moved["bytes"]["optimizer"] == moved["bytes"]["master"] == 0 < kept["bytes"]["optimizer"]
    assert moved["bytes"]["weights"] == kept["bytes"]["weights"]
    share = split(N, dp)
    assert moved["host"]["bytes"] == {"master": 4 * share, "optimizer": 8 * share, "gradients": 4 * share,
                                      "buffer": 2 * share}  # fmt: skip
    assert moved["host"]["per_process"] == 18 * share and "host" not in kept
    # ZeRO 1 keeps every gradient on the device until the step; from ZeRO 2 they go to the host as reduced
    assert moved["bytes"]["gradients"] == (RECIPES["mixed"].gradients * N if zero == 1 else 0)
    assert moved["peak"] <= kept["peak"] - (kept["bytes"]["optimizer"] + kept["bytes"]["master"])


def test_the_weights_go_too_under_zero_3_and_are_gathered_module_by_module():
    kept, moved = step(dp=8, zero=3, offload="optimizer"), step(dp=8, zero=3, offload="optimizer+params")
    assert moved["bytes"]["weights"] == 0 < kept["bytes"]["weights"]
    assert moved["host"]["bytes"]["weights"] == 2 * split(N, 8) == kept["bytes"]["weights"]
    assert moved["host"]["per_process"] == kept["host"]["per_process"] + kept["bytes"]["weights"]
    assert moved["host"]["per_process"] == 20 * split(N, 8)
    first = moved["events"][0]
    assert first["category"] == "weights" and first["bytes"] == 0 and "on the host" in first["label"]
    assert any("all-gather its weights" in e["label"] for e in moved["events"])  # gathered to the device
    assert moved["peak"] == kept["peak"] - kept["bytes"]["weights"]


def test_fp32_keeps_deepspeeds_fp32_copy_on_the_host_and_a_node_holds_its_processes():
    moved = step(dp=16, zero=2, offload="optimizer", recipe="fp32")
    assert moved["host"]["per_process"] == 20 * split(N, 16)  # the fp32 partition copied as the master, the
    # pinned buffer of the weights in fp32 too
    assert moved["host"]["processes_per_node"] == api.NODE == 8
    assert moved["host"]["per_node"] == 8 * moved["host"]["per_process"]
    assert step(dp=2, zero=2, offload="optimizer")["host"]["processes_per_node"] == 2
    alone = step(zero=2, offload="optimizer")  # one process: the node's figure is the process's, said once
    assert alone["host"]["per_node"] == alone["host"]["per_process"] and "node" not in host_text(alone)


def test_deepspeeds_estimator_counts_the_state_without_its_16_bit_copy_times_its_buffer_factor():
    """DeepSpeed 0.19's estimators (results §11.5; scripts/training/deepspeed_estimators.py) give, for stage 3 with
    offload on one node (and stage 2 on one GPU), 16 or 18 bytes a parameter times its additional_buffer_factor:
    calc's node of the same processes less DeepSpeed's 16-bit copy of each partition (which its code allocates and
    its estimator leaves out), within the rounding of each rank's share."""
    data = json.loads((ROOT / "docs" / "data" / "deepspeed_estimators.json").read_text())
    # stage 2 counts instead, where it is more, the fp32 checkpoint each GPU of the node loads: 4 bytes each
    rows = [r for r in data["rows"] if r["offload"] != "none" and (r["stage"] == 3 or 4 * r["gpus"] <= 16)]
    assert len(rows) >= 12 and {r["stage"] for r in rows} == {2, 3}
    for r in rows:
        got = api.step(calc.PRESETS[r["model"]], 4096, 1, "mixed", "full",
                       par=Parallel(dp=r["gpus"], zero=r["stage"], offload=r["offload"]))["host"]  # fmt: skip
        assert got["processes_per_node"] == r["gpus"]
        estimated = (got["per_node"] - got["bytes"]["buffer"] * r["gpus"]) * data["additional_buffer_factor"]
        assert abs(estimated - r["deepspeed_host_per_node"]) <= 18 * 1.5 * 8


def test_deepspeeds_own_buffers_as_its_code_allocates_them():
    """DeepSpeed 0.19 allocates beside the fp32 state one copy of the partition in the model's dtype: under ZeRO 1
    and 2 the pinned weights (param_buffer_of_bit16_for_cpu_offload_groups), under ZeRO 3 the reduced gradients
    (grad_partitions_flat_buffer, gradient_accumulation_dtype); under ZeRO 1 and 2 a step of several micro-batches
    sums the gradients on the host in the model's dtype too (accumulated_grads_in_cpu)."""
    one = api.step(LLAMA, 4096, 1, "mixed", "full", par=Parallel(dp=8, zero=2, offload="optimizer"))["host"]
    four = api.step(LLAMA, 4096, 1, "mixed", "full", par=Parallel(dp=8, zero=2, offload="optimizer"),
                    grad_accum=4)["host"]  # fmt: skip
    assert four["bytes"] == {**one["bytes"], "accumulated": 2 * split(N, 8)}
    three = api.step(LLAMA, 4096, 1, "mixed", "full", par=Parallel(dp=8, zero=3, offload="optimizer"),
                     grad_accum=4)["host"]  # fmt: skip
    assert "accumulated" not in three["bytes"] and three["bytes"]["buffer"] == 2 * split(N, 8)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--offload", "optimizer"], "give --zero 1, 2 or 3"),
        (["--zero", "2", "--offload", "optimizer+params"], "ZeRO 3 only"),
        (["--zero", "3", "--dp", "8", "--offload", "optimizer", "--recipe", "bf16"], "--recipe mixed or fp32"),
        (["--zero", "2", "--offload", "optimizer", "--walk", "eager"], "the deck walk counts it"),
        (["--zero", "2", "--offload", "cpu"], "must be one of none, optimizer, optimizer+params"),
        (["--zero", "2", "--offload", "optimizer", "--plan"], "--plan"),
        (["--zero", "2", "--offload", "optimizer", "--table"], "applies to"),
    ],
)
def test_the_cli_refuses_in_one_line_naming_the_field(args, says, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: --") and says in err, err


def test_the_cli_says_the_host_figure_as_the_page_does(capsys):
    assert main(["--zero", "3", "--dp", "8", "--offload", "optimizer+params", "--recompute", "full"]) == 0
    out = capsys.readouterr().out
    want = step(dp=8, zero=3, offload="optimizer+params")
    assert f"  host: {host_text(want)}" in out.splitlines()
    assert "134.8 GB for a node of 8 processes" in host_text(want)  # 20 bytes x 6.74 B parameters
    assert main(["--zero", "3", "--dp", "8", "--offload", "optimizer+params", "--recompute", "full", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["host"] == json.loads(json.dumps(want["host"]))


CONFIGS = ROOT / "tests" / "trainer_configs"


@pytest.mark.parametrize(
    ("name", "offload", "zero"),
    [
        ("axolotl/deepspeed_configs/zero2.json", "optimizer", "2"),
        ("axolotl/deepspeed_configs/zero3_bf16_cpuoffload_all.json", "optimizer+params", "3"),
        ("llamafactory/deepspeed/ds_z3_offload_config.json", "optimizer+params", "3"),
    ],
)
def test_shipped_offloading_deepspeed_jsons_read_as_offload(name, offload, zero, capsys):
    out, r = trainers.apply({}, [(CONFIGS / name).read_text()])
    assert (out["offload"], out["zero"]) == (offload, zero)
    assert {"key": "zero_optimization.offload_optimizer.device", "value": "cpu", "gives": f"--offload {offload}"} \
        in r.read  # fmt: skip
    assert main(["--trainer-config", str(CONFIGS / name), "--dp", "8"]) == 0
    assert "  host: the host's memory keeps" in capsys.readouterr().out


def _ds(**zero):
    return json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": zero})


@pytest.mark.parametrize(
    ("doc", "key", "says"),
    [
        (_ds(stage=3, offload_optimizer={"device": "nvme", "nvme_path": "/x"}),
         "zero_optimization.offload_optimizer.device", "offload to a disk"),
        (_ds(stage=3, offload_param={"device": "cpu"}), "zero_optimization.offload_param.device",
         "without the optimizer"),
        (_ds(stage=2, offload_optimizer={"device": "cpu"}, offload_param={"device": "cpu"}),
         "zero_optimization.offload_param.device", "stage 3, not 2"),
        (_ds(stage=2, offload_optimizer={"device": "cpu", "ratio": 0.3}),
         "zero_optimization.offload_optimizer.ratio", "partial"),
        (_ds(stage=2, offload_optimizer={"device": "gpu"}), "zero_optimization.offload_optimizer.device",
         "cpu, nvme and none, in lower case"),
        (_ds(stage=2, offload_optimizer={"device": "CPU"}), "zero_optimization.offload_optimizer.device",
         "in lower case"),
        (_ds(stage=3, offload_optimizer={"device": "cpu"}, cpu_offload=True), "zero_optimization.cpu_offload",
         "give one"),
        (_ds(stage=2, offload_optimizer={"device": "cpu", "ratio": True}),
         "zero_optimization.offload_optimizer.ratio", "partial"),
    ],
)
def test_what_offload_cannot_count_is_refused_naming_the_key(doc, key, says):
    with pytest.raises(trainers.Refused) as e:
        trainers.apply({}, [doc])
    assert e.value.key == key and says in str(e.value), (e.value.key, str(e.value))


def test_the_old_booleans_and_device_none_read_as_deepspeed_means_them():
    out, _ = trainers.apply({}, [_ds(stage=2, cpu_offload=True)])
    assert out["offload"] == "optimizer"
    out, _ = trainers.apply({}, [_ds(stage=3, cpu_offload=True, cpu_offload_param=True)])  # 0.19's deprecated names
    assert out["offload"] == "optimizer+params"
    with pytest.raises(trainers.Refused) as e:  # not a key DeepSpeed 0.19 reads (its config forbids extra keys)
        trainers.apply({}, [_ds(stage=3, cpu_offload=True, cpu_offload_params=True)])
    assert e.value.key == "zero_optimization.cpu_offload_params"
    out, r = trainers.apply({}, [_ds(stage=2, offload_optimizer={"device": "none", "pin_memory": True})])
    assert "offload" not in out and {"key": "zero_optimization.offload_optimizer.device",
                                     "why": "none: nothing moves"} in r.ignored  # fmt: skip


def test_accelerates_deepspeed_plugin_offloads_as_its_json_would():
    plugin = "distributed_type: DEEPSPEED\nnum_processes: 8\nmixed_precision: bf16\ndeepspeed_config:\n" \
             "  zero_stage: 3\n  offload_optimizer_device: cpu\n  offload_param_device: cpu\n"  # fmt: skip
    out, _ = trainers.apply({}, [plugin])
    assert (out["offload"], out["zero"], out["dp"]) == ("optimizer+params", "3", "8")
    with pytest.raises(trainers.Refused) as e:
        trainers.apply({}, [plugin.replace("zero_stage: 3", "zero_stage: 2")])
    assert e.value.key == "deepspeed_config.offload_param_device"
    named = plugin.replace("  zero_stage: 3\n", "  deepspeed_config_file: ds.json\n")  # the JSON decides: not both
    with pytest.raises(trainers.Refused) as e:
        trainers.apply({}, [named])
    assert e.value.key == "deepspeed_config.offload_optimizer_device" and "set it in that JSON" in str(e.value)


def test_the_deck_walk_without_offload_is_unchanged():
    assert step(dp=8, zero=2) == api.step(LLAMA, 4096, 1, "mixed", "full", par=replace(Parallel(dp=8, zero=2)))
    assert "host" not in step(dp=8, zero=2) and step(dp=8, zero=2)["config"]["parallel"]["offload"] == "none"


def test_the_pages_planner_and_fit_list_refuse_offload_as_the_cli_does(capsys):
    """The page sends the planner's and the fit list's requests with the form's fields: with offload set they say
    why they show no rows, naming the field, as `--plan` and `--fit-card` refuse `--offload`."""
    from calc import web

    got = json.loads(web.handle(json.dumps({"inputs": {"dp": "8", "zero": "2", "offload": "optimizer"}, "plan": True,
                                            "fit": True})))  # fmt: skip
    assert got["ok"] and got["plan"] == got["fit"] == [] and "host_text" in got
    assert got["plan_refused"]["field"] == got["fit_refused"]["field"] == "offload"
    for mode in ("--plan", "--fit-card"):
        assert main(["--offload", "optimizer", mode]) == 2
        assert capsys.readouterr().err.startswith("error: --offload: applies to")
