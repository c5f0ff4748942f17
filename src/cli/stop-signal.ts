// How the long-running commands (`cairn worker`, `cairn ui`) stop: the first SIGINT or
// SIGTERM asks for a graceful stop; a second one exits at once (code 130).

import type { CliContext } from "./command.js";

/** Resolves with the first stop signal. `onSecond` says what exiting at once leaves
 *  behind, e.g. "leases expire on their own". */
export function waitForStopSignal(ctx: CliContext, onSecond?: string): Promise<NodeJS.Signals> {
  // Keeps the process alive however the command schedules its timers.
  const keepAlive = setInterval(() => {}, 1 << 30);
  return new Promise((resolve) => {
    let stopping = false;
    const onSignal = (signal: NodeJS.Signals) => {
      if (stopping) {
        ctx.err(
          `cairn: ${signal} again: exiting without waiting${onSecond ? `; ${onSecond}` : ""}`,
        );
        process.exit(130);
      }
      stopping = true;
      clearInterval(keepAlive);
      resolve(signal);
    };
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
  });
}
