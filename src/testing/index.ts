// cairn/testing: the public test harness — a virtual clock, a fault-injecting store
// decorator, and a fake pull-request service for counting real side effects. The Store
// contract suite lives at "cairn/testing/store-contract" (it needs vitest).

export {
  type FakeForge,
  type FakeForgeOptions,
  type ForgeClient,
  ForgeHttpError,
  type ForgeLedgerEntry,
  forgeClient,
  type NewPullRequest,
  type PullRequest,
  startFakeForge,
} from "./fake-forge.js";
export { type FaultPlan, type FaultyStore, faultyStore, writesStep } from "./faulty-store.js";
export {
  checkReplay,
  type ReplayCheckOptions,
  type ReplayCheckResult,
} from "./replay-check.js";
export { createVirtualClock, type VirtualClock } from "./virtual-clock.js";
