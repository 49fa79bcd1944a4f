// Preloaded into a process (`--import`): writes every package its ES modules import by name, the first time, one a
// line, to the file PACKAGE_IMPORTS_FILE, so that a test can tell what a start, and then each request, loaded.
import { register } from 'node:module';

register('./package-imports-hooks.mjs', import.meta.url, { data: { file: process.env.PACKAGE_IMPORTS_FILE } });
