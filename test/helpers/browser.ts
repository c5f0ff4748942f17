// Headless Chromium for browser tests: Debian's /usr/bin/chromium (nothing is downloaded),
// driven by playwright-core, with a fresh profile per launch. The flags keep Chromium off
// the network beyond the page under test (the test machines have no other network).

import { existsSync } from "node:fs";
import { type BrowserContext, chromium } from "playwright-core";
import { tempDir } from "./sqlite.js";

export const CHROMIUM = process.env.CAIRN_CHROMIUM || "/usr/bin/chromium";

/** Whether the browser exists here; under CI it must (see .ci/run). */
export function hasChromium(): boolean {
  if (existsSync(CHROMIUM)) return true;
  if (process.env.CI === "true") {
    throw new Error(
      `Chromium not found at ${CHROMIUM}; .ci/run installs Debian's chromium package`,
    );
  }
  console.warn(
    `\n!! SKIPPING browser tests: no Chromium at ${CHROMIUM} (apt-get install chromium)\n`,
  );
  return false;
}

export async function launchBrowser(options: { colorScheme?: "light" | "dark" } = {}): Promise<{
  context: BrowserContext;
  close: () => Promise<void>;
}> {
  const profile = tempDir("cairn-chromium-");
  const context = await chromium.launchPersistentContext(profile.dir, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
    viewport: { width: 1360, height: 900 },
    colorScheme: options.colorScheme ?? "light",
  });
  return {
    context,
    close: async () => {
      await context.close().catch(() => {});
      profile.cleanup();
    },
  };
}
