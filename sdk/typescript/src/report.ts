// Recording what became of a call an agent or executor ran: sent again
// while toolgate does not answer, for as long as a lease would last, so
// that a leader election does not lose an outcome.

import type { Client } from "./client.js";
import { StorageFullError, ToolgateError, UnavailableError } from "./errors.js";
import type { Entry, State } from "./types.js";

/** How long a report toolgate does not answer is sent again at least. */
export const reportPatienceMs = 30_000;

/** Whether err says that toolgate did not answer, or failed to write: a report may be sent again. */
export function unanswered(err: unknown): boolean {
  return err instanceof UnavailableError || (err instanceof ToolgateError && err.status >= 500 && !(err instanceof StorageFullError)) ||
    (err instanceof Error && err.name === "TimeoutError");
}

/**
 * Sends a report (succeeded, failed, heartbeat, retry) again while
 * toolgate does not answer it, until patienceMs. A refusal ends it, except
 * one whose entry shows that an earlier attempt, whose answer was lost,
 * did what this one asks (landed): then that entry is the answer.
 */
export async function sendReport(
  c: Client,
  endpoint: "succeeded" | "failed" | "heartbeat" | "retry",
  body: Record<string, unknown> & { pendingId: string },
  landed: (e: Entry) => boolean,
  patienceMs = reportPatienceMs,
): Promise<Entry> {
  const giveUp = Date.now() + patienceMs;
  let again = false;
  for (let wait = 50; ; wait = Math.min(2 * wait, 1000)) {
    try {
      return await c.report(endpoint, body, { signal: AbortSignal.timeout(2_000 * (again ? 4 : 1)) });
    } catch (err) {
      if (err instanceof ToolgateError && (err.status < 500 || err instanceof StorageFullError)) {
        if (again && err.entry && landed(err.entry)) {
          return err.entry;
        }
        throw err;
      }
      if (!unanswered(err) || Date.now() + wait > giveUp) {
        throw err;
      }
    }
    again = true;
    await new Promise((r) => setTimeout(r, wait));
  }
}

/** The state an outcome report leaves a call in. */
export function outcomeState(endpoint: "succeeded" | "failed"): State {
  return endpoint === "succeeded" ? "COMPLETED_SUCCESS" : "COMPLETED_FAILURE";
}
