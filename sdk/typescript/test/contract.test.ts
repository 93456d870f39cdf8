// The package's types against the contract: wire/event.schema.json and
// the OpenAPI document toolgate serves (GET /v1/openapi.json). Each field
// list is held by the compiler to its TypeScript type (src/types.ts), and
// here to both documents: a field added, removed, or made optional or
// required on either side fails.

import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";

import {
  callFields,
  callRequired,
  entryFields,
  entryRequired,
  errorCodes,
  eventFields,
  eventRequired,
  receiptFields,
  receiptRequired,
  states,
  transitionFields,
  transitionRequired,
} from "../src/index.js";
import { httpURL, schemaPath } from "./harness.js";

interface ObjectSchema {
  properties?: Record<string, unknown>;
  required?: string[];
  enum?: string[];
  description?: string;
}

const sorted = (xs: readonly string[] | undefined): string[] => [...(xs ?? [])].sort();

function sameFields(what: string, schema: ObjectSchema | undefined, fields: readonly string[], required: readonly string[] | undefined): void {
  assert.ok(schema?.properties, `${what}: no such object schema`);
  assert.deepEqual(sorted(fields), sorted(Object.keys(schema.properties)), `${what}: the TypeScript type's fields differ from the schema's properties`);
  if (required) {
    assert.deepEqual(sorted(required), sorted(schema.required), `${what}: the TypeScript type's required fields differ from the schema's`);
  }
}

test("Entry, Event, Transition, Receipt and State are wire/event.schema.json's", async () => {
  const schema = JSON.parse(await readFile(schemaPath(), "utf8")) as ObjectSchema & { $defs: Record<string, ObjectSchema> };
  sameFields("event.schema.json (the event)", schema, eventFields, eventRequired);
  sameFields("event.schema.json $defs.entry", schema.$defs.entry, entryFields, entryRequired);
  sameFields("event.schema.json $defs.transition", schema.$defs.transition, transitionFields, transitionRequired);
  sameFields("event.schema.json $defs.receipt", schema.$defs.receipt, receiptFields, receiptRequired);
  assert.deepEqual(sorted(states), sorted(schema.$defs.state?.enum), "event.schema.json $defs.state");
});

test("Entry, Event, Transition, Receipt, Call, State and the error codes are the OpenAPI document's", async () => {
  const res = await fetch(`${httpURL()}/v1/openapi.json`);
  assert.equal(res.status, 200);
  const doc = (await res.json()) as { components: { schemas: Record<string, ObjectSchema> } };
  const s = doc.components.schemas;
  sameFields("OpenAPI Entry", s.Entry, entryFields, entryRequired);
  sameFields("OpenAPI Event", s.Event, eventFields, eventRequired);
  sameFields("OpenAPI Transition", s.Transition, transitionFields, transitionRequired);
  sameFields("OpenAPI Receipt", s.Receipt, receiptFields, receiptRequired);
  sameFields("OpenAPI Call", s.Call, callFields, callRequired);
  assert.deepEqual(sorted(states), sorted(s.State?.enum), "OpenAPI State");
  // The HTTP API has codes of its own (unauthorized, too_large, ...); every
  // code the request API answers with is among them.
  const httpCodes = (s.ErrorDetail?.properties?.code as { description?: string } | undefined)?.description?.split(/,\s*/) ?? [];
  for (const code of errorCodes) {
    assert.ok(httpCodes.includes(code), `error code ${code} is not in the OpenAPI ErrorDetail's codes: ${httpCodes.join(", ")}`);
  }
});
