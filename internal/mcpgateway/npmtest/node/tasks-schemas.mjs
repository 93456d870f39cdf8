// Validates messages against the published schemas of MCP's tasks, from
// @modelcontextprotocol/ext-tasks: the 2025-11-25 revision's own tasks
// (its V1 schemas: CreateTaskResultV1Schema, GetTaskResultV1Schema, …) and
// the io.modelcontextprotocol/tasks extension (V2: CreateTaskResultV2Schema,
// GetTaskResultV2Schema, …).
//
// Run as a program, it reads one JSON object a line, {"schema": NAME,
// "value": …}, and writes for each {"schema": NAME, "problems": […]}, where
// no problems is valid.
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import * as v1 from '@modelcontextprotocol/ext-tasks/core/v1';
import * as v2 from '@modelcontextprotocol/ext-tasks/core/v2';

// problems are what is wrong with value by the schema named: none when it
// is valid.
export function problems(name, value) {
  const schema = v1[name] ?? v2[name];
  if (!schema?.safeParse) return [`no schema named ${name}`];
  const r = schema.safeParse(value);
  return r.success ? [] : r.error.issues.map((i) => `${i.path.join('.') || '(top)'}: ${i.message}`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  for await (const line of createInterface({ input: process.stdin })) {
    if (!line.trim()) continue;
    const { schema, value } = JSON.parse(line);
    process.stdout.write(JSON.stringify({ schema, problems: problems(schema, value) }) + '\n');
  }
}
