// One busy loop: `node scripts/burner.mjs <seconds> <parent pid>`. It looks at the clock and at its parent every 2^20
// turns (a few milliseconds) and stops after its time or as soon as the process that started it is gone, so that a
// killed run never leaves it spinning. Started by scripts/with-burners.mjs and by the benches' --loaded modes.
const end = Date.now() + Number(process.argv[2]) * 1000;
const parent = Number(process.argv[3]);
for (let i = 1; ; i++) {
  if ((i & 0xfffff) === 0 && (Date.now() > end || process.ppid !== parent)) process.exit(0);
}
