// Finds the workflows a user's module exports. Detection is structural (the shape
// workflow() returns), so a module built against another copy of cairn still works: each
// exported workflow, and the workflows inside exported arrays (e.g. `export const
// workflows = [a, b]`). One value exported under several names counts once.

import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { isAbsolute, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import type { AnyWorkflow } from "../index.js";
import { CliError } from "./command.js";

export function isWorkflow(value: unknown): value is AnyWorkflow {
  if (typeof value !== "object" || value === null) return false;
  const v = value as Record<string, unknown>;
  return (
    typeof v.name === "string" &&
    typeof v.version === "string" &&
    typeof v.fn === "function" &&
    typeof v.options === "object" &&
    v.options !== null &&
    v.id === `${v.name}@${v.version}`
  );
}

export async function loadWorkflows(modulePath: string, cwd: string): Promise<AnyWorkflow[]> {
  const file = resolve(cwd, modulePath);
  if (!existsSync(file)) {
    throw new CliError(`Module "${modulePath}" not found (looked for ${file})`);
  }
  let mod: Record<string, unknown>;
  try {
    mod = await import(pathToFileURL(file).href);
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    const hint =
      code === "ERR_UNKNOWN_FILE_EXTENSION"
        ? '; TypeScript needs a loader: --import tsx (npm install -D tsx), or NODE_OPTIONS="--import tsx", or compile it to .js first'
        : "";
    throw new CliError(
      `Cannot load module "${modulePath}": ${(err as Error)?.message ?? String(err)}${hint}`,
      { cause: err },
    );
  }

  const byId = new Map<string, { wf: AnyWorkflow; exportName: string }>();
  const add = (wf: AnyWorkflow, exportName: string) => {
    const seen = byId.get(wf.id);
    if (seen && seen.wf !== wf) {
      throw new CliError(
        `Module "${modulePath}" exports two different workflows "${wf.id}" (in "${seen.exportName}" and "${exportName}"); each name@version may be registered once`,
      );
    }
    if (!seen) byId.set(wf.id, { wf, exportName });
  };
  for (const [exportName, value] of Object.entries(mod)) {
    if (isWorkflow(value)) add(value, exportName);
    else if (Array.isArray(value)) {
      for (const item of value) if (isWorkflow(item)) add(item, exportName);
    }
  }
  if (byId.size === 0) {
    throw new CliError(
      `Module "${modulePath}" exports no workflows; export the values workflow() returns, or an array of them (e.g. \`export const workflows = [...]\`)`,
    );
  }
  return [...byId.values()].map((e) => e.wf);
}

/** Imports a module the way `node --import` would, but resolved from the user's directory
 *  (where their tsx is installed), falling back to cairn's own dependencies. A path
 *  (./setup.js, /abs/setup.js) is the user's file, from `cwd`: never one beside cairn's. A
 *  module that cannot be found is named with where it was looked for: Node's own message
 *  named cairn's file ("imported from .../load-workflows.js"), as if the user had. */
export async function importFirst(specifier: string, cwd: string): Promise<void> {
  const path = /^\.{0,2}\//.test(specifier) || isAbsolute(specifier);
  let url: string;
  let fromCwd = true;
  if (path) {
    const file = resolve(cwd, specifier);
    if (!existsSync(file)) {
      throw new CliError(
        `--import ${specifier}: no such file ${JSON.stringify(file)} (a path is taken from the current directory, ${JSON.stringify(cwd)}); check the path`,
      );
    }
    url = pathToFileURL(file).href;
  } else {
    try {
      url = pathToFileURL(createRequire(join(cwd, "noop.js")).resolve(specifier)).href;
    } catch {
      url = specifier;
      fromCwd = false;
    }
  }
  try {
    await import(url);
  } catch (err) {
    const missing = (err as { code?: unknown }).code === "ERR_MODULE_NOT_FOUND";
    // Not found from here (this file is the importer) is the specifier itself; not found
    // from elsewhere is a module it imports, which Node's message names rightly.
    if (missing && !fromCwd && String((err as Error)?.message).includes(OWN_FILE)) {
      throw new CliError(
        `--import ${specifier}: cannot find it: no package ${JSON.stringify(specifier)} is installed for the current directory (${JSON.stringify(cwd)}), nor among cairn's own dependencies; install it there (e.g. npm install -D tsx), or give a path (./setup.js)`,
        { cause: err },
      );
    }
    throw new CliError(
      `--import ${specifier}: cannot load it${missing ? " (is it installed? e.g. npm install -D tsx)" : ""}: ${(err as Error)?.message ?? String(err)}`,
      { cause: err },
    );
  }
}

/** This file, as Node names an importer in ERR_MODULE_NOT_FOUND. */
const OWN_FILE = fileURLToPath(import.meta.url);
