// serveHttp: the app on its own HTTP server, as `cairn ui` runs it. It binds 127.0.0.1
// unless told otherwise, and refuses any other address without a token: whoever can reach
// the port could otherwise read every run's data and act on it.

import type { AddressInfo } from "node:net";
import { createAdaptorServer } from "@hono/node-server";
import {
  checkHttpAppOptions,
  createHttpApp,
  HTTP_APP_OPTIONS,
  type HttpApp,
  type HttpAppOptions,
  problemLog,
} from "./app.js";
import { isLoopback, namesForBind } from "./security.js";

/** The options serveHttp takes: the app's and where to listen. */
const SERVE_HTTP_OPTIONS = [...HTTP_APP_OPTIONS, "port", "host"] as const;
// An option added to ServeHttpOptions but not here fails to compile.
const EVERY_SERVE_OPTION: Exclude<
  keyof ServeHttpOptions,
  (typeof SERVE_HTTP_OPTIONS)[number]
> extends never
  ? true
  : never = true;
void EVERY_SERVE_OPTION;

export interface ServeHttpOptions extends Omit<HttpAppOptions, "boundHosts"> {
  /** Default 4000; 0 picks a free port. */
  port?: number;
  /** Default "127.0.0.1". Anything that is not loopback needs a token or readToken. */
  host?: string;
}

export interface HttpServer {
  /** e.g. "http://127.0.0.1:4000" (the base path appended). */
  readonly url: string;
  readonly port: number;
  readonly host: string;
  readonly app: HttpApp;
  /** Ends the live streams and stops the server (the engine is yours to close). */
  close(): Promise<void>;
}

export async function serveHttp(options: ServeHttpOptions): Promise<HttpServer> {
  checkHttpAppOptions("serveHttp()", options, SERVE_HTTP_OPTIONS);
  const host = options.host ?? "127.0.0.1";
  const port = checkPort(options.port ?? 4000);
  const log = problemLog(options.log);
  if (!isLoopback(host) && options.token === undefined && options.readToken === undefined) {
    throw new Error(
      `Refusing to listen on ${host} without a token: anyone who can reach it could read ` +
        "every run and act on it. Give a token (--token, and --read-token for read-only " +
        "access), or listen on 127.0.0.1.",
    );
  }
  const { port: _port, host: _host, ...appOptions } = options;
  const app = createHttpApp({ ...appOptions, boundHosts: namesForBind(host) });
  const server = createAdaptorServer({ fetch: app.fetch, hostname: host, port });
  await new Promise<void>((resolve, reject) => {
    const onError = (err: NodeJS.ErrnoException) => {
      app.close();
      reject(
        err.code === "EADDRINUSE"
          ? new Error(`Port ${port} on ${host} is in use; choose another with --port`, {
              cause: err,
            })
          : err,
      );
    };
    server.once("error", onError);
    server.listen(port, host, () => {
      server.off("error", onError);
      // A server 'error' after listening (rare: libuv handles running out of descriptors
      // itself) must not end the process unheard.
      server.on("error", (err) => log(`server error: ${String(err)}`));
      resolve();
    });
  });
  const bound = (server.address() as AddressInfo).port;
  const shown = host.includes(":") ? `[${host}]` : host;
  return {
    url: `http://${shown}:${bound}${options.basePath && options.basePath !== "/" ? options.basePath : ""}`,
    port: bound,
    host,
    app,
    close: () =>
      new Promise<void>((resolve) => {
        app.close();
        server.close(() => resolve());
        if ("closeAllConnections" in server) server.closeAllConnections();
      }),
  };
}

/** A TCP port: Node's listen() takes a string that is not a number for a socket file (`port:
 *  "x"` listened on a file named x) and failed obscurely on NaN (an unset env var through
 *  Number()), a negative port or one past 65535. */
function checkPort(port: unknown): number {
  if (typeof port === "number" && Number.isInteger(port) && port >= 0 && port <= 65_535) {
    return port;
  }
  const shown = typeof port === "string" ? JSON.stringify(port) : String(port);
  throw new TypeError(
    `serveHttp(): port must be a whole number from 0 to 65535 (0 picks a free port), got ${shown}${typeof port === "string" ? " (a string: give a number, e.g. Number(text) checked)" : ""}`,
  );
}
