import { startBurners } from './burners.js';

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

const until = async (condition: () => boolean) => {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 20));
};

describe('startBurners (the busy processes of overhead --loaded)', () => {
  it('runs the processes it names and stops every one of them on stop()', async () => {
    const burners = startBurners(2, 600);
    expect(burners.pids).toHaveLength(2);
    expect(burners.pids.every(alive)).toBe(true);
    burners.stop();
    await until(() => !burners.pids.some(alive));
    expect(burners.pids.some(alive)).toBe(false);
  });

  it('a burner stops by itself once its time is up', async () => {
    const burners = startBurners(1, 0);
    await until(() => !alive(burners.pids[0]));
    expect(alive(burners.pids[0])).toBe(false);
    burners.stop();
  });
});
