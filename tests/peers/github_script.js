// A local stand-in for actions/github-script v8.0.0 running one `script:`, for the workflow tests.
//
// The script runs the way the action runs it (actions/github-script@ed597411d8f924073f98dfc5c65a23a2325f34cd
// src/async-function.ts callAsyncFunction: `new AsyncFunction(...Object.keys(args), source)` with the
// arguments src/main.ts passes, in that order), in the current directory, with a fake octokit that
// answers listComments from a JSON file and records createComment/updateComment. An error thrown by the
// script fails the step (src/main.ts handleError -> core.setFailed): here, exit 1 with its message.
//
// usage: node github_script.js SCRIPT_FILE STATE_FILE   (STATE_FILE: {"comments": [...], "pr": 7, ...})
// prints {"calls": [[method, params], ...]} on success.
'use strict';
const fs = require('fs');

const [scriptFile, stateFile] = process.argv.slice(2);
const source = fs.readFileSync(scriptFile, 'utf8');
const state = JSON.parse(fs.readFileSync(stateFile, 'utf8'));
const calls = [];

const listComments = async (params) => ({ data: state.comments });
const github = {
  paginate: async (method, params) => {
    calls.push(['listComments', params]);
    return (await method(params)).data;
  },
  rest: {
    issues: {
      listComments,
      createComment: async (params) => { calls.push(['createComment', params]); return { data: {} }; },
      updateComment: async (params) => { calls.push(['updateComment', params]); return { data: {} }; },
    },
  },
};
const context = {
  repo: { owner: state.owner, repo: state.repo },
  payload: { pull_request: { number: state.pr } },
  serverUrl: 'https://github.com',
  runId: state.run_id,
};
const core = {
  setFailed: (message) => { throw new Error(message); },
  info: () => {},
  warning: () => {},
  debug: () => {},
};
const unavailable = new Proxy({}, { get: (_, name) => { throw new Error(`the stand-in has no ${String(name)}`); } });

const args = {
  require, __original_require__: require, github, octokit: github, context, core,
  exec: unavailable, glob: unavailable, io: unavailable,
};
const AsyncFunction = Object.getPrototypeOf(async () => null).constructor;
new AsyncFunction(...Object.keys(args), source)(...Object.values(args)).then(
  () => { process.stdout.write(JSON.stringify({ calls })); },
  (error) => { process.stderr.write(`Error: ${error.message}\n`); process.exit(1); },
);
