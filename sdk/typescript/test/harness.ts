// What the tests share: the toolgate the Go test started (its NATS, data
// directory with the role credentials, HTTP API and CLI binary), clients
// by role, the toolgate CLI, and waits that say what they last saw.

import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { promisify } from "node:util";

import { Client, type Entry } from "../src/index.js";

function env(name: string): string {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} is not set: these tests run from the Go test (go test ./sdk/typescript/), which starts toolgate`);
  }
  return v;
}

export const natsURL = (): string => env("TOOLGATE_TEST_NATS");
export const httpURL = (): string => env("TOOLGATE_TEST_HTTP");
export const schemaPath = (): string => env("TOOLGATE_TEST_SCHEMA");

/** The .creds file serve issued for a role (agent, executor, approver, viewer, admin). */
export function credsOf(role: string): string {
  return join(env("TOOLGATE_TEST_DATA"), "creds", `${role}.creds`);
}

/**
 * A client connected with a role's credential. A connect that times out
 * (the NATS client gives up after 20 s, which a starved machine can take)
 * is tried again, up to three times.
 */
export async function connectRole(role: string): Promise<Client> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await Client.connect({ servers: natsURL(), creds: credsOf(role) });
    } catch (err) {
      if (attempt === 3 || (err as Error).name !== "TimeoutError") throw err;
    }
  }
}

/** A client connected with a role's credential (connectRole), closed when the test ends. */
export async function connectAs(t: { after(fn: () => Promise<void> | void): void }, role: string): Promise<Client> {
  const c = await connectRole(role);
  t.after(() => c.close());
  return c;
}

/** A conversation id of the test's own. */
export function conversation(name: string): string {
  return `ts-${name}-${randomUUID().slice(0, 8)}`;
}

const run = promisify(execFile);

/** Runs the toolgate CLI with the approver's credential and returns its stdout. */
export async function toolgate(...args: string[]): Promise<string> {
  try {
    const { stdout } = await run(env("TOOLGATE_TEST_BIN"), [...args, "--nats", natsURL(), "--nats-creds", credsOf("approver")], { timeout: 30_000 });
    return stdout;
  } catch (err) {
    const e = err as Error & { stdout?: string; stderr?: string };
    throw new Error(`toolgate ${args.join(" ")}: ${e.message}\nstdout: ${e.stdout}\nstderr: ${e.stderr}`, { cause: err });
  }
}

/** The calls `toolgate pending --json` lists for a conversation. */
export async function pending(conversationId: string): Promise<Entry[]> {
  return JSON.parse(await toolgate("pending", "--conversation", conversationId, "--json")) as Entry[];
}

/** Waits until probe returns a value (not undefined), failing with what it last saw after timeoutMs. */
export async function eventually<T>(what: string, probe: () => Promise<{ value?: T; saw: unknown }>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let saw: unknown;
  for (let wait = 20; ; wait = Math.min(wait * 2, 250)) {
    const r = await probe();
    if (r.value !== undefined) {
      return r.value;
    }
    saw = r.saw;
    if (Date.now() > deadline) {
      throw new Error(`no ${what} after ${timeoutMs} ms; last saw: ${JSON.stringify(saw)}`);
    }
    await new Promise((r) => setTimeout(r, wait));
  }
}

/** Waits until the conversation's call of toolCallId is pending in `toolgate pending`, and returns it. */
export async function pendingInToolgate(conversationId: string, toolCallId?: string): Promise<Entry> {
  return eventually(`a call of ${conversationId} in toolgate pending`, async () => {
    const list = await pending(conversationId);
    const e = list.find((x) => toolCallId === undefined || x.toolCallId === toolCallId);
    return { ...(e ? { value: e } : {}), saw: list };
  });
}
