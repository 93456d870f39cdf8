// A toolgate credential: a NATS .creds file, whose user JWT names the
// identity toolgate knows its holder by.

import { readFileSync } from "node:fs";
import { credsAuthenticator, type Authenticator } from "@nats-io/transport-node";

import { inboxPrefix } from "./names.js";

/** A credential read from a .creds file: its identity's name, and what connects with it. */
export interface Credential {
  /** The identity's name: the caller of the calls it submits. */
  name: string;
  authenticator: Authenticator;
  /** The only inbox prefix the credential may hear replies on (_INBOX_<name>). */
  inboxPrefix: string;
}

const jwtBlock = /-----BEGIN NATS USER JWT-----\s*([A-Za-z0-9_.=-]+)\s*------END NATS USER JWT------/;

/** Reads a .creds file toolgate issued (toolgate creds add, or serve's data directory). */
export function readCredential(path: string): Credential {
  let data: Buffer;
  try {
    data = readFileSync(path);
  } catch (err) {
    throw new Error(`credentials: ${(err as Error).message}`, { cause: err });
  }
  return credentialFrom(data, path);
}

/** Reads a credential from the contents of a .creds file; where names it in errors. */
export function credentialFrom(data: Uint8Array, where = "the credential"): Credential {
  const text = Buffer.from(data).toString("utf8");
  const m = jwtBlock.exec(text);
  if (!m?.[1]) {
    throw new Error(`credentials ${where}: no NATS user JWT in it (want a .creds file toolgate issued)`);
  }
  const payload = m[1].split(".")[1];
  let name: unknown;
  try {
    name = JSON.parse(Buffer.from(payload ?? "", "base64url").toString("utf8")).name;
  } catch (err) {
    throw new Error(`credentials ${where}: not a user JWT: ${(err as Error).message}`, { cause: err });
  }
  if (typeof name !== "string" || name === "") {
    throw new Error(`credentials ${where}: the user JWT names no identity`);
  }
  return { name, authenticator: credsAuthenticator(new Uint8Array(data)), inboxPrefix: inboxPrefix(name) };
}
