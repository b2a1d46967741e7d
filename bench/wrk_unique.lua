-- wrk script for python -m bench: every request unique, a fixed number of requests, every
-- answer counted by status.
--
--   wrk -t T -c C -s bench/wrk_unique.lua URL -- METHOD TOTAL THREADS BODY_FILE RUN_ID
--
-- BODY_FILE ("" for none) is the body template: the fixed-width tokens #RUN#####, #SEQ#####,
-- #WRK##### and #CUR##### are replaced in each request by 9 digits (so lengths inside the
-- body, e.g. SRMP's MIME Content-Length, stay right): the run id, a number no other request
-- of the run has (thread * 10^7 + the thread's own count), the thread's number, and the
-- thread's own count from 1 (one in-order SRMP stream per thread when each thread has one
-- connection). Each thread sends its share of TOTAL and then stops once every one of them is
-- answered, printing WRK-THREAD-DONE: no request is left in flight when the run ends, so the
-- 2xx answers counted here are all the server acknowledged. done() prints one line,
-- WRK-RESULT {json}, whose elapsed_us runs from the first request let through to the last
-- answer (CLOCK_MONOTONIC through LuaJIT's ffi): not wrk's start-up, connects, or the wait
-- for the signal that ends its sleep.

local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clock_id, bench_timespec *tp);
]]
local timespec = ffi.new("bench_timespec")

local function now_us()
  ffi.C.clock_gettime(1, timespec) -- CLOCK_MONOTONIC
  return tonumber(timespec.tv_sec) * 1000000 + math.floor(tonumber(timespec.tv_nsec) / 1000)
end

local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end

local TOKENS = {"#RUN#####", "#SEQ#####", "#WRK#####", "#CUR#####"}

-- The template as literal strings at odd indexes and token names at even ones.
local function split(body)
  local parts, pos = {}, 1
  while true do
    local first, token = nil, nil
    for _, candidate in ipairs(TOKENS) do
      local at = string.find(body, candidate, pos, true)
      if at and (first == nil or at < first) then first, token = at, candidate end
    end
    if first == nil then
      table.insert(parts, string.sub(body, pos))
      return parts
    end
    table.insert(parts, string.sub(body, pos, first - 1))
    table.insert(parts, token)
    pos = first + #token
  end
end

statuses = {}
started_us, finished_us = 0, 0
local method, budget, issued, answered = "GET", 0, 0, 0
local permits, own, extra = 0, 0, 10000000
local parts, run_id = nil, "000000000"

function init(args)
  method = args[1]
  local total, nthreads = tonumber(args[2]), tonumber(args[3])
  budget = math.floor(total / nthreads)
  if tid <= total % nthreads then budget = budget + 1 end
  if args[4] ~= "" then
    local file = assert(io.open(args[4], "rb"))
    parts = split(file:read("*a"))
    file:close()
  end
  run_id = args[5]
end

function delay()
  if issued >= budget then
    return 1000000000 -- this connection's share is sent: park it until the thread stops
  end
  if issued == 0 then started_us = now_us() end
  issued = issued + 1
  permits = permits + 1
  return 0
end

-- Each request let through by delay() takes the thread's next number from 1. wrk also calls
-- request() once to check it (not sent) and again to resend a request whose connection
-- failed: those take numbers counted down from 9,999,999, never another request's.
function request()
  local number
  if permits > 0 then
    permits = permits - 1
    own = own + 1
    number = own
  else
    extra = extra - 1
    number = extra
  end
  local body = nil
  if parts ~= nil then
    local values = {
      ["#RUN#####"] = run_id,
      ["#SEQ#####"] = string.format("%09d", tid * 10000000 + number),
      ["#WRK#####"] = string.format("%09d", tid),
      ["#CUR#####"] = string.format("%09d", number),
    }
    local pieces = {}
    for i, part in ipairs(parts) do
      if i % 2 == 0 then pieces[i] = values[part] else pieces[i] = part end
    end
    body = table.concat(pieces)
  end
  return wrk.format(method, nil, nil, body)
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
  answered = answered + 1
  if answered == budget then
    finished_us = now_us()
    io.stdout:write("WRK-THREAD-DONE\n")
    io.stdout:flush()
    wrk.thread:stop()
  end
end

function done(summary, latency, requests)
  local total, first, last = {}, nil, 0
  for _, thread in ipairs(threads) do
    for status, count in pairs(thread:get("statuses")) do
      total[status] = (total[status] or 0) + count
    end
    local started, finished = thread:get("started_us"), thread:get("finished_us")
    if first == nil or started < first then first = started end
    if finished > last then last = finished end
  end
  local shown = {}
  for status, count in pairs(total) do
    table.insert(shown, string.format('"%d": %d', status, count))
  end
  local e = summary.errors
  io.write(string.format(
    'WRK-RESULT {"elapsed_us": %d, "duration_us": %d, "statuses": {%s}, "errors": {"connect": '
    .. '%d, "read": %d, "write": %d, "timeout": %d}, "p50_us": %d, "p99_us": %d}\n',
    last - first, summary.duration, table.concat(shown, ", "), e.connect, e.read, e.write,
    e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
