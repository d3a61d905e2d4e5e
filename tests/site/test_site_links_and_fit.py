"""A link's settings, the fit list and the planner's words on the built site, in Debian's Chromium: a link keeps
every field calc accepts (Gemma 2 runs eager attention, as the CLI does), a mixture of experts' fit list says it
is not computed and why, the planner names the page's tables, a link's config gets the paste's reason, the fit
list's Load buttons wait for a current list, and Capacity reads as the other number fields do."""

from __future__ import annotations

import json
from urllib.parse import quote as url_quote
from urllib.parse import urlparse

import pytest
import test_site_calculator as calculator_tests
from site_fixtures import AWAIT_DRAWN, LIVE_TIMEOUT_MS, answer_for, settled_url
from test_site_second_pass import LLAMA2, PEAK, WATCH, paste, query_of, settle

from conftest import cli_json

base_url, browser, open_page = calculator_tests.base_url, calculator_tests.browser, calculator_tests.open_page
change = calculator_tests.change
FIT_STATUS = "[data-fit] [data-fit-status]"
FIT_LIVE = "() => !document.querySelector('[data-fit-status]').textContent.includes('when this site was built')"
LINK_LINES = "() => [...document.querySelectorAll('[data-link-problem]')].map(li => li.textContent)"


def test_a_gemma_2_link_keeps_every_field_as_the_cli_answers_it(open_page):
    """`?preset=gemma-2-9b&walk=eager&seq=2048&micro-batch=2&recipe=bf16` (M1): nothing dropped, the address
    keeps every field, and the eager peak is the CLI's for the same flags (its attention eager, the family's)."""
    page, recorder = open_page("?preset=gemma-2-9b&walk=eager&seq=2048&micro-batch=2&recipe=bf16")
    settle(page)
    assert page.evaluate(LINK_LINES) == []
    assert (page.input_value('[name="seq"]'), page.input_value('[name="micro-batch"]')) == ("2048", "2")
    assert page.input_value('[name="recipe"]') == "bf16"
    query = query_of(page)
    assert {k: query[k] for k in ("preset", "walk", "seq", "micro-batch", "recipe")} == {
        "preset": ["gemma-2-9b"], "walk": ["eager"], "seq": ["2048"], "micro-batch": ["2"], "recipe": ["bf16"]}
    flags = ["--preset", "gemma-2-9b", "--walk", "eager", "--seq", "2048", "--micro-batch", "2", "--recipe", "bf16"]
    assert page.evaluate(PEAK) == cli_json(flags)["peak"]
    assert recorder.errors == []


def _engine_link(open_page, settings: dict):
    """The page opened at the link of `settings` (an eager step over several processes), read whole, its peak the
    CLI's busiest rank's for the same flags: (page, recorder, the flags, the CLI's --json)."""
    page, recorder = open_page("?" + "&".join(f"{k}={v}" for k, v in settings.items()))
    settle(page)
    assert page.evaluate(LINK_LINES) == []
    flags = [a for k, v in settings.items() for a in ((f"--{k}",) if v == "true" else (f"--{k}", v))]  # a switch
    cli = cli_json(flags)
    assert page.evaluate(PEAK) == cli["peak"] == max(cli["rank_peaks"])
    return page, recorder, flags, cli


def test_an_engine_link_says_whose_rank_the_peak_is_as_the_cli_does(open_page):
    """`?walk=eager&dp=3&zero=3&engine=fsdp2...` (issue 31): the link keeps --engine (a field with no control
    here), the peak is the CLI's busiest rank of FSDP2 with reshard_after_forward=True, and the summary names
    that engine and the ranks' spread as the CLI's summary does."""
    settings = {"preset": "llama-3.2-1b", "walk": "eager", "seq": "512", "recipe": "autocast", "device": "cpu",
                "dp": "3", "zero": "3", "engine": "fsdp2"}  # fmt: skip
    page, recorder, _, cli = _engine_link(open_page, settings)
    assert {k: v[0] for k, v in query_of(page).items() if k in settings} == settings
    summary = page.text_content("[data-calc-summary]")
    said = answer_for(settings)["engine_text"]
    assert said.startswith("the busiest of 3 ranks of FSDP2's fully_shard with reshard_after_forward=True (rank ")
    assert f", as the eager walk allocates it on {said}, the peak is " in summary
    from hooks import deck  # the line beside: that rank's figure and the band of FSDP2's measured ranks (§14)

    eager = answer_for(settings)["eager"]
    band = deck.band_for(deck.eager_bands(), "fsdp2", eager["setting"])
    shown = calculator_tests.eager_shown(page)
    assert shown["peak"] == cli["peak"] and shown["reason"] is None
    assert (shown["low"], shown["high"]) == (band["low"], band["high"]) and shown["href"].endswith("results/#sec-14")
    assert recorder.errors == []


def test_a_pipeline_link_gives_every_stage_as_the_cli_does_and_the_form_keeps_its_schedule(open_page):
    """`?walk=eager&pp=4&pp-schedule=gpipe...` (issue 31): the form shows the schedule chosen, the peak is the CLI's
    busiest stage of torch's pipelining under ScheduleGPipe, the summary names the engine and its stages' spread,
    and the line beside quotes the band of the GPipe steps measured (results §14); choosing 1F1B on the form
    gives the CLI's 1F1B peak, and interleaved 1F1B the CLI's, its ranks named as such, with its own band."""
    settings = {"preset": "qwen3-8b", "walk": "eager", "seq": "512", "recipe": "autocast", "device": "cpu",
                "pp": "4", "grad-accum": "8", "pp-schedule": "gpipe"}  # fmt: skip
    page, recorder, flags, cli = _engine_link(open_page, settings)
    assert page.input_value('select[name="pp-schedule"]') == "gpipe"
    assert len(cli["rank_peaks"]) == 4
    said = answer_for(settings)["engine_text"]
    assert said.startswith("the busiest of 4 stages of torch's pipelining under ScheduleGPipe (stage 3; ")
    assert f", as the eager walk allocates it on {said}, the peak is " in page.text_content("[data-calc-summary]")
    from hooks import deck

    band = deck.band_for(deck.eager_bands(), "pp-gpipe", answer_for(settings)["eager"]["setting"])
    shown = calculator_tests.eager_shown(page)
    assert (shown["low"], shown["high"]) == (band["low"], band["high"]) and shown["href"].endswith("results/#sec-14")
    page.evaluate(WATCH)  # the redraw for 1F1B, however long the eager walk of its stages takes
    page.select_option('select[name="pp-schedule"]', "1f1b")
    assert page.evaluate(AWAIT_DRAWN) == "live"
    settle(page)
    assert page.evaluate(PEAK) == cli_json([*flags[:-2], "--pp-schedule", "1f1b"])["peak"] < cli["peak"]
    page.evaluate(WATCH)  # interleaved 1F1B: 2 stages a rank, and the band of its own measured steps
    page.select_option('select[name="pp-schedule"]', "interleaved-1f1b")
    assert page.evaluate(AWAIT_DRAWN) == "live"
    settle(page)
    assert page.evaluate(PEAK) == cli_json([*flags[:-2], "--pp-schedule", "interleaved-1f1b"])["peak"]
    assert "ScheduleInterleaved1F1B with 2 stages a rank (rank " in page.text_content("[data-calc-summary]")
    looped = {**settings, "pp-schedule": "interleaved-1f1b"}
    band = deck.band_for(deck.eager_bands(), "pp-interleaved-1f1b", answer_for(looped)["eager"]["setting"])
    shown = calculator_tests.eager_shown(page)
    assert (shown["low"], shown["high"]) == (band["low"], band["high"]) and shown["href"].endswith("results/#sec-14")
    assert recorder.errors == []


def test_a_transformers_plan_link_gives_the_clis_rank_and_the_form_keeps_its_plan(open_page):
    """`?walk=eager&tp=2&tp-plan=transformers...` (issue 31): the form shows the plan chosen, the peak is the CLI's
    rank under transformers' own plan (tp_plan="auto"), the summary names the plan, and the line beside quotes the
    band of the `tp-hf` steps measured (results §14); choosing the layers plan on the form gives the CLI's."""
    settings = {"preset": "qwen3-8b", "walk": "eager", "seq": "512", "recipe": "autocast", "device": "cpu",
                "tp": "2", "tp-plan": "transformers"}  # fmt: skip
    page, recorder, flags, cli = _engine_link(open_page, settings)
    assert page.input_value('select[name="tp-plan"]') == "transformers"
    assert len(cli["rank_peaks"]) == 2
    assert "tensor parallelism's transformers plan" in page.text_content("[data-calc-summary]")
    from hooks import deck

    band = deck.band_for(deck.eager_bands(), "tp-hf", answer_for(settings)["eager"]["setting"])
    shown = calculator_tests.eager_shown(page)
    assert (shown["low"], shown["high"]) == (band["low"], band["high"]) and shown["href"].endswith("results/#sec-14")
    page.evaluate(WATCH)
    page.select_option('select[name="tp-plan"]', "layers")
    assert page.evaluate(AWAIT_DRAWN) == "live"
    settle(page)
    assert page.evaluate(PEAK) == cli_json(flags[:-2])["peak"] > cli["peak"]
    assert recorder.errors == []


def test_a_sequence_parallel_link_gives_the_clis_rank_and_the_switch_turns_it_off(open_page):
    """`?walk=eager&tp=2&sequence-parallel=true...` (issue 31): the form's switch is on, the peak is the CLI's rank
    of the layers plan with sequence parallelism, the summary says so, and the line beside quotes the band of the
    `tp-sp` steps measured (results §14); turning the switch off gives the CLI's rank without it."""
    settings = {"preset": "llama-3.2-1b", "walk": "eager", "seq": "512", "recipe": "autocast", "device": "cpu",
                "tp": "2", "sequence-parallel": "true"}  # fmt: skip
    page, recorder, flags, cli = _engine_link(open_page, settings)
    assert page.is_checked('[data-calc-form] [name="sequence-parallel"]') and len(cli["rank_peaks"]) == 2
    assert "layers plan with sequence parallelism" in page.text_content("[data-calc-summary]")
    from hooks import deck

    band = deck.band_for(deck.eager_bands(), "tp-sp", answer_for(settings)["eager"]["setting"])
    shown = calculator_tests.eager_shown(page)
    assert (shown["low"], shown["high"]) == (band["low"], band["high"]) and shown["href"].endswith("results/#sec-14")
    page.evaluate(WATCH)
    page.uncheck('[data-calc-form] [name="sequence-parallel"]')
    assert page.evaluate(AWAIT_DRAWN) == "live"
    settle(page)
    plain = cli_json(flags[:-1])  # the switch is the last flag
    assert page.evaluate(PEAK) == plain["peak"] and "rank_peaks" in plain  # (both peak at the logits here)
    assert "sequence parallelism" not in page.text_content("[data-calc-summary]")
    assert recorder.errors == []


def test_an_fsdp2_over_tensor_parallel_link_gives_the_clis_ranks(open_page):
    """`?walk=eager&dp=2&tp=2&zero=3&engine=fsdp2...` (issue 31): FSDP2 over the layers plan's ranks; the peak is the
    CLI's busiest of its 4 ranks, the summary names both engines, and the line beside quotes the band of the
    `fsdp2-tp` steps measured (results §14)."""
    settings = {"preset": "llama-3.2-1b", "walk": "eager", "seq": "512", "recipe": "autocast", "device": "cpu",
                "dp": "2", "tp": "2", "zero": "3", "engine": "fsdp2"}  # fmt: skip
    page, recorder, _, cli = _engine_link(open_page, settings)
    assert len(cli["rank_peaks"]) == 4
    assert "reshard_after_forward=True over 2 tensor-parallel ranks" in page.text_content("[data-calc-summary]")
    from hooks import deck

    band = deck.band_for(deck.eager_bands(), "fsdp2-tp", answer_for(settings)["eager"]["setting"])
    shown = calculator_tests.eager_shown(page)
    assert (shown["low"], shown["high"]) == (band["low"], band["high"]) and shown["href"].endswith("results/#sec-14")
    assert recorder.errors == []


def test_a_pipeline_beside_fsdp2_link_gives_the_clis_ranks_and_ddp_on_the_form_its_own(open_page):
    """`?walk=eager&pp=2&dp=2&zero=2...` (issue 31): FSDP2 beside a pipeline's stages (ZeRO 2's engine); the peak is
    the CLI's busiest of its 4 ranks, the summary names both, and the line beside quotes the band of the
    `pp-1f1b-fsdp2` steps measured (results §14); ZeRO 3 on the form (FSDP2 resharding after each forward) and ZeRO
    0 (DDP beside the stages) give the CLI's, each with its own engine's words and band."""
    settings = {"preset": "qwen3-8b", "walk": "eager", "seq": "512", "recipe": "autocast", "device": "cpu",
                "pp": "2", "dp": "2", "zero": "2"}  # fmt: skip
    page, recorder, flags, cli = _engine_link(open_page, settings)
    assert len(cli["rank_peaks"]) == 4
    assert "FSDP2 (reshard_after_forward=False) over 2 processes a stage" in page.text_content("[data-calc-summary]")
    from hooks import deck

    band = deck.band_for(deck.eager_bands(), "pp-1f1b-fsdp2", answer_for(settings)["eager"]["setting"])
    shown = calculator_tests.eager_shown(page)
    assert (shown["low"], shown["high"]) == (band["low"], band["high"]) and shown["href"].endswith("results/#sec-14")
    page.evaluate(WATCH)
    page.select_option('select[name="zero"]', "3")
    assert page.evaluate(AWAIT_DRAWN) == "live"
    settle(page)
    zero3 = [*flags[: flags.index("--zero")], "--zero", "3", *flags[flags.index("--zero") + 2 :], "--json"]
    assert page.evaluate(PEAK) == cli_json(zero3)["peak"] and "FSDP2 (reshard_after_forward=True) over 2 processes" \
        " a stage" in page.text_content("[data-calc-summary]")
    band = deck.band_for(deck.eager_bands(), "pp-1f1b-fsdp2-zero3", answer_for({**settings, "zero": "3"})["eager"][
        "setting"])  # fmt: skip
    shown = calculator_tests.eager_shown(page)
    assert band and (shown["low"], shown["high"]) == (band["low"], band["high"])
    page.evaluate(WATCH)
    page.select_option('select[name="zero"]', "0")
    assert page.evaluate(AWAIT_DRAWN) == "live"
    settle(page)
    ddp = [*flags[: flags.index("--zero")], "--json"]  # the form's ZeRO 0, whose engine is DDP
    assert page.evaluate(PEAK) == cli_json(ddp)["peak"] and "DDP over 2 processes a stage" in page.text_content(
        "[data-calc-summary]")
    assert recorder.errors == []


def test_a_mixture_of_experts_fit_list_says_it_is_not_computed_and_why(open_page):
    """Mixtral (M3): the fit list's status and its one cell give the CLI's --fit-card reason, never "0 ... fit";
    Trains LoRA then (minor 1): the planner's reason names the page's table, planner and fit list, no flag."""
    page, recorder = open_page("?preset=mixtral-8x7b")
    page.wait_for_function(FIT_LIVE, timeout=LIVE_TIMEOUT_MS)
    said = page.text_content(FIT_STATUS)
    assert said.startswith("Not computed: the fit list (the deck walk's) does not fine-tune a mixture of experts"), said
    assert "eager" in said and "--" not in said  # the walk that answers, named as the form names it
    assert page.text_content("[data-fit] [data-fit-none]") == said
    page2, _ = open_page("?finetune=lora")
    page2.wait_for_selector("[data-planner][data-plan-state=ready][data-plan-source=live]", timeout=LIVE_TIMEOUT_MS)
    status = page2.text_content("[data-plan-status]")
    assert status == ("No layouts: Trains: the table and the planner train every parameter with AdamW; use "
                      "“What fits on one card”.")
    assert recorder.errors == []


def test_the_fit_list_on_a_links_eager_walk_is_not_computed(open_page):
    """`?walk=eager` (a second reviewer's major): the fit list's rows are deck-walk peaks, so a Load would show
    another peak than its row's: it says why it is empty, naming the walk, as the planner does; no Load button."""
    page, recorder = open_page("?preset=llama-3.1-8b&seq=2048&walk=eager")
    page.wait_for_function(FIT_LIVE, timeout=LIVE_TIMEOUT_MS)
    said = "Not computed: Walk: eager walks one step; “What fits on one card” uses the deck walk."
    assert page.text_content(FIT_STATUS) == said
    assert page.locator("[data-fit] button").count() == 0
    assert recorder.errors == []


NAN_CONFIG = json.dumps({"model_type": "llama", "hidden_size": 4096}).replace("4096", "NaN")


@pytest.mark.parametrize("text", ["[1,2,3]", NAN_CONFIG])
def test_a_links_config_gets_the_reason_its_paste_gets(open_page, text):
    """`?hf-config=[1,2,3]`, or a config with NaN (minor 2): the link's line gives the config box's reason."""
    page, recorder = open_page(f"?hf-config={url_quote(text)}")
    line = page.text_content("[data-link-problem=hf-config]")
    settle(page)
    paste(page, text)
    page.wait_for_function("() => document.querySelector('[data-error-for=\"hf-config\"]').textContent !== ''")
    reason = page.text_content('[data-error-for="hf-config"]').split(": ", 1)[1].split(". The numbers")[0]
    assert reason in line and "cannot be a config.json" not in line, (line, reason)
    assert recorder.errors == []


def test_the_fit_lists_load_buttons_wait_for_a_current_list(open_page):
    """Sequence typed (minor 7): at once every Load of the fit list and the planner is disabled, until the list
    for the new sequence is drawn; its rows then load their own peak."""
    page, recorder = open_page()
    page.wait_for_selector("[data-fit-use]:not([disabled])", timeout=LIVE_TIMEOUT_MS)  # the built rows, live
    page.fill('[data-calc-form] [name="seq"]', "1024")
    enabled = "() => document.querySelectorAll('[data-fit-use]:not([disabled]),[data-plan-use]:not([disabled])').length"
    assert page.evaluate(enabled) == 0
    page.wait_for_selector("[data-fit-caption]:has-text('sequence 1,024')", timeout=LIVE_TIMEOUT_MS)
    page.wait_for_selector("[data-fit-use]:not([disabled])")
    assert recorder.errors == []


def test_capacity_reads_as_the_other_number_fields_and_says_what_empty_means(open_page):
    """Capacity "1,000" is 1,000 GB, as Sequence takes "1,000" (minor 9); emptied, its hint names the 80 GB used."""
    page, recorder = open_page()
    settle(page)
    change(page, "capacity-gb", "1,000")
    assert page.text_content('[data-error-for="capacity-gb"]') == ""
    page.wait_for_selector("[data-fit-caption]:has-text('on one 1,000 GB device')", timeout=LIVE_TIMEOUT_MS)
    change(page, "capacity-gb", "")
    assert page.text_content('[data-hint-for="capacity-gb"]') == "Empty: uses the default, 80 GB."
    assert recorder.errors == []


def test_a_links_settings_with_no_field_here_can_be_cleared_from_the_keyboard(open_page):
    """`?head-size=96&seq=1024` (minor 5): a line names head-size "96" with a button; Enter on it clears the
    setting from the inputs and the address, the line saying so with the focus, and the page answers without
    it; seq stays."""
    page, recorder = open_page("?head-size=96&seq=1024")
    settle(page)
    line = page.locator("[data-link-extras]")
    assert "head-size “96”" in line.text_content() and line.is_visible()
    assert page.evaluate(PEAK) == cli_json(["--head-size", "96", "--seq", "1024"])["peak"]
    page.evaluate(WATCH)
    line.locator("button").focus()
    page.keyboard.press("Enter")
    assert page.evaluate(AWAIT_DRAWN) == "live"
    assert line.text_content().startswith("Cleared the link's head-size “96”")
    assert page.evaluate("() => document.activeElement.dataset.linkExtras") == ""
    settle(page)
    assert "head-size" not in query_of(page) and query_of(page)["seq"] == ["1024"]
    assert page.evaluate(PEAK) == cli_json(["--seq", "1024"])["peak"]
    assert recorder.errors == []


def test_a_number_typed_with_separators_is_linked_as_calc_read_it(open_page):
    """Sequence typed "1,000", then "1_000" (issue 20's last pass, minor 1): the address carries 1000, calc's one
    form, not `1%2C000`; reopened, the link gives the same peak, its field showing 1000."""
    page, recorder = open_page()
    settle(page)
    for typed in ("1,000", "1_000"):
        change(page, "seq", typed)
        settle(page)
        assert query_of(page)["seq"] == ["1000"] and "%2C" not in settled_url(page), settled_url(page)
    peak = page.evaluate(PEAK)
    again, _ = open_page(f"?{urlparse(settled_url(page)).query}")
    settle(again)
    assert again.input_value('[name="seq"]') == "1000" and again.evaluate(PEAK) == peak
    assert peak == cli_json(["--seq", "1000"])["peak"]
    assert recorder.errors == []


def test_the_planners_refusal_names_the_optimizer_field(open_page):
    """Optimizer lion (issue 20's last pass, minor 2): the planner's reason names the field that causes it,
    Optimizer, not Trains."""
    page, recorder = open_page("?optimizer=lion")
    page.wait_for_selector("[data-planner][data-plan-state=ready][data-plan-source=live]", timeout=LIVE_TIMEOUT_MS)
    assert page.text_content("[data-plan-status]") == (
        "No layouts: Optimizer: the table and the planner train every parameter with AdamW, not lion; use "
        "“What fits on one card”.")
    assert recorder.errors == []


DEEP_LLAMA = json.dumps({**json.loads(LLAMA2), "num_hidden_layers": 300})


def test_a_deep_config_on_a_links_eager_walk_says_what_the_page_offers(open_page):
    """`?walk=eager` and a pasted config of 300 layers (issue 20's last pass, minor 3): the refusal names the
    page's Walk field, not a control the page lacks; the deck's accounting chosen there answers for the config."""
    page, recorder = open_page("?walk=eager")
    settle(page)
    paste(page, DEEP_LLAMA)
    error = page.locator('[data-error-for="hf-config"]')
    page.wait_for_function("() => document.querySelector('[data-error-for=\"hf-config\"]').textContent !== ''")
    said = error.text_content()
    assert "choose the deck's accounting under “Walk”" in said and "use the deck walk here" not in said, said
    change(page, "walk", "deck")
    settle(page)
    assert error.text_content() == "" and page.evaluate(PEAK) == answer_for({"hf-config": DEEP_LLAMA})["step"]["peak"]
    assert recorder.errors == []


@pytest.mark.parametrize(
    ("query", "left"),
    [("?preset=gpt2&head-size=32&sliding-window=4096", []),  # a setting with no field here, dropped
     ("?head-size=96&lora-rank=4", ["lora-rank"])],  # a field's line, which still holds
    ids=["dropped", "other-field"],
)
def test_clearing_the_links_other_settings_takes_their_notice_along(open_page, query, left):
    """"Clear the link's other settings" (issue 20's last pass, minor 4): the notice's lines about them go, and
    the notice with them where none is left; a line about a field of the page stays."""
    page, recorder = open_page(query)
    settle(page)
    notice = page.locator("[data-calc-notice]")
    assert notice.is_visible()
    page.evaluate(WATCH)
    page.click("[data-link-extras] button")
    assert page.evaluate(AWAIT_DRAWN) == "live"
    assert page.text_content("[data-link-extras]").startswith("Cleared the link's head-size “")
    assert notice.is_visible() == bool(left)
    lines = "() => [...document.querySelectorAll('[data-link-problem]')].map(li => li.dataset.linkProblem)"
    assert page.evaluate(lines) == left
    assert recorder.errors == []


@pytest.mark.parametrize("query", ["?Seq=4096", "?sequence=8192&utm_source=x"])
def test_a_link_of_mistyped_names_alone_says_what_it_ignored(open_page, query):
    """A link whose only parameters look like fields mistyped (?Seq=, ?sequence=) opens at the defaults and says,
    in its notice, which it ignored and the field each resembles; a tracker's parameter is not named."""
    page, recorder = open_page(query)
    settle(page)
    assert page.locator("[data-calc-notice]").is_visible()
    lines = page.evaluate(LINK_LINES)
    assert len(lines) == 1 and "is not a setting here, and was ignored (did you mean “seq”?)" in lines[0], lines
    assert recorder.errors == []


@pytest.mark.parametrize("query", [
    "",
    "?preset=gpt2&seq=512&tied=false",
    "?seq=1,024&recipe=autocast&finetune=lora&lora-targets=q,v",
    "?walk=eager&dp=2&zero=3&engine=fsdp2&recipe=autocast&device=cpu&preset=llama-3.2-1b&seq=512",
    "?dp=8&zero=1&tp=2&recompute=selective",
    f"?hf-config={url_quote(LLAMA2)}&seq=2048",
    "?capacity-gb=24&global-batch=256&seq=2048",  # the planner's fields: not the step's command
])  # fmt: skip
def test_the_same_in_the_cli_is_a_command_that_gives_the_peak_shown(open_page, tmp_path, query):
    """Issue 33 ("the same in the CLI"): under the summary the page gives the command of the settings shown,
    the address's values as flags; run as a user runs it (the config saved to config.json), the CLI answers the
    peak the page shows."""
    import shlex

    page, recorder = open_page(query)
    settle(page)
    command = page.text_content('[data-out="cli"]')
    words = shlex.split(command)
    assert words[:3] == ["python", "-m", "calc"], command
    (tmp_path / "config.json").write_text(LLAMA2)
    args = [str(tmp_path / "config.json") if w == "config.json" else w for w in words[3:]]
    assert ("--hf-config" in args) == ("hf-config" in query)
    assert cli_json(args)["peak"] == page.evaluate(PEAK), command
    assert recorder.errors == []


def test_copy_link_puts_the_address_on_the_clipboard_or_says_where_it_is(open_page):
    """"Copy link" (issue 33): with the clipboard allowed the address of the settings shown is copied and the
    page says so; refused, the page says where the address is, and nothing breaks."""
    page, recorder = open_page("?seq=2048", permissions=["clipboard-read", "clipboard-write"])
    settle(page)
    page.click("[data-copy-link]")
    page.wait_for_selector("[data-copy-said]:has-text('Link copied.')")
    assert page.evaluate("() => navigator.clipboard.readText()") == page.evaluate("() => location.href")
    assert "seq=2048" in page.evaluate("() => navigator.clipboard.readText()")
    page.evaluate("() => { navigator.clipboard.writeText = () => Promise.reject(new Error('denied')); }")
    page.click("[data-copy-link]")  # the browser refuses the clipboard
    page.wait_for_selector("[data-copy-said]:has-text('the browser refused the clipboard')")
    page.evaluate("() => Object.defineProperty(navigator, 'clipboard', {value: undefined})")
    page.click("[data-copy-link]")  # an insecure origin has none
    page.wait_for_selector("[data-copy-said]:has-text('this page may not use the clipboard')")
    assert recorder.errors == []


def test_the_step_and_the_table_export_as_the_cli_gives_them(open_page, tmp_path):
    """Issue 33's exports: "Step as JSON" saves the CLI's --json object for the command the page shows, and
    "Table as CSV" the recipes' table with calc's integer bytes, the CLI's --table --json rows."""
    import csv
    import shlex
    from pathlib import Path

    page, recorder = open_page("?preset=gpt2&seq=512&finetune=lora")
    settle(page)
    with page.expect_download() as got:
        page.click('[data-export="step"]')
    saved = json.loads(Path(got.value.path()).read_text())
    assert got.value.suggested_filename == "gpt2-seq512-step.json"
    assert saved == cli_json(shlex.split(page.text_content('[data-out="cli"]'))[3:])
    with page.expect_download() as got:
        page.click('[data-export="table"]')
    rows = list(csv.DictReader(Path(got.value.path()).read_text().splitlines()))
    table = cli_json(["--preset", "gpt2", "--seq", "512", "--table"])
    assert [r["recipe"] for r in rows] == [t["id"] for t in table]
    assert [int(r["peak_bytes"]) for r in rows] == [t["peak"] for t in table]
    assert all(int(r[f"{c}_bytes"]) == t["bytes"][c] for r, t in zip(rows, table, strict=True) for c in t["bytes"])
    assert recorder.errors == []
