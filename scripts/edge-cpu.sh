#!/usr/bin/env bash
# edge-cpu.sh [bin-dir] [seconds] [rounds]: the CPU each answer the proxy gives without the
# ledger costs, per request, by process, from utime + stime in /proc/<pid>/stat before and after
# a wrk run (one thread, CONNS connections, 32 unless set), on a stack of its own (`loadtest run`)
# and beside it the bare gin ceiling (`loadtest ceiling`) in the same run. The paths, in turns:
#   ceiling  bare gin: bind and validate the body, a fixed 409
#   sold     a flash voucher with no use left: the proxy's sold-out flag answers 409
#   gate     100 customers at their limit of one: the Redis script answers 409 (Redis decides)
#   junk     a made-up code on every request: 404 at the edge, after its sync with the change channel
#   ref      a known code with customerId 0: 400 from validation (the junk attack's reference)
# Each line: the path, its requests, then us of CPU per request of the server (proxy, or gin for
# the ceiling), of Redis and of wrk, and all of them together.
#   make build && scripts/edge-cpu.sh bin 5 3
set -euo pipefail
bin=${1:-bin}
secs=${2:-5}
rounds=${3:-1}
conns=${CONNS:-32}
paths=${PATHS:-sold gate junk ref}
hz=$(getconf CLK_TCK)
work=$(mktemp -d)
run_pid= ceiling_pid=
stop() {
	[[ -n $ceiling_pid ]] && kill "$ceiling_pid" 2>/dev/null
	[[ -n $run_pid ]] && kill -INT "$run_pid" 2>/dev/null # loadtest run stops its stack on SIGINT
	wait 2>/dev/null
	rm -rf "$work"
}
trap stop EXIT

"$bin/loadtest" run --bin "$bin" --env-file "$work/env" >"$work/run.log" 2>&1 &
run_pid=$!
for _ in $(seq 1 240); do [[ -s $work/env ]] && break; sleep 0.5; done
# shellcheck disable=SC1091
. "$work/env"
proxy_pid=$(pgrep -P "$run_pid" -x proxy)
redis_pid=$(pgrep -P "$run_pid" -x redis-server)
port=$((20000 + RANDOM % 10000))
"$bin/loadtest" ceiling --addr "127.0.0.1:$port" >/dev/null 2>&1 &
ceiling_pid=$!

auth="Authorization: Bearer $FLASHGATE_TOKEN"
create() { # code uses
	curl -sf "$FLASHGATE_LEDGER/admin/vouchers" -H "$auth" -H 'Content-Type: application/json' -o /dev/null -d '{
	  "code": "'"$1"'", "discountAmount": 100000, "minOrderAmount": 500000, "totalLimit": '"$2"',
	  "perUserLimit": 1, "flashSale": true, "startsAt": "'"$(date -u -d '-1 hour' +%FT%TZ)"'",
	  "endsAt": "'"$(date -u -d '+30 days' +%FT%TZ)"'"}'
}
body() { echo '{"customerId":'"$1"',"orderId":"'"$2"'","orderAmount":750000}'; }
reserve() { # code customer order
	curl -s "$FLASHGATE_PROXY/vouchers/$1/reservations" -H 'Content-Type: application/json' \
		-d "$(body "$2" "$3")" -o /dev/null -w '%{http_code}'
}
create SOLD1 1
create GATE1 1000000
create REF1 1000
reserve SOLD1 1 sold-1 >/dev/null
reserve SOLD1 2 sold-2 >/dev/null # Redis refuses it and sets the flag
for c in $(seq 1 100); do reserve GATE1 "$c" "gate-held-$c" >/dev/null; done

constant() { # file path body
	printf 'wrk.method = "POST"\nwrk.path = "%s"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = %s\n' \
		"$2" "'$3'" >"$work/$1.lua"
}
constant ceiling /vouchers/CEILING/reservations "$(body 3 ceiling-1)"
constant sold /vouchers/SOLD1/reservations "$(body 3 sold-x)"
constant ref /vouchers/REF1/reservations "$(body 0 ref-1)"
cat >"$work/gate.lua" <<'EOF'
local n = 0
local headers = {["Content-Type"] = "application/json"}
request = function()
  n = n % 100 + 1
  return wrk.format("POST", "/vouchers/GATE1/reservations", headers,
    '{"customerId":' .. n .. ',"orderId":"gate-' .. n .. '","orderAmount":750000}')
end
EOF
cat >"$work/junk.lua" <<'EOF'
local n = 0
local headers = {["Content-Type"] = "application/json"}
request = function()
  n = n + 1
  local code = "JUNK" .. math.random(1, 2000000000)
  return wrk.format("POST", "/vouchers/" .. code .. "/reservations", headers,
    '{"customerId":' .. n .. ',"orderId":"' .. code .. '","orderAmount":750000}')
end
EOF

ticks() { local f; f=$(<"/proc/$1/stat"); f=${f##*) }; set -- $f; echo $((${12} + ${13})); }
us() { echo "scale=1; $1 * 1000000 / $hz / $2" | bc; } # ticks requests
one() { # path server-pid url
	local s0 r0 out n wrk_ticks s1 r1
	s0=$(ticks "$2") r0=$(ticks "$redis_pid")
	out=$( { /usr/bin/time -f 'wrk-cpu %U %S' wrk -t1 -c"$conns" -d"${secs}s" -s "$work/$1.lua" "$3"; } 2>&1)
	s1=$(ticks "$2") r1=$(ticks "$redis_pid")
	n=$(grep -o '[0-9]* requests in' <<<"$out" | cut -d' ' -f1)
	wrk_ticks=$(awk -v hz="$hz" '/^wrk-cpu/ {printf "%d", ($2 + $3) * hz}' <<<"$out")
	local server=$((s1 - s0)) redis=$((r1 - r0))
	[[ $1 == ceiling ]] && redis=0
	echo "$1 requests=$n server_us=$(us $server "$n") redis_us=$(us $redis "$n") wrk_us=$(us "$wrk_ticks" "$n")" \
		"all_us=$(us $((server + redis + wrk_ticks)) "$n")"
}
for _ in $(seq 1 "$rounds"); do
	one ceiling "$ceiling_pid" "http://127.0.0.1:$port"
	for p in $paths; do one "$p" "$proxy_pid" "$FLASHGATE_PROXY"; done
done
