// cairn/http: the HTTP API and dashboard. serveHttp runs them on their own server (what
// `cairn ui` does); createHttpApp gives the app to mount in yours.

export { createHttpApp, type HttpApp, type HttpAppOptions } from "./app.js";
export type { SecurityOptions } from "./security.js";
export { type HttpServer, type ServeHttpOptions, serveHttp } from "./server.js";
