// Work on the kit's store that a call the provider has answered does not wait for long:
// forwarding its stream's last parts, settling or blocking the shared limiter. It must
// neither fail the call nor hold it until its step times out (the answer lost, the
// provider called and paid again).

import { toMs } from "../lib/duration.js";
import type { DurableModel, ModelRuntime } from "./model-setup.js";

/** How long a call the provider has answered waits for the kit's store (its stream's last
 *  parts, the limiter's settle or block) before it is recorded without it. */
const SIDE_WORK_WAIT_MS = 5_000;

/** When the attempt's step times out (the kit clock's ms), if it has a timeout. */
export function deadlineOf(m: DurableModel): number | undefined {
  const timeout = m.stepOptions.timeout;
  return timeout === undefined ? undefined : m.rt.clock.now() + toMs(timeout);
}

/** Waits for work on the kit's store that must not fail the call, nor hold it: a store that
 *  does not answer (a stalled connection) held the answered call until its step timed out,
 *  and the provider was called, and paid, again; without a timeout, for ever. So it waits
 *  5 s at most, and at most half the time left before the step's timeout (waiting longer,
 *  the timeout would fire first: the answer lost, the call made again). */
export async function sideWork(
  rt: ModelRuntime,
  work: Promise<void>,
  problem: string,
  deadline: number | undefined,
): Promise<void> {
  const done = work.then(
    () => true,
    (err: unknown) => {
      rt.log(problem, err);
      return true;
    },
  );
  const waitMs =
    deadline === undefined
      ? SIDE_WORK_WAIT_MS
      : Math.max(0, Math.min(SIDE_WORK_WAIT_MS, (deadline - rt.clock.now()) / 2));
  const stop = new AbortController();
  const late = rt.clock.sleep(waitMs, stop.signal).then(
    () => false,
    () => true,
  );
  const finished = await Promise.race([done, late]);
  stop.abort();
  if (!finished)
    rt.log(`${problem}: the store did not answer within ${Math.round(waitMs) / 1000} s`);
}
