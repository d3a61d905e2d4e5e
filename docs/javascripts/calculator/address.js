// When the address is written (issue 21). Each write is a same-document navigation, which costs Chromium's
// browser process some 10 ms of CPU on the 2-core machine, beside the worker's Python and the page's drawing
// (CONTRIBUTING.md, run 15). So what a reader types is written once they pause (DELAY_MS after their last
// change: typing or dragging writes once, not at every step), while a deliberate change (a choice from a list,
// a config, a Load) gets its history entry at once, after any typing not yet written, so that Back returns to
// the typed state. Back or Forward within the pause drops the typing not yet written (link.js: reset), so
// the entry it was typed in keeps the address before it. Pure: the history and the timer are given
// (tests/js/address.test.mjs).
export const DELAY_MS = 250;

// current() -> the address now; replace(url), push(url): write it; later(fn, ms) / cancel(timer): a timer;
// onPending(bool): told when typing starts waiting to be written and when it is written or dropped.
export function addressWriter({ current, replace, push, later = setTimeout, cancel = clearTimeout,
  delay = DELAY_MS, onPending = () => {} }) {
  let pending = null;  // {url, timer}: typing not yet written; url() is asked when written (the hash then)
  function drop() {
    if (!pending) return;
    cancel(pending.timer);
    pending = null;
    onPending(false);
  }
  // The typing not yet written, written now (before a deliberate change, or when the page goes away).
  function flush() {
    const url = pending?.url();
    drop();
    if (url && url !== current()) replace(url);
  }
  // `url`: () -> the address of the form as it stands, or null once the page is another (nothing to write);
  // `deliberate`: a history entry of its own.
  function write(url, deliberate = false) {
    if (deliberate) {
      flush();
      const now = url();
      if (now && now !== current()) push(now);
      return;
    }
    drop();
    const now = url();
    if (!now || now === current()) return;  // typed back to what the address says
    pending = { url, timer: later(flush, delay) };
    onPending(true);
  }
  return { write, flush, drop, pending: () => pending !== null };
}
