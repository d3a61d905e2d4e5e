// The step's animation controls: play, pause, previous and next event, the scrubber, and the label that
// describes the event on show. stepOf() is the step on show (calc's answer).
import { sizeText } from "./format.js";

const PLAY_INTERVAL_MS = 80;  // one event per frame of 80 ms: a 300-event step plays in about 24 s

export function createAnimation(root, stepOf, categoryLabels) {
  const anim = {
    play: root.querySelector('[data-anim="play"]'),
    back: root.querySelector('[data-anim="back"]'),
    forward: root.querySelector('[data-anim="forward"]'),
    scrub: root.querySelector('[data-anim="scrub"]'),
    label: root.querySelector('[data-anim="label"]'),
    timer: null, index: 0, moveCursor: null,
  };
  function show(i) {
    const step = stepOf();
    const events = step.events;
    anim.index = Math.max(0, Math.min(i, events.length - 1));
    const e = events[anim.index];
    const sign = e.bytes > 0 ? "+" : e.bytes < 0 ? "−" : "±";
    const change = `${sign}${sizeText(Math.abs(e.bytes))} ${categoryLabels[e.category]}`;
    const isPeak = anim.index === step.peak_index;
    const description = `Event ${anim.index + 1} of ${events.length}${isPeak ? " (the peak)" : ""}, ${e.phase}: ` +
      `${e.label}; ${change}; total ${sizeText(e.total)}.`;
    anim.label.textContent = description;
    anim.label.classList.toggle("calc-anim-label--peak", isPeak);
    anim.scrub.max = events.length - 1;
    anim.scrub.value = anim.index;
    anim.scrub.setAttribute("aria-valuetext", description);
    anim.moveCursor?.(anim.index);
  }
  function stop() {
    clearInterval(anim.timer);
    anim.timer = null;
    anim.play.textContent = "Play";
    anim.play.setAttribute("aria-pressed", "false");
    anim.label.setAttribute("aria-live", "polite");
  }
  function play() {
    if (anim.index >= stepOf().events.length - 1) show(0);
    anim.play.textContent = "Pause";
    anim.play.setAttribute("aria-pressed", "true");
    anim.label.setAttribute("aria-live", "off");  // do not read every frame aloud
    anim.timer = setInterval(() => {
      if (anim.index >= stepOf().events.length - 1) stop();
      else show(anim.index + 1);
    }, PLAY_INTERVAL_MS);
  }
  anim.play.addEventListener("click", () => (anim.timer ? stop() : play()));
  anim.back.addEventListener("click", () => { stop(); show(anim.index - 1); });
  anim.forward.addEventListener("click", () => { stop(); show(anim.index + 1); });
  anim.scrub.addEventListener("input", () => { stop(); show(Number(anim.scrub.value)); });
  root.querySelector("[data-anim-controls]").hidden = false;
  return {
    show,
    // A new step: the cursor goes to its peak unless the animation is playing.
    follow(step, moveCursor) {
      anim.moveCursor = moveCursor;
      if (!anim.timer) anim.index = step.peak_index;
      show(Math.min(anim.index, step.events.length - 1));
    },
    setCursor(moveCursor) {
      anim.moveCursor = moveCursor;
      moveCursor(anim.index);
    },
  };
}
