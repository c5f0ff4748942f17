// Run statuses as SQL text for both backends, written from store.ts's lists so a status
// test in SQL ("is this run finished?") can never drift from the one TypeScript makes.

import { TERMINAL_STATUSES } from "./store.js";

/** `'completed', 'failed', 'canceled'`, for `status IN (...)`: fixed words, never a value. */
export const TERMINAL_STATUS_LIST = [...TERMINAL_STATUSES].map((s) => `'${s}'`).join(", ");
