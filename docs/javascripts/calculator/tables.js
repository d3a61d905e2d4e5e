// The planner's and the fit list's tables: rows with a Load button each, one Tab stop for all of them.
import { formatInt, recomputeText, sizeText } from "./format.js";

const planLabel = (row) => `Load the layout with ${row.devices} ${row.devices === 1 ? "device" : "devices"}: dp ${row.dp}, tp ${row.tp}, ` +
  `pp ${row.pp}, ep ${row.ep}, ZeRO ${row.zero}, ${recomputeText(row.recompute)}, micro-batch ${row.micro_batch}, ` +
  `${row.grad_accum} micro-batches per step`;

// A table whose rows each have a Load button (the planner's and the fit list's): `kind` names their data
// attributes (data-KIND-row, data-KIND-use, data-KIND-none); shown(row) gives the row's data attributes,
// its cells' text and its button's name; `none` is said across the table's columns when there is no row.
export function drawLoadTable(body, kind, rows, shown, none, disabled = false) {
  const trs = rows.map((row) => {
    const { data, cells, label } = shown(row);
    const tr = document.createElement("tr");
    tr.dataset[`${kind}Row`] = "";
    Object.assign(tr.dataset, data);
    for (const value of cells) tr.insertCell().textContent = value;
    const button = document.createElement("button");
    button.type = "button";
    button.className = "md-button";
    button.dataset[`${kind}Use`] = "";
    button.disabled = disabled;
    button.textContent = "Load";
    button.setAttribute("aria-label", label);
    tr.insertCell().appendChild(button);
    return tr;
  });
  if (!trs.length) {
    const tr = document.createElement("tr");
    tr.dataset[`${kind}None`] = "";
    const td = tr.insertCell();
    td.colSpan = body.closest("table").tHead.rows[0].cells.length;
    const said = document.createElement("span");  // wraps within the box, not the table (site.css)
    said.textContent = none;
    td.appendChild(said);
    trs.push(tr);
  }
  body.replaceChildren(...trs);
  rove(body, `[data-${kind}-use]`);
}

export function drawPlan(body, plan, maxDevices, none = `No layout up to ${formatInt(maxDevices)} devices fits.`) {
  drawLoadTable(body, "plan", plan, (row) => ({
    data: {
      devices: row.devices, dp: row.dp, tp: row.tp, pp: row.pp, ep: row.ep, zero: row.zero,
      recompute: row.recompute, microBatch: row.micro_batch, gradAccum: row.grad_accum, ppSchedule: row.pp_schedule,
      sequenceParallel: row.sequence_parallel, flash: row.flash, peak: row.peak, extraCompute: row.extra_compute,
    },
    cells: [row.devices, row.dp, row.tp, row.pp, row.ep, row.zero, row.recompute, row.micro_batch,
      formatInt(row.grad_accum), sizeText(row.peak), row.display.extra_compute],
    label: planLabel(row),
  }), none);
}

// A table's Load buttons are one Tab stop: the arrow keys (and Home, End) move between them.
export function rove(body, selector) {
  [...body.querySelectorAll(selector)].forEach((button, i) => { button.tabIndex = i === 0 ? 0 : -1; });
}
export function roveWithArrows(body, selector) {
  const moves = { ArrowDown: 1, ArrowUp: -1, Home: -Infinity, End: Infinity };
  body.addEventListener("keydown", (event) => {
    if (!Object.hasOwn(moves, event.key) || !event.target.matches(selector)) return;
    const buttons = [...body.querySelectorAll(selector)];
    const at = buttons.indexOf(event.target) + moves[event.key];
    const next = buttons[Number.isFinite(at) ? Math.max(0, Math.min(buttons.length - 1, at)) : (at < 0 ? 0 : buttons.length - 1)];
    event.preventDefault();
    for (const button of buttons) button.tabIndex = button === next ? 0 : -1;
    next.focus();
  });
}

// "What fits on one card": calc's fine-tunings that fit one device, cheapest first (calc.plan.fit_card); `none`
// is said where there is no row.
const fitLabel = (row) => `Load ${row.finetune}${row.rank ? ` rank ${row.rank} on ${row.targets.join(",")}` : ""}, ` +
  `${recomputeText(row.recompute)}, micro-batch ${row.micro_batch}, on one device`;
export function drawFit(body, fit, none, live) {
  drawLoadTable(body, "fit", fit, (row) => ({
    data: {
      finetune: row.finetune, rank: row.rank, targets: row.targets.join(","), recompute: row.recompute,
      microBatch: row.micro_batch, peak: row.peak, trainable: row.trainable_params,
    },
    cells: [row.finetune, row.rank || "", row.targets.join(","), row.recompute, row.micro_batch,
      formatInt(row.trainable_params), sizeText(row.peak), row.display.extra_compute],
    label: fitLabel(row),
  }), none, !live);
}
