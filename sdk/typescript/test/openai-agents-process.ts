// One process of the OpenAI Agents restart test: it runs the example's
// agent (or resumes it from a serialized RunState), writes the run's state
// each time it stops for approval, and appends a line to a file each time
// the tool runs. Usage: node openai-agents-process.js <conversation>
// <state file> <runs file> [resume]

import { appendFile, readFile, rename, writeFile } from "node:fs/promises";

import { runAgent } from "../examples/openai-agents-agent.js";
import { connectRole } from "./harness.js";
import { scriptedModel } from "./openai-agents-model.js";

const [conversationId, stateFile, runsFile, resume] = process.argv.slice(2) as [string, string, string, string?];
const client = await connectRole("agent");
const text = await runAgent({
  client, conversationId,
  model: scriptedModel("send_email", { to: "ops@example.com", subject: "restart" }),
  prompt: "Email ops.",
  sendEmail: async (args) => {
    await appendFile(runsFile, JSON.stringify(args) + "\n");
    return `sent to ${args.to}`;
  },
  saveState: async (state) => {
    await writeFile(stateFile + ".tmp", state);
    await rename(stateFile + ".tmp", stateFile);
  },
  ...(resume ? { resumeFrom: await readFile(stateFile, "utf8") } : {}),
});
process.stdout.write(text);
await client.close();
