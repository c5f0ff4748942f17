// cairn/testing: the public test harness — a virtual clock, fault-injecting store
// decorators, and the contract suite every Store backend passes.

export { type FaultPlan, type FaultyStore, faultyStore, writesStep } from "./faulty-store.js";
export { describeStoreContract } from "./store-contract.js";
export { createVirtualClock, type VirtualClock } from "./virtual-clock.js";
