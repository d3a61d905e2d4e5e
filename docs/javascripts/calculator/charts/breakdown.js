// The stacked bars: one per recipe of calc's table, by category, each with its peak, beside the device.
import { capacityText } from "../format.js";
import { capacityLine, capacityOnScale, charWidth, chartFrame, svg, text, yAxis } from "../svg.js";

export function drawBreakdown(container, answer, selectedId, categories) {
  const rows = answer.table;
  const totals = rows.map((row) => categories.reduce((sum, c) => sum + row.bytes[c], 0));
  const largest = Math.max(...totals, ...rows.map((r) => r.peak));
  const onScale = capacityOnScale(answer.capacity, largest);
  const maxBytes = Math.max(onScale ? answer.capacity : 0, largest) * 1.14;
  const peakText = (row) => row.display.peak.text;  // calc's own string (calc.web's display)
  const frame = chartFrame(container, "Memory by category for each recipe",
    `Stacked bars for ${rows.map((r) => `${r.id}, peak ${peakText(r)}`).join("; ")}; ` +
    `the device holds ${capacityText(answer.capacity)}. The table above lists every value.`, { bottom: 58 });
  frame.root.setAttribute("aria-describedby", "calc-table");
  const y = yAxis(frame, maxBytes, "on one device");
  const slot = frame.plotW / rows.length;
  const barW = slot * 0.56;
  rows.forEach((row, i) => {
    const x = frame.margin.left + slot * i + (slot - barW) / 2;
    const g = svg("g", { class: "calc-bar", "data-recipe": row.id, "data-peak": row.peak }, frame.root);
    let bottom = 0;
    for (const cat of categories) {
      const bytes = row.bytes[cat];
      svg("rect", {
        x, width: barW, y: y(bottom + bytes), height: Math.max(0, y(bottom) - y(bottom + bytes)),
        class: `calc-fill-${cat}`, "data-part": cat, "data-bytes": bytes,
      }, g);
      bottom += bytes;
    }
    svg("line", { x1: x - 4, x2: x + barW + 4, y1: y(row.peak), y2: y(row.peak), class: "calc-peak" }, g);
    // The label sits above both the bar and its peak line, never on them; in a narrow slot, the number alone.
    const label = charWidth(peakText(row)) <= slot - 4 ? peakText(row) : peakText(row).split(" ")[0];
    text(g, x + barW / 2, Math.min(y(row.peak), y(totals[i])) - 6, label, { "text-anchor": "middle", class: "calc-peak-label" });
    const base = frame.margin.top + frame.plotH;
    const [recipe, recompute] = row.id.split("-");
    const cls = row.id === selectedId ? "calc-selected-label" : "";
    text(g, x + barW / 2, base + 16, recipe, { "text-anchor": "middle", class: cls });
    text(g, x + barW / 2, base + 30, recompute, { "text-anchor": "middle", class: cls });
    if (row.id === selectedId) text(g, x + barW / 2, base + 44, "(selected)", { "text-anchor": "middle" });
  });
  capacityLine(frame, y, answer.capacity, onScale);
}
