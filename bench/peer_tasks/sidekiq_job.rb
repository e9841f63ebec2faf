# The Sidekiq side of `python -m bench` (bench/systems/sidekiq_.py).
#
# Loaded by the worker (`sidekiq -r <this file> -q bench -c C`); run as a script it
# enqueues (`ruby sidekiq_job.rb enqueue incr|noop N`). Each job does what the Python
# peers' jobs do: IncrJob one INCR of the done counter (through Sidekiq's own connection
# pool, as a Sidekiq job would), NoopJob nothing.
require "json"
require "logger"
require "sidekiq"

# Debian's Sidekiq 6.4 with redis-rb 4.8: its fetch passes BRPOP's timeout positionally,
# which redis-rb deprecates with a two-line warning per fetch (one per job) unless told.
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

REDIS_URL = ENV.fetch("BENCH_SIDEKIQ_URL")
DONE_KEY = ENV.fetch("BENCH_DONE_KEY", "bench:done")
QUEUE = ENV.fetch("BENCH_QUEUE", "bench")
CHUNK = 1000 # jobs per push_bulk call, as the other systems' bulk enqueue

Sidekiq.configure_client { |config| config.redis = { url: REDIS_URL } }
Sidekiq.configure_server do |config|
  config.redis = { url: REDIS_URL }
  config.logger.level = Logger::WARN # Sidekiq logs every job at INFO; the bench's peers run quiet
end

class IncrJob
  include Sidekiq::Worker
  sidekiq_options queue: QUEUE

  def perform
    Sidekiq.redis { |conn| conn.incr(DONE_KEY) }
  end
end

class NoopJob
  include Sidekiq::Worker
  sidekiq_options queue: QUEUE

  def perform; end
end

# The trickle scenario's job (bench/trickle.py, which pushes it itself): when it started.
class StampJob
  include Sidekiq::Worker
  sidekiq_options queue: QUEUE

  def perform(token)
    Sidekiq.redis { |conn| conn.hset(ENV.fetch("BENCH_LATENCY_KEY", "bench:started"), token, Time.now.to_f) }
  end
end

if $PROGRAM_NAME == __FILE__
  command, job, count = ARGV
  abort "usage: ruby sidekiq_job.rb enqueue incr|noop N" unless command == "enqueue" && %w[incr noop].include?(job)
  klass = job == "incr" ? IncrJob : NoopJob
  n = Integer(count)
  Sidekiq.redis(&:ping) # connect before the clock starts, as the Python adapters do
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  (0...n).step(CHUNK) do |done|
    Sidekiq::Client.push_bulk("class" => klass, "args" => Array.new([CHUNK, n - done].min) { [] })
  end
  puts "BENCH_ENQUEUE_SECONDS #{Process.clock_gettime(Process::CLOCK_MONOTONIC) - started}"
end
