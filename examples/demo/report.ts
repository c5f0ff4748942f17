// The demo's report: every call of the run with what each worker did with it and what it
// cost (tokens and dollars from the run's journal), then every side effect counted where
// it happened (the ledger file and the forge's own request log). Returns what is wrong:
// each claim the demo makes is checked here, and the demo fails if one does not hold.

import type { Engine, StepView } from "../../src/index.js";
import type { FakeForge } from "../../src/testing/fake-forge.js";
import { type FixIssueOutput, RUN_ID } from "./agent.js";
import { type LedgerLine, readLedger } from "./ledger.js";
import type { Story } from "./main.js";
import { bold, count, cyan, dim, green, pad, padStart, red, say, yellow } from "./output.js";

const usd = (n: number | undefined) => (n ? `$${n.toFixed(4)}` : "");
const near = (a: number, b: number) => Math.abs(a - b) < 1e-9;

export async function report(
  story: Story,
  client: Engine,
  forge: FakeForge,
  ledgerPath: string,
): Promise<string[]> {
  const problems: string[] = [];
  const run = await client.getRun(RUN_ID);
  const steps = await client.getSteps(RUN_ID);
  const approval = (await client.listApprovals(RUN_ID)).find((a) => a.name === "merge");
  const ledger = readLedger(ledgerPath);
  const [w1, w2] = story.workers;
  const done = w2.events.find((e) => e.type === "done");
  const output = done?.type === "done" ? (done.output as FixIssueOutput) : undefined;

  if (run?.status !== "completed" || !output) {
    return [`run "${RUN_ID}" is ${run?.status ?? "missing"} (${run?.reason ?? ""}), not completed`];
  }
  say(
    green(bold(`✔ run ${RUN_ID} completed on worker 2`)) +
      `: pull request #${output.pullRequest.number} ${output.merged ? "merged" : "NOT merged"}` +
      dim(` (approved by ${approval?.answeredBy} via ${approval?.via}: "${approval?.comment}")`),
  );
  say();

  // ---- each call: who executed it, who replayed it, what it cost --------------------
  const recordedBy = new Map<string, number[]>();
  for (const w of story.workers) {
    for (const e of w.events) {
      if (e.type === "recorded") recordedBy.set(e.key, [...(recordedBy.get(e.key) ?? []), w.n]);
    }
  }
  const cell = (step: StepView, n: 1 | 2): string => {
    const by = recordedBy.get(step.key) ?? [];
    if (n === 1 && step.key === story.killedIn) return red("killed");
    if (by.includes(n)) {
      if (step.kind === "approval") return yellow(`${approval?.status} via ${approval?.via}`);
      return green("executed");
    }
    if (n === 2 && by.includes(1)) return cyan("replayed");
    return dim("—");
  };
  const W = Math.max(...steps.map((s) => s.key.length)) + 2;
  say(
    `  ${bold(pad("call", W))}${bold(pad("worker 1", 11))}${bold(pad("worker 2", 19))}${bold(padStart("tokens", 7))}${bold(padStart("usd", 10))}`,
  );
  for (const s of steps) {
    const tokens = s.spend.tokens ? count(s.spend.tokens) : "";
    const line = `  ${pad(s.key, W)}${pad(cell(s, 1), 11)}${pad(cell(s, 2), 19)}${padStart(tokens, 7)}${padStart(usd(s.spend.usd), 10)}`;
    say(line.trimEnd());
  }
  const spent = run.budget.spent;
  say(
    `  ${pad(dim(`the run's spend (budget $${run.budget.limit.usd?.toFixed(2)})`), W + 30)}${padStart(count(spent.tokens ?? 0), 7)}${padStart(usd(spent.usd), 10)}`,
  );
  say();

  // ---- side effects, counted where they happened -----------------------------------
  const effects = ledger.filter((l) => l.kind !== "lookup");
  const of = (kind: LedgerLine["kind"]) => effects.filter((l) => l.kind === kind);
  const byWorker = (lines: LedgerLine[]) =>
    [1, 2]
      .map((n) => [n, lines.filter((l) => l.worker === n).length] as const)
      .filter(([, k]) => k > 0)
      .map(([n, k]) => `${k} by worker ${n}`)
      .join(", ");
  const posts = forge.ledger.filter((r) => r.method === "POST" && r.path === "/pulls");
  const merges = forge.ledger.filter((r) => r.method === "POST" && r.path.endsWith("/merge"));
  say(dim("  side effects, counted where they happened (a ledger file, the forge's request log):"));
  const row = (what: string, n: number, note: string) =>
    say(`    ${pad(what, 14)}${padStart(String(n), 2)}   ${dim(note)}`);
  row("model calls", of("model").length, byWorker(of("model")));
  row("files read", of("read").length, byWorker(of("read")));
  row("files edited", of("edit").length, byWorker(of("edit")));
  row(
    "test runs",
    of("test").length,
    `${byWorker(of("test"))} (worker 1 was killed before its first)`,
  );
  row(
    "git",
    of("git").length,
    of("git")
      .map((l) => `${l.key === "clone" ? "clone" : "commit"} by worker ${l.worker}`)
      .join(", "),
  );
  row("POST /pulls", posts.length, `the forge holds ${forge.pulls().length} pull request`);
  row("merges", merges.length, merges.map((m) => `${m.method} ${m.path} → ${m.status}`).join(", "));
  say();

  // ---- the checks ---------------------------------------------------------------------
  // The kill: after the edit was recorded, before the test run.
  if (!story.recordedAtKill.some((k) => k.startsWith("tool:edit_file:"))) {
    problems.push("no edit was recorded when worker 1 was killed");
  }
  if (story.recordedAtKill.includes(story.killedIn)) {
    problems.push(`${story.killedIn} was recorded before the kill`);
  }
  // The restore: byte for byte, on another directory.
  if (story.restore.entries === 0 || story.restore.differing.length > 0) {
    problems.push(
      `worker 2's repository differs from worker 1's at the kill: ${story.restore.differing.slice(0, 5).join(", ")}`,
    );
  }
  if (story.repos[0] === story.repos[1]) problems.push("both workers used one directory");
  // Executed once: a key recorded by one worker only; a replayed call wrote nothing.
  for (const s of steps) {
    const by = recordedBy.get(s.key) ?? [];
    if (by.length !== 1)
      problems.push(`call "${s.key}" was recorded by workers [${by.join(", ")}]`);
    if (s.status !== "completed") problems.push(`call "${s.key}" is ${s.status}`);
  }
  if (!recordedBy.get(story.killedIn)?.includes(2)) {
    problems.push(`${story.killedIn} was not executed by worker 2`);
  }
  // Side effects: each call's effect once, by the worker that recorded the call.
  const keys = new Set(steps.map((s) => s.key));
  const seen = new Map<string, number>();
  for (const l of effects) {
    seen.set(l.key, (seen.get(l.key) ?? 0) + 1);
    if (!keys.has(l.key)) problems.push(`the ledger names "${l.key}", a call the journal lacks`);
    else if (!recordedBy.get(l.key)?.includes(l.worker)) {
      problems.push(`worker ${l.worker} performed "${l.key}" but did not record it`);
    }
  }
  for (const [key, n] of seen) if (n !== 1) problems.push(`"${key}" happened ${n} times`);
  const modelSteps = steps.filter((s) => s.key.startsWith("model:"));
  if (modelSteps.length !== of("model").length) {
    problems.push(`${modelSteps.length} model calls recorded, ${of("model").length} made`);
  }
  if (posts.length !== 1 || forge.pulls().length !== 1) {
    problems.push(`the forge got ${posts.length} POST /pulls and holds ${forge.pulls().length}`);
  }
  if (merges.length !== 1 || merges[0]?.status !== 200 || !forge.pulls()[0]?.merged) {
    problems.push(`the forge got ${merges.length} merge requests; expected one, that merged`);
  }
  // The approval: answered by the CLI while no worker held the run.
  if (story.waiting.status !== "waiting" || story.waiting.leaseOwner !== null) {
    problems.push(
      `while waiting for approval the run was ${story.waiting.status}, leased by ${story.waiting.leaseOwner}`,
    );
  }
  if (story.cli.code !== 0 || approval?.status !== "approved" || approval.via !== "cli") {
    problems.push(`the approval is ${approval?.status} via ${approval?.via}, not approved via cli`);
  }
  if (!output.merged) problems.push("the pull request was not merged");
  // Spend: what the provider billed is what the journal holds, per call and in all.
  for (const s of modelSteps) {
    const billed = ledger.find((l) => l.key === s.key)?.tokens;
    if (!(s.spend.tokens && s.spend.tokens === billed && (s.spend.usd ?? 0) > 0)) {
      problems.push(
        `call "${s.key}" recorded ${s.spend.tokens} tokens, $${s.spend.usd}; billed ${billed}`,
      );
    }
  }
  const sum = (name: string) => steps.reduce((t, s) => t + (s.spend[name] ?? 0), 0);
  if (sum("tokens") !== spent.tokens || !near(sum("usd"), spent.usd ?? 0)) {
    problems.push(`the calls' spend does not add up to the run's (${spent.tokens} tokens)`);
  }
  if (w1.events.some((e) => e.type === "done")) problems.push("worker 1 finished the run");

  if (problems.length === 0) {
    const secs = ((Date.now() - story.started) / 1000).toFixed(1);
    say(
      green(
        bold(
          `✔ nothing ran twice; the edit came back byte for byte on another machine; the merge waited for \`cairn approve\` (the whole demo took ${secs} s)`,
        ),
      ),
    );
  }
  return problems;
}
