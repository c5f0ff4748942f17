import { afterEach, describe, expect, it } from "vitest";
import { type FakeForge, ForgeHttpError, forgeClient, startFakeForge } from "./fake-forge.js";

let forge: FakeForge | undefined;

async function start(options?: Parameters<typeof startFakeForge>[0]): Promise<FakeForge> {
  forge = await startFakeForge(options);
  return forge;
}

afterEach(async () => {
  await forge?.close();
  forge = undefined;
});

describe("fake forge", () => {
  it("creates pull requests and records every request in the ledger", async () => {
    const f = await start();
    expect(f.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const pr = await f.createPullRequest({ title: "Fix #42", body: "b", marker: "m-1" });
    expect(pr).toMatchObject({ number: 1, title: "Fix #42", body: "b", marker: "m-1" });
    expect(pr.url).toBe(`${f.url}/pulls/1`);
    expect(Number.isNaN(Date.parse(pr.createdAt))).toBe(false);
    const second = await f.createPullRequest({ title: "No marker", body: "" });
    expect(second.number).toBe(2);
    expect(second).not.toHaveProperty("marker");

    expect(f.pulls().map((p) => p.number)).toEqual([1, 2]);
    expect(f.ledger).toEqual([
      expect.objectContaining({ method: "POST", path: "/pulls", marker: "m-1", status: 201 }),
      expect.objectContaining({ method: "POST", path: "/pulls", status: 201, pull: 2 }),
    ]);
    expect(f.ledger[1]).not.toHaveProperty("marker");
    expect(typeof f.ledger[0]?.at).toBe("number");
    // GET /pulls/:n and GET /pulls over raw HTTP, as another process would see them.
    expect(await (await fetch(pr.url)).json()).toEqual(pr);
    expect(await f.listPullRequests()).toEqual(f.pulls());
  });

  it("finds a pull request by marker, and undefined for an unknown marker", async () => {
    const f = await start();
    await f.createPullRequest({ title: "a", body: "", marker: "key-a" });
    const b = await f.createPullRequest({ title: "b", body: "", marker: "key b&c" });
    expect(await f.findPullRequestByMarker("key b&c")).toEqual(b);
    expect(await f.findPullRequestByMarker("nope")).toBeUndefined();
    expect(f.ledger.at(-1)).toMatchObject({ method: "GET", path: "/pulls", marker: "nope" });
  });

  it("does not deduplicate: a blind retry opens a second pull request", async () => {
    const f = await start();
    const input = { title: "Fix", body: "", marker: "same" };
    const one = await f.createPullRequest(input);
    const two = await f.createPullRequest(input);
    expect([one.number, two.number]).toEqual([1, 2]);
    expect(f.pulls().filter((p) => p.marker === "same")).toHaveLength(2);
    // Only a lookup by marker before creating (what reconcile does) avoids the duplicate.
    const existing = await f.findPullRequestByMarker("same");
    expect(existing?.number).toBe(1);
  });

  it("works through forgeClient(url), as a worker in another process would", async () => {
    const f = await start();
    const client = forgeClient(`${f.url}/`);
    const pr = await client.createPullRequest({ title: "t", body: "", marker: "x" });
    expect(f.pulls()).toEqual([pr]);
    expect(await client.findPullRequestByMarker("x")).toEqual(pr);
  });

  it("injects rate limits with Retry-After, creating nothing", async () => {
    const f = await start();
    f.failNext(1, 429, { retryAfterSeconds: 2 });
    const err = await f
      .createPullRequest({ title: "t", body: "", marker: "m" })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ForgeHttpError);
    expect(err).toMatchObject({ status: 429, retryAfterMs: 2000 });
    expect(f.pulls()).toEqual([]);
    expect(f.ledger[0]).toMatchObject({ method: "POST", status: 429, marker: "m" });
    expect(f.ledger[0]).not.toHaveProperty("pull");
    // The failure is used up: the next POST succeeds.
    expect((await f.createPullRequest({ title: "t", body: "" })).number).toBe(1);
  });

  it("injects n server errors in a row, without Retry-After by default", async () => {
    const f = await start();
    f.failNext(2, 500);
    for (let i = 0; i < 2; i++) {
      await expect(f.createPullRequest({ title: "t", body: "" })).rejects.toMatchObject({
        status: 500,
        retryAfterMs: undefined,
      });
    }
    await f.createPullRequest({ title: "t", body: "" });
    expect(f.ledger.map((e) => e.status)).toEqual([500, 500, 201]);
    expect(() => f.failNext(1, 200)).toThrow(TypeError);
    expect(() => f.failNext(-1, 500)).toThrow(TypeError);
  });

  it("can lose the response of a pull request it did create (afterCreate)", async () => {
    const f = await start();
    f.failNext(1, 502, { afterCreate: true });
    await expect(
      f.createPullRequest({ title: "t", body: "", marker: "lost" }),
    ).rejects.toMatchObject({ status: 502 });
    // The caller saw an error, yet the side effect happened: reconcile by marker finds it.
    expect(f.pulls()).toHaveLength(1);
    expect((await f.findPullRequestByMarker("lost"))?.number).toBe(1);
    expect(f.ledger[0]).toMatchObject({ status: 502, pull: 1 });
  });

  it("runs onCreate after creating and before answering", async () => {
    const order: string[] = [];
    const f = await start({
      onCreate: async (pull) => {
        order.push(`created #${pull.number}`);
        await new Promise((r) => setTimeout(r, 20));
        order.push("hook done");
      },
    });
    await f.createPullRequest({ title: "t", body: "" });
    order.push("answered");
    expect(order).toEqual(["created #1", "hook done", "answered"]);
  });

  it("merges a pull request once: a second merge is refused (405) and changes nothing", async () => {
    const f = await start();
    const pr = await f.createPullRequest({ title: "Fix", body: "", marker: "m" });
    expect(pr.merged).toBe(false);
    expect(await f.getPullRequest(1)).toEqual(pr);
    const merged = await f.mergePullRequest(1);
    expect(merged).toMatchObject({ number: 1, merged: true });
    expect(Number.isNaN(Date.parse(merged.mergedAt ?? ""))).toBe(false);
    await expect(f.mergePullRequest(1)).rejects.toMatchObject({
      name: "ForgeHttpError",
      status: 405,
    });
    expect(f.pulls()).toEqual([merged]);
    // What a merge's reconcile reads: the pull request, merged or not.
    expect((await forgeClient(f.url).getPullRequest(1))?.merged).toBe(true);
    expect(await f.getPullRequest(2)).toBeUndefined();
    await expect(f.mergePullRequest(2)).rejects.toMatchObject({ status: 404 });
    expect(() => f.mergePullRequest(0)).toThrow(/whole number >= 1 \(got 0\)/);
    const merges = f.ledger.filter((e) => e.path.endsWith("/merge"));
    expect(merges.map((e) => [e.method, e.path, e.status, e.pull])).toEqual([
      ["POST", "/pulls/1/merge", 200, 1],
      ["POST", "/pulls/1/merge", 405, undefined],
      ["POST", "/pulls/2/merge", 404, undefined],
    ]);
  });

  it("runs onMerge after merging and before answering", async () => {
    const order: string[] = [];
    const f = await start({
      onMerge: async (pull) => {
        order.push(`merged #${pull.number}: ${pull.merged}`);
        await new Promise((r) => setTimeout(r, 20));
      },
    });
    await f.createPullRequest({ title: "t", body: "" });
    await f.mergePullRequest(1);
    order.push("answered");
    expect(order).toEqual(["merged #1: true", "answered"]);
  });

  it("rejects invalid requests and unknown routes", async () => {
    const f = await start();
    const post = (body: string) =>
      fetch(`${f.url}/pulls`, { method: "POST", body, headers: { "content-type": "x" } });
    expect((await post("{not json")).status).toBe(400);
    expect((await post(JSON.stringify({ body: "" }))).status).toBe(400);
    expect((await post(JSON.stringify({ title: "t", body: "", marker: 7 }))).status).toBe(400);
    expect((await fetch(`${f.url}/pulls/9`)).status).toBe(404);
    expect((await fetch(`${f.url}/elsewhere`)).status).toBe(404);
    expect((await fetch(`${f.url}/pulls`, { method: "DELETE" })).status).toBe(405);
    expect((await fetch(`${f.url}/pulls/1/merge`)).status).toBe(405);
    expect(f.pulls()).toEqual([]);
    expect(f.ledger.map((e) => e.status)).toEqual([400, 400, 400, 404, 404, 405, 405]);
  });

  it("honours an abort signal", async () => {
    const f = await start();
    const ac = new AbortController();
    ac.abort();
    await expect(
      f.createPullRequest({ title: "t", body: "" }, { signal: ac.signal }),
    ).rejects.toMatchObject({ name: "AbortError" });
  });

  it("closes, dropping kept-alive connections; close twice is fine", async () => {
    const f = await start();
    await f.createPullRequest({ title: "t", body: "" });
    const t0 = Date.now();
    await f.close();
    await f.close();
    expect(Date.now() - t0).toBeLessThan(2_000);
    await expect(f.listPullRequests()).rejects.toThrow();
  });
});
