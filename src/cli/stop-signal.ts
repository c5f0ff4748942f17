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

/** For a command that waits (`cairn result --wait`, `cairn start --wait`): `stopped`
 *  resolves with the first SIGINT or SIGTERM, which the command answers by saying what it
 *  leaves behind and exiting 130; a second one exits at once (130). `dispose` removes the
 *  listeners (the signals kill the process again, as node's default). */
export function listenForStopSignal(ctx: CliContext): {
  stopped: Promise<NodeJS.Signals>;
  dispose(): void;
} {
  let onSignal: (signal: NodeJS.Signals) => void = () => {};
  const stopped = new Promise<NodeJS.Signals>((resolve) => {
    let stopping = false;
    onSignal = (signal) => {
      if (stopping) {
        ctx.err(`cairn: ${signal} again: exiting at once`);
        process.exit(130);
      }
      stopping = true;
      resolve(signal);
    };
  });
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  return {
    stopped,
    dispose() {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
    },
  };
}
