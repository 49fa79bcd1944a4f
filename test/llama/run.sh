#!/usr/bin/env bash
# Runs the suites against a real llama.cpp server (test/llama/*.llama-spec.ts): `npm run test:llama`.
#
# Which server:
#   LLAMA_SERVER_URL=http://127.0.0.1:8080   a server you already run (nothing is started or stopped; the
#                                            suites that restart a server start their own, so they need
#                                            LLAMA_SERVER_DIR or ../shared as well)
#   LLAMA_SERVER_DIR=/path/to/llama-server   a directory with llama-server-linux-x64.tgz (or llama-dist/)
#   (neither)                                ../shared/tools/llama-server beside the repository
#
# A missing server fails the run loudly, with the reason, except in one case: neither variable is set and
# there is no ../shared at all (a checkout on its own, e.g. a contributor's laptop). Then there is nothing to
# run against: this prints one line saying so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [[ -z "${LLAMA_SERVER_URL:-}" && -z "${LLAMA_SERVER_DIR:-}" && ! -d ../shared ]]; then
  echo "test:llama: not run: no llama-server here (set LLAMA_SERVER_URL or LLAMA_SERVER_DIR, or put the tool in ../shared/tools/llama-server)"
  exit 0
fi

# The caller's arguments come first: --testMatch takes every value after it, a file named after it included.
exec node --experimental-vm-modules node_modules/jest/bin/jest.js --runInBand "$@" \
  --roots '<rootDir>/test' --testMatch '**/*.llama-spec.ts'
