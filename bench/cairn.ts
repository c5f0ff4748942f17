// The build of cairn the bench measures: the compiled package (dist/, what an installed
// cairn runs; `npm run bench` builds it first), unless CAIRN_BENCH_SOURCE=1 asks for the
// TypeScript sources as tsx runs them. tsx's transform keeps function names by wrapping
// each named function it creates in a __name() call, which a step creates several of: the
// sources measure 10-15% more JavaScript a step than the package does.
//
// Types come from the sources either way (dist/ is built from them).

import type * as CairnAi from "../src/ai/index.js";
import type * as Cairn from "../src/index.js";
import type * as CairnPostgres from "../src/postgres.js";

export const fromSource = process.env.CAIRN_BENCH_SOURCE === "1";
const root = fromSource ? "../src" : "../dist";

export const cairn: typeof Cairn = await import(`${root}/index.js`);
export const cairnPostgres: typeof CairnPostgres = await import(`${root}/postgres.js`);
export const cairnAi: typeof CairnAi = await import(`${root}/ai/index.js`);
