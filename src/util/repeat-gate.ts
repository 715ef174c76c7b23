/**
 * Quiets a warning that repeats: the first occurrence of a text is let through, the same text
 * again within `windowMs` of the last one let through is counted instead, and the next one let
 * through carries that count. Two pollers fighting over one bot token fail every couple of
 * seconds for as long as both run; one line a minute says as much as thirty.
 */
export class RepeatGate {
  private last: { text: string; at: number } | undefined;
  private held = 0;

  constructor(
    private readonly windowMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** `undefined`: stay quiet. A number: log it, and say how many were held back since the last. */
  pass(text: string): number | undefined {
    const at = this.now();
    if (this.last?.text === text && at - this.last.at < this.windowMs) {
      this.held++;
      return undefined;
    }
    const held = this.last?.text === text ? this.held : 0;
    this.last = { text, at };
    this.held = 0;
    return held;
  }
}
