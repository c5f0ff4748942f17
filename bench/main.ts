// `npm run bench`: runs each store's section and prints its table. Every figure sits beside
// a raw floor measured in the same process on the same store, with the ratio cairn/raw.
// A Postgres section goes into `sections` beside SQLite (see lib.ts for Section).

import { cpus, loadavg, platform, release } from "node:os";
import { aiSection } from "./ai.js";
import { fromSource } from "./cairn.js";
import { fmt, formatTable, now, type Section } from "./lib.js";
import { postgresSection } from "./postgres.js";
import { sqliteSection } from "./sqlite.js";
import { workspaceSection } from "./workspace.js";

// The Postgres section prints a note and skips itself when the server is unreachable.
const all: Record<string, () => Section> = {
  sqlite: sqliteSection,
  postgres: postgresSection,
  ai: aiSection,
  workspace: workspaceSection,
};
// `npm run bench -- workspace` runs the named sections only.
const chosen = process.argv.slice(2);
for (const name of chosen) {
  if (!all[name])
    throw new Error(`bench: no section "${name}"; sections: ${Object.keys(all).join(", ")}`);
}
const sections: Section[] = (chosen.length > 0 ? chosen : Object.keys(all)).map((n) => all[n]!());

async function main(): Promise<void> {
  const cpu = cpus();
  console.log(
    `cairn bench: node ${process.version}, ${platform()} ${release()}, ` +
      `${cpu.length} x ${cpu[0]?.model ?? "cpu"}, load average ${loadavg().map(fmt).join(" ")}; ` +
      `measuring ${fromSource ? "the TypeScript sources through tsx (CAIRN_BENCH_SOURCE=1)" : "the compiled package (dist/)"}`,
  );
  const t0 = now();
  for (const section of sections) {
    const s0 = now();
    const report = await section.run();
    console.log(`\n${formatTable(report)}`);
    console.log(`  (${section.title}: ${fmt((now() - s0) / 1000)} s)`);
  }
  console.log(
    `\ntotal ${fmt((now() - t0) / 1000)} s, load average ${loadavg().map(fmt).join(" ")}`,
  );
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
