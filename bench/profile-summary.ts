// `tsx bench/profile-summary.ts FILE.cpuprofile STEPS`: the top 10 functions by self time,
// in microseconds per step (STEPS = the steps the profiled workload executed); TOP=N for more.

import { readFileSync } from "node:fs";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const [file, stepsArg] = process.argv.slice(2);
if (!file || !stepsArg) throw new Error("usage: profile-summary.ts FILE.cpuprofile STEPS");
const profile = JSON.parse(readFileSync(file, "utf8")) as Profile;
const steps = Number(stepsArg);
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const self = new Map<string, number>();
let total = 0;
profile.samples.forEach((id, i) => {
  const us = profile.timeDeltas[i] ?? 0;
  total += us;
  const f = byId.get(id)?.callFrame;
  const where = f?.url
    ? `${f.url.replace(/^.*\/(src|bench|node_modules)\//, "$1/")}:${f.lineNumber + 1}`
    : "";
  const name = `${f?.functionName || "(anonymous)"} ${where}`.trim();
  self.set(name, (self.get(name) ?? 0) + us);
});
console.log(`total ${(total / steps).toFixed(1)} us/step over ${steps} steps`);
for (const [name, us] of [...self]
  .sort((a, b) => b[1] - a[1])
  .slice(0, Number(process.env.TOP ?? 10))) {
  console.log(
    `${(us / steps).toFixed(1).padStart(7)} us/step  ${((us / total) * 100).toFixed(1).padStart(5)}%  ${name}`,
  );
}

// The same self time grouped by file: where a step's JavaScript goes, coarsely.
const byFile = new Map<string, number>();
profile.samples.forEach((id, i) => {
  const f = byId.get(id)?.callFrame;
  const file = f?.url
    ? f.url.replace(/^.*\/(src|bench|node_modules)\//, "$1/")
    : (f?.functionName ?? "?");
  byFile.set(file, (byFile.get(file) ?? 0) + (profile.timeDeltas[i] ?? 0));
});
console.log("by file:");
for (const [file, us] of [...byFile].sort((a, b) => b[1] - a[1]).slice(0, 12)) {
  console.log(`${(us / steps).toFixed(1).padStart(7)} us/step  ${file}`);
}
