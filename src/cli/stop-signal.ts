// How commands stop on a signal: the first SIGINT or SIGTERM asks for a graceful stop (the
// long-running commands, `cairn worker` and `cairn ui`, wind down; a waiting command says what
// it leaves behind); a second one exits at once (code 130).

import type { CliContext } from "./command.js";

/** Resolves with the first stop signal, keeping the process alive until then. `onSecond`
 *  says what exiting at once leaves behind, e.g. "leases expire on their own". */
export function waitForStopSignal(ctx: CliContext, onSecond?: string): Promise<NodeJS.Signals> {
  // Keeps the process alive however the command schedules its timers.
  const keepAlive = setInterval(() => {}, 1 << 30);
  const second = `exiting without waiting${onSecond ? `; ${onSecond}` : ""}`;
  return listenForStopSignal(ctx, second).stopped.finally(() => clearInterval(keepAlive));
}

/** For a command that waits (`cairn result --wait`, `cairn start --wait`): `stopped`
 *  resolves with the first SIGINT or SIGTERM, which the command answers by saying what it
 *  leaves behind and exiting 130; a second one exits at once (130), saying `second`.
 *  `dispose` removes the listeners (the signals kill the process again, as node's default). */
export function listenForStopSignal(
  ctx: CliContext,
  second = "exiting at once",
): {
  stopped: Promise<NodeJS.Signals>;
  dispose(): void;
} {
  let onSignal: (signal: NodeJS.Signals) => void = () => {};
  const stopped = new Promise<NodeJS.Signals>((resolve) => {
    let stopping = false;
    onSignal = (signal) => {
      if (stopping) {
        ctx.err(`cairn: ${signal} again: ${second}`);
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
