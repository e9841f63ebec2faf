'use strict';
// The BullMQ side of `python -m bench` (bench/systems/bullmq_.py).
//
//   node bench.js worker CONCURRENCY      one worker process on the queue "bench"
//   node bench.js enqueue incr|noop N     addBulk, 1,000 jobs a call; prints the seconds
//
// The "incr" job does what every system's job does: one INCR of the done counter,
// awaited, on one ioredis connection of the process's own. Everything else is BullMQ's
// defaults (completed jobs kept, the events stream, the stalled-job check).
const { Queue, Worker } = require('bullmq');
const IORedis = require('ioredis');

// ioredis reads the whole URL (user, password, rediss:// TLS, the database).
const URL_ = process.env.BENCH_BULLMQ_URL || 'redis://127.0.0.1:6379/15';
const connection = new IORedis(URL_, { maxRetriesPerRequest: null }); // BullMQ's workers need it
const QUEUE = process.env.BENCH_QUEUE || 'bench';
const DONE_KEY = process.env.BENCH_DONE_KEY || 'bench:done';
const CHUNK = 1000;

async function worker(concurrency) {
  const counter = new IORedis(URL_);
  const w = new Worker(
    QUEUE,
    async (job) => {
      if (job.name === 'incr') await counter.incr(DONE_KEY);
    },
    { connection, concurrency },
  );
  w.on('error', (err) => console.error('worker error:', err));
  w.on('failed', (job, err) => console.error(`job ${job && job.id} failed:`, err));
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    setTimeout(() => process.exit(0), 5000).unref();
    await w.close();
    await counter.quit();
    await connection.quit();
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

async function enqueue(name, n) {
  const queue = new Queue(QUEUE, { connection });
  await queue.waitUntilReady(); // connected before the clock starts
  const started = performance.now();
  for (let done = 0; done < n; done += CHUNK) {
    const k = Math.min(CHUNK, n - done);
    await queue.addBulk(Array.from({ length: k }, () => ({ name, data: {} })));
  }
  const seconds = (performance.now() - started) / 1000;
  await queue.close();
  await connection.quit(); // ours, not the queue's: close() leaves it open
  console.log(`BENCH_ENQUEUE_SECONDS ${seconds}`);
}

const [command, a, b] = process.argv.slice(2);
if (command === 'worker' && Number(a) >= 1) {
  worker(Number(a));
} else if (command === 'enqueue' && ['incr', 'noop'].includes(a) && Number(b) >= 0) {
  enqueue(a, Number(b)).catch((err) => {
    console.error(err);
    process.exit(1);
  });
} else {
  console.error('usage: node bench.js worker CONCURRENCY | enqueue incr|noop N');
  process.exit(2);
}
