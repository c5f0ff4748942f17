// `cairn ui`: the web dashboard and the HTTP API for a store, until SIGINT or SIGTERM. It
// never executes runs; with --module it knows the module's workflows, so it can start
// runs of them (a worker that has them executes them).

import { bearerProblem } from "../../http/bearer.js";
import { createEngine, type Engine } from "../../index.js";
import { approvalKeysFromEnv } from "../approval-keys.js";
import { type CliContext, CliError, defineCommand, UsageError } from "../command.js";
import { parseWholeNumber } from "../flag-values.js";
import { importFirst, loadWorkflows } from "../load-workflows.js";
import { waitForStopSignal } from "../stop-signal.js";
import { ensureOpened, openStore, parseStoreSpec } from "../store-spec.js";

const DEFAULT_PORT = 4000;

export const ui = defineCommand({
  name: "ui",
  summary: "serve the web dashboard and HTTP API",
  help: `Usage: cairn ui [--port N] [--host H] [--token T] [--read-token R] [--allow-host NAME]... [--module FILE [--import tsx]...] [--base-path P] [--poll MS]

Serves the dashboard (runs, each run's timeline and steps, workers; live updates) and the
JSON HTTP API it uses (OpenAPI document at /api/openapi.json) until Ctrl+C or SIGTERM.
From the dashboard or the API you can send events, cancel, resume with a new budget and
fork runs; with --module also start them. The UI never executes runs: workers do.

It listens on 127.0.0.1 unless --host says otherwise; any other address needs a token.
Requests then need "Authorization: Bearer <token>" (browsers sign in once with it; "Log
out" ends that session on the server, and a restart signs every browser out).

Approval links ("cairn approval-link") are answered here when $CAIRN_APPROVAL_KEYS holds
the key that signed them ("id=secret[,id2=secret2]"; the first one signs new links).

Options:
  --port <n>          port to listen on (default ${DEFAULT_PORT}; 0 picks a free one)
  --host <h>          address to listen on (default 127.0.0.1; 0.0.0.0 for all)
  --token <t>         full access: read and act (default: $CAIRN_UI_TOKEN)
  --read-token <r>    read-only access (default: $CAIRN_UI_READ_TOKEN)
  --allow-host <name> also answer requests addressed to this host name (e.g. a DNS name
                      in front of it); repeatable. Others are refused (DNS rebinding).
  --module <file>     a module that exports workflows, loaded as "cairn worker" loads it:
                      the dashboard and API can then start runs of them
  --import <module>   import this module first, e.g. a loader (tsx) for a TypeScript
                      --module; repeatable; resolved from the current directory
  --base-path <p>     serve under this path, e.g. /cairn (behind a proxy)
  --poll <ms>         how often live views read the store (default 1000)
  -h, --help          show this help`,
  options: {
    port: { type: "string" },
    host: { type: "string" },
    token: { type: "string" },
    "read-token": { type: "string" },
    "allow-host": { type: "string", multiple: true },
    module: { type: "string" },
    import: { type: "string", multiple: true },
    "base-path": { type: "string" },
    poll: { type: "string" },
  },

  async run({ values }, ctx) {
    const listen = listenSettings(values, ctx);
    const approvalKeys = approvalKeysFromEnv(ctx.env, { required: false });
    const spec = parseStoreSpec(values, ctx);
    if (values.import && !values.module) {
      throw new UsageError("--import loads what a --module needs; give the --module too");
    }
    for (const specifier of values.import ?? []) await importFirst(specifier, ctx.cwd);
    const workflows = values.module ? await loadWorkflows(values.module, ctx.cwd) : [];
    const store = await openStore(spec, { mustExist: true, env: ctx.env });
    const engine = createEngine({ store, workflows, worker: false, approvalKeys });
    await ensureOpened(engine);
    const server = await serve(engine, ctx, {
      ...listen,
      ...(values["allow-host"] ? { allowedHosts: values["allow-host"] } : {}),
      ...(values["base-path"] !== undefined ? { basePath: values["base-path"] } : {}),
    });

    const { token, readToken } = listen;
    ctx.out(`cairn ui: ${server.url}/ (store ${store.description})`);
    ctx.out(
      token !== undefined || readToken !== undefined
        ? `Access needs a token: ${[token && "full (--token)", readToken && "read-only (--read-token)"].filter(Boolean).join(", ")}.`
        : "No token: anyone who can reach this address may read and act (loopback only).",
    );
    ctx.out(
      workflows.length > 0
        ? `Can start runs of: ${workflows.map((w) => w.id).join(", ")}`
        : "Starting runs is off (no --module); sending events, cancel, resume and fork work.",
    );
    ctx.out("Stop with Ctrl+C or SIGTERM.");

    const signal = await waitForStopSignal(ctx);
    ctx.out(`Received ${signal}: stopping.`);
    await server.close();
    await engine.close();
    return 0;
  },
});

interface ListenSettings {
  port: number;
  host: string;
  pollIntervalMs: number;
  token?: string;
  readToken?: string;
}

/** Where to listen and who may in, from the flags (tokens also from the environment). */
function listenSettings(
  values: {
    port?: string | undefined;
    host?: string | undefined;
    poll?: string | undefined;
    token?: string | undefined;
    "read-token"?: string | undefined;
  },
  ctx: CliContext,
): ListenSettings {
  const port = values.port === undefined ? DEFAULT_PORT : parseWholeNumber(values.port, "port", 0);
  if (port > 65_535) throw new UsageError(`--port must be at most 65535 (got ${port})`);
  const pollIntervalMs =
    values.poll === undefined ? 1_000 : parseWholeNumber(values.poll, "poll", 10);
  const token = values.token ?? (ctx.env.CAIRN_UI_TOKEN || undefined);
  const readToken = values["read-token"] ?? (ctx.env.CAIRN_UI_READ_TOKEN || undefined);
  // A token from the environment says so: "--token holds a space" sent a user who gave no
  // --token looking for one.
  const from = (flag: string, variable: string) =>
    values[flag === "--token" ? "token" : "read-token"] === undefined
      ? ` (it comes from $${variable}: no ${flag} was given)`
      : "";
  for (const [name, t, variable] of [
    ["--token", token, "CAIRN_UI_TOKEN"],
    ["--read-token", readToken, "CAIRN_UI_READ_TOKEN"],
  ] as const) {
    if (t !== undefined && t.length < 8) {
      throw new UsageError(
        `${name} must be at least 8 characters (a long random string)${from(name, variable)}`,
      );
    }
    const problem = t === undefined ? undefined : bearerProblem(t);
    if (problem) throw new UsageError(`${name} ${problem}${from(name, variable)}`);
  }
  if (token !== undefined && token === readToken) {
    throw new UsageError("--token and --read-token must differ");
  }
  return {
    port,
    host: values.host ?? "127.0.0.1",
    pollIntervalMs,
    ...(token !== undefined ? { token } : {}),
    ...(readToken !== undefined ? { readToken } : {}),
  };
}

/** The HTTP server for `engine`; when it cannot start (a port in use, a bind refused
 *  without a token) the engine is closed and the reason is the CLI's error. */
async function serve(
  engine: Engine,
  ctx: CliContext,
  options: ListenSettings & { allowedHosts?: string[]; basePath?: string },
) {
  // Loaded here so that other commands never load the HTTP stack.
  const { serveHttp } = await import("../../http/server.js");
  try {
    return await serveHttp({
      engine,
      ...options,
      log: (message) => ctx.err(`cairn ui: ${message}`),
    });
  } catch (err) {
    await engine.close();
    throw new CliError((err as Error).message, { cause: err });
  }
}
