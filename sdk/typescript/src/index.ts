// @toolgate/client: toolgate's TypeScript SDK. See docs/sdk-typescript.md.

export * from "./types.js";
export * from "./errors.js";
export { keyToken, pendingId, validPendingId, entrySubject, apiSubject, cancelSubject } from "./names.js";
export { readCredential, credentialFrom, type Credential } from "./creds.js";
export {
  Client,
  answer,
  runnable,
  defaultRequestTimeoutMs,
  defaultUnavailableWaitMs,
  type AwaitOptions,
  type ConnectOptions,
  type Outcome,
  type OutcomeKind,
  type RequestOptions,
} from "./client.js";
export { defaultTimeoutMs, submitAndWait, timeoutFor, withdraw, waitMargin, waitWithin, type Verdict, type VerdictKind, type WaitOptions } from "./verdict.js";
export { gate, runClaimed, AlreadyRanError, NotDecidedError, type GateCallOptions, type GateContext, type GateOptions, type GatedTool } from "./gate.js";
export { Executor, permanent, type ExecutorCall, type ExecutorOptions, type ExecutorResult, type Handler } from "./executor.js";
