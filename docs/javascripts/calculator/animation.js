// The step's animation controls: play, pause, previous and next event, the scrubber, and the label that
// describes the event on show. stepOf() is the step on show (calc's answer).
import { sizeText } from "./format.js";

const PLAY_INTERVAL_MS = 80;  // one event per frame of 80 ms: a 300-event step plays in about 24 s

// Where a playing animation goes on in a new step (another preset, a field changed): the same point of the
// step, as a share of its events, so that it plays on to the new step's end (the same step: the same event).
// Pure (tests/js/animation.test.mjs).
export const carriedIndex = (index, before, after) =>
  before === after || before <= 1 ? Math.min(index, after - 1) : Math.round((index * (after - 1)) / (before - 1));

export function createAnimation(root, stepOf, categoryLabels) {
  const anim = {
    play: root.querySelector('[data-anim="play"]'),
    back: root.querySelector('[data-anim="back"]'),
    forward: root.querySelector('[data-anim="forward"]'),
    scrub: root.querySelector('[data-anim="scrub"]'),
    label: root.querySelector('[data-anim="label"]'),
    timer: null, index: 0, length: 0, moveCursor: null,
  };
  function show(i) {
    const step = stepOf();
    const events = step.events;
    anim.index = Math.max(0, Math.min(i, events.length - 1));
    anim.length = events.length;
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
    // A new step: the cursor goes to its peak, or, while the animation plays, it plays on from the same point
    // of the new step (carriedIndex; clamped to its last event, it stopped there: issue 20's last pass, minor 5).
    follow(step, moveCursor) {
      anim.moveCursor = moveCursor;
      show(anim.timer ? carriedIndex(anim.index, anim.length, step.events.length) : step.peak_index);
    },
    setCursor(moveCursor) {
      anim.moveCursor = moveCursor;
      moveCursor(anim.index);
    },
  };
}
