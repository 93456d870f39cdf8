// npm test, once the package is built: its tests run against a real
// toolgate, which the Go test (typescript_test.go) starts before it runs
// them, so npm test runs the Go test.

import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const goTest = ["test", "-count=1", "-v", "-run", "^TestTypeScript_SDKAgainstToolgate$", "."];

console.error(`npm test: the tests run against a real toolgate, which the Go test starts: go ${goTest.join(" ")} (in sdk/typescript)`);
const child = spawn("go", goTest, { cwd: pkg, stdio: "inherit" });
child.on("error", (err: NodeJS.ErrnoException) => {
  console.error(err.code === "ENOENT"
    ? "npm test: go is not on PATH: install Go (the repository's go.mod names its version) and run npm test again."
    : `npm test: go: ${err.message}`);
  process.exit(1);
});
child.on("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
