// Loaded with `--require` into a process started with `--expose-gc`: SIGUSR2 runs a full GC at once, as the old
// generation filling up under load would, some time later.
process.on('SIGUSR2', () => globalThis.gc());
