// In-memory stand-ins for the agent's tool service and forge, reporting each real side
// effect to a cairn/testing side-effect counter: a tool call by its idempotency key (the
// service applies a key once), a pull request without one (the forge has no keys).

import type { SideEffectCounter } from "cairn/testing";
import type { AgentServices } from "./agent.js";

export interface FakeServices extends AgentServices {
  /** Clears everything (a fresh world for each execution of a crash sweep). */
  reset(): void;
  /** Tool calls that reached the service, including repeats of one key. */
  toolCalls: number;
}

export function fakeServices(effects: SideEffectCounter): FakeServices {
  const answers = new Map<string, string>();
  const pulls = new Map<string, { number: number }>();
  const services: FakeServices = {
    toolCalls: 0,
    async callTool(tool, input, key) {
      services.toolCalls++;
      effects.record("tool-call", key);
      const known = answers.get(key);
      if (known !== undefined) return known;
      const answer = `${tool}(${input}) ok`;
      answers.set(key, answer);
      return answer;
    },
    async openPullRequest(_title, marker) {
      effects.record("pull-request");
      const pr = { number: pulls.size + 1 };
      pulls.set(marker, pr);
      return pr;
    },
    async findPullRequest(marker) {
      return pulls.get(marker);
    },
    reset() {
      answers.clear();
      pulls.clear();
      services.toolCalls = 0;
    },
  };
  return services;
}
