"""calc.fields: every field declared once (issue 17), and what is derived from it: calc.inputs' groups,
calc.cli's refusals per output mode, the page's form (hooks/placeholders.py renders hooks/calculator.html from
the table, which names no field itself)."""

import contextlib
import io
import re
from pathlib import Path

import pytest

from calc import cli, fields, inputs

ROOT = Path(__file__).resolve().parents[2]


def test_each_field_is_named_once_in_the_table():
    """A field's name is written once in calc.fields (its declaration: `Field("name", ...)`), and the page's
    template names none (its controls are the table's)."""
    table = (ROOT / "calc" / "fields.py").read_text()
    template = (ROOT / "hooks" / "calculator.html").read_text()
    assert {n: table.count(f'("{n}"') for n in fields.FIELD if table.count(f'("{n}"') != 1} == {}
    assert [n for n in re.findall(r'name="([a-z-]+)"', template) if n in fields.FIELD] == []
    assert re.findall(r'_field\("', template) == []


def test_the_groups_calc_reads_are_the_tables():
    assert inputs.LORA_FIELDS == ("lora-rank", "lora-alpha", "lora-targets", "adapter-dtype")
    assert inputs.LOOP_FIELDS == ("loop", "adamw-impl", "loss")
    assert set(inputs.DECK_UNREAD) == {"activation", "dropout", "sliding-window", "device", "engine", "tp-plan"}
    assert set(inputs.MOE_FIELDS) == {"experts-per-token", "expert-ffn", "shared-expert-ffn", "shared-expert-gate",
                                      "dense-layers", "capacity-factor"}  # fmt: skip
    assert inputs.PARALLEL_LIMITS == {"dp": 1 << 20, "tp": 1 << 10, "pp": 10_000, "ep": 1 << 16}


def cli_error(args: list[str]) -> str:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        assert cli.main(args) == 2
    return err.getvalue().strip()


@pytest.mark.parametrize("field", [f for f in fields.TABLE if f.chosen or f.outputs != fields.OUTPUTS],
                         ids=lambda f: f.name)  # fmt: skip
def test_an_output_mode_refuses_what_it_chooses_or_does_not_read(field):
    """Each output mode a field's row says chooses it, or does not read it, refuses it (the first such field
    given, in the table's order), with the mode's reason."""
    typed = field.choices[-1] if field.choices else fields.page_value(field) or "1"
    value = ["--no-" + field.name] if field.switch else [f"--{field.name}", typed]
    tuning = ["--finetune", field.finetune[0]] if field.finetune else []
    for mode in fields.OUTPUTS:
        if mode in field.chosen or mode not in field.outputs:
            unread = cli.UNREAD[mode.replace("-", "_")]
            named = next(f for f in unread if f in (field.name, "finetune" if tuning else field.name))
            flags = [] if mode == "step" else [f"--{mode}"]
            said = cli_error(["--preset", "gpt2", "--seq", "512", *flags, *tuning, *value])
            assert said == f"error: --{named}: {unread[named]}", mode


def test_a_lora_field_applies_to_its_fine_tunings_only():
    """Field.finetune: the --finetune modes a field applies to, said in its refusal and on the page."""
    for f in fields.TUNE:
        if f.finetune:
            with pytest.raises(inputs.InputError, match=f"applies to --finetune {' or '.join(f.finetune)}"):
                inputs.parse_inputs({f.name: "2" if f.kind != "choice" else f.choices[-1]})


def test_every_select_has_a_text_for_each_choice():
    """A choice calc gains without the page's text for it fails the build (page_options)."""
    selects = [f for f in fields.TABLE if f.page and f.kind == "choice"]
    assert selects and all(fields.page_options(f) for f in selects)
    page = fields.Page("X", "Model", 1, options=(("a", "A"),))
    bare = fields.Field("x", kind="choice", choices=("a", "b"), page=page)
    with pytest.raises(ValueError, match="not its choices"):
        fields.page_options(bare)


def test_the_pages_form_is_the_tables():
    """hooks/placeholders.form: each field with a page row, in its fieldset and place, the LoRA fields in one
    block shown for lora and qlora, the page's own blocks among them."""
    from hooks import placeholders

    shape = {f.attr: 1 for f in fields.MODEL if f.attr}
    form = placeholders.form(shape)
    assert [legend for legend, _ in form] == list(fields.SECTIONS)

    def names(items):
        for item in items:
            if "shown_for" in item:
                yield from (f"{item['shown_for']}:{n}" for n in names(item["items"]))
            else:
                yield item["field"].name if "field" in item else f"[{item['block']}]"

    tuning = dict(form)["Fine-tuning"]
    assert list(names(tuning)) == ["finetune", "optimizer", "lora qlora:lora-rank", "lora qlora:lora-targets",
                                   "lora qlora:adapter-dtype", "freeze:freeze-layers", "freeze:freeze-embedding",
                                   "freeze:freeze-head", "paged-optimizer",
                                   "[targets-note]"]  # fmt: skip
    shown = {n.split(":")[-1].strip("[]") for _, items in form for n in names(items)}
    assert shown == {f.name for f in fields.TABLE if f.page} | set(fields.PAGE_BLOCKS)


@pytest.mark.parametrize("preset, unread", [
    ("llama-7b", ["expert-ffn", "context"]),  # dense: no experts to size; rotary: no position table
    ("gpt2", ["expert-ffn"]),  # learned positions: its context sizes their table
    ("mixtral-8x7b", ["ffn", "context"]), ("qwen3-30b-a3b", ["ffn", "context"]),  # every layer experts
    ("gpt-oss-20b", ["ffn", "context"]),
    ("deepseek-v3", ["context"]),  # three dense layers, then experts: both widths sized
])
def test_the_page_hides_the_widths_a_model_does_not_read(preset, unread):
    """Issue 19: the form hides what calc.inputs refuses for this model (calc.fields.page_unread): each hidden
    field, given, is refused in its own name."""
    from calc.presets import PRESETS

    assert fields.page_unread(PRESETS[preset]) == unread
    for name in unread:
        with pytest.raises(inputs.InputError) as refused:
            inputs.parse_inputs({"preset": preset, name: "1000"})
        assert refused.value.field == name
