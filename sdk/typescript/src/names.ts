// Names on the wire: the request API's subjects, a call's pendingId and
// the subject its revisions are announced on, as package wire and
// machine make them.

import { createHash } from "node:crypto";

/** The request API's micro service: each endpoint is on toolgate.<endpoint>. */
export const serviceName = "toolgate";

/** The subject of a request API endpoint. */
export function apiSubject(endpoint: string): string {
  return `${serviceName}.${endpoint}`;
}

/** Where a conversation's cancel is announced, for executors to stop its running calls. */
export const cancelSubject = "toolgate.control.cancel";

/** The header of a get's reply that holds the entry's revision. */
export const revisionHeader = "Toolgate-Revision";

/** The headers a refusal carries. */
export const errorCodeHeader = "Nats-Service-Error-Code";
export const errorHeader = "Nats-Service-Error";

const plainToken = /^[A-Za-z0-9_-]+$/;
const maxKeyToken = 512;

/**
 * keyToken makes s one token of a key or subject (machine.KeyToken): s
 * itself when plain, else "=" and its unpadded base64url, or "==" and the
 * base64url of its SHA-256 when that would be longer than 512 characters.
 */
export function keyToken(s: string): string {
  if (s.length <= maxKeyToken && plainToken.test(s)) {
    return s;
  }
  const encoded = Buffer.from(s, "utf8").toString("base64url");
  if (encoded.length < maxKeyToken) {
    return "=" + encoded;
  }
  return "==" + createHash("sha256").update(s, "utf8").digest("base64url");
}

/** The pendingId of a call: its conversation's key token, ".", its toolCallId's. */
export function pendingId(conversationId: string, toolCallId: string): string {
  return keyToken(conversationId) + "." + keyToken(toolCallId);
}

function validToken(t: string): boolean {
  if (t.length === 0 || t.length > maxKeyToken) {
    return false;
  }
  if (t.startsWith("=")) {
    const rest = t.slice(1); // unpadded base64url, as machine.ValidPendingID reads it
    return rest !== "" && plainToken.test(rest) && rest.length % 4 !== 1;
  }
  return plainToken.test(t);
}

/** Whether id has the shape pendingId gives: two plain tokens, never a wildcard. */
export function validPendingId(id: string): boolean {
  const dot = id.indexOf(".");
  return dot > 0 && validToken(id.slice(0, dot)) && validToken(id.slice(dot + 1));
}

/** Where every revision of one entry is announced, under its caller's name. */
export function entrySubject(caller: string, id: string): string {
  return `toolgate.entry.${keyToken(caller)}.${id}`;
}

/** The only inbox prefix a toolgate credential may hear replies on. */
export function inboxPrefix(name: string): string {
  return `_INBOX_${name}`;
}
