// cairn/testing: the public test harness — a test engine on a temporary store with a
// virtual clock, fault scripts and in-process crashes; a crash sweep over every durable
// boundary of a run (in process, or with real process kills); a fault-injecting store
// decorator; a side-effect counter (and a ledger that counts across processes) and a fake
// pull-request service for counting real side effects. The Store
// contract suite lives at "cairn/testing/store-contract" (it needs vitest).

export type { CallFault } from "./call-faults.js";
export type { Boundary, BoundaryPoint } from "./crash-boundaries.js";
export {
  type BoundaryOutcome,
  type CrashSweepOptions,
  type CrashSweepResult,
  crashSweep,
  type SweepOutcome,
} from "./crash-sweep.js";
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
export type { CallInfo } from "./instrument.js";
export {
  checkReplay,
  type ReplayCheckOptions,
  type ReplayCheckResult,
} from "./replay-check.js";
export { createSideEffectLedger } from "./side-effect-ledger.js";
export { createSideEffectCounter, type SideEffectCounter } from "./side-effects.js";
export {
  type ApprovalScript,
  createTestEngine,
  type EventScript,
  type TestEngine,
  type TestEngineOptions,
} from "./test-engine.js";
export { createVirtualClock, type VirtualClock } from "./virtual-clock.js";
export { type WaitForStatusOptions, waitForStatus } from "./wait-for-status.js";
