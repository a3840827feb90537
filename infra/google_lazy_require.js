"use strict";
// Runs inside the jsii node kernel (infra/google.py loads it as a tiny helper assembly, before the
// google provider assembly). The provider's lib/index.js is 1,470 lines of
// `exports.<name> = require("./<dir>");`, so loading the assembly evaluates every resource's
// JavaScript (about 2 s). This hook gives that one file lazy getters instead: a namespace is
// required the first time the kernel looks it up, exactly as the eager line would have required
// it. It acts only on the byte-identical index.js of @cdktf/provider-google 16.12.1 (sha256
// below); any other file, version or surprise falls through to node's normal loader.
const crypto = require("crypto");
const fs = require("fs");
const Module = require("module");
const path = require("path");

const PACKAGE = "@cdktf/provider-google";
const VERSION = "16.12.1";
const INDEX_SHA256 = "fb2c605acc72d46290fb7a6b340b6931932804f4993d000480fc34493c090e94";
const EXPORT_LINE = /^exports\.([A-Za-z_$][\w$]*) = require\("(\.\/[a-z0-9-]+)"\);$/;
const INSTALLED = Symbol.for("tpu-rl.lazy-provider-require");

function lazyExports(filename) {
  if (path.basename(filename) !== "index.js" || path.basename(path.dirname(filename)) !== "lib") return null;
  const packageJson = path.join(path.dirname(filename), "..", "package.json");
  if (!fs.existsSync(packageJson)) return null;
  const pkg = JSON.parse(fs.readFileSync(packageJson, "utf8"));
  if (pkg.name !== PACKAGE || pkg.version !== VERSION) return null;
  const source = fs.readFileSync(filename);
  if (crypto.createHash("sha256").update(source).digest("hex") !== INDEX_SHA256) return null;
  const entries = [];
  for (const line of source.toString("utf8").split("\n")) {
    const match = EXPORT_LINE.exec(line);
    if (match) entries.push([match[1], match[2]]);
  }
  return entries.length > 0 ? entries : null;
}

if (!globalThis[INSTALLED]) {
  globalThis[INSTALLED] = { lazyFiles: [] };
  const loadJs = Module._extensions[".js"];
  Module._extensions[".js"] = function (module, filename) {
    let entries = null;
    try {
      entries = lazyExports(filename);
    } catch (error) {
      entries = null; // unreadable or unexpected: let node load the file as usual
    }
    if (entries === null) return loadJs(module, filename);
    Object.defineProperty(module.exports, "__esModule", { value: true });
    for (const [name, request] of entries) {
      Object.defineProperty(module.exports, name, {
        enumerable: true,
        configurable: true,
        get() {
          const value = module.require(request);
          Object.defineProperty(module.exports, name, { value, enumerable: true, writable: true, configurable: true });
          return value;
        },
      });
    }
    globalThis[INSTALLED].lazyFiles.push(filename);
    if (process.env.TPU_RL_PROVIDER_IMPORT_DEBUG) process.stderr.write(`tpu-rl lazy require: ${filename}\n`);
  };
}
