#!/usr/bin/env bash
# cpu-by-command.sh [interval-seconds] [count]: every interval, the CPUs each command
# (proxy, ledger, postgres, redis-server, wrk, loadtest, ...) used over it, summed over its
# processes (every Postgres backend counts as postgres), largest first, from utime + stime
# in /proc/<pid>/stat. Run it beside a load run to split a request's CPU by process
# (loadtest/BENCHMARKS.md); kernel threads are left out, since their names change as they run.
#   scripts/cpu-by-command.sh 1 60 > cpu.txt & bin/loadtest compare --generator wrk ...
set -euo pipefail
interval=${1:-1}
count=${2:-60}
hz=$(getconf CLK_TCK)

# snapshot prints "pid command ticks" for every process: comm is between the first "(" and
# the last ")", and may hold spaces; utime and stime are the 12th and 13th fields after it.
snapshot() {
	local f line comm rest pid
	for f in /proc/[0-9]*/stat; do
		{ line=$(<"$f"); } 2>/dev/null || continue
		pid=${f#/proc/}
		comm=${line#*(}
		comm=${comm%)*}
		rest=${line##*) }
		# shellcheck disable=SC2086
		set -- $rest
		[[ $comm == kworker* ]] && continue
		echo "${pid%/stat} ${comm// /_} $((${12} + ${13}))"
	done
}

# A process counts what it used since the last snapshot, or since it started when it
# started in between (one that ended in between is missed); each over the time between the
# two snapshots, which is a little more than the interval.
prev=$(snapshot)
t0=$EPOCHREALTIME
for ((i = 1; i <= count; i++)); do
	sleep "$interval"
	cur=$(snapshot)
	t1=$EPOCHREALTIME
	line=$(awk -v hz="$hz" -v iv="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" '
		NR == FNR { before[$1] = $3; next }
		{ used[$2] += $3 - before[$1] }
		END { for (c in used) if (used[c] / hz / iv >= 0.02) printf "%.2f %s\n", used[c] / hz / iv, c }' \
		<(echo "$prev") <(echo "$cur") | sort -rn | head -8 | awk '{ printf " %s=%s", $2, $1 }')
	printf '%4ss%s\n' "$((i * interval))" "$line"
	prev=$cur t0=$t1
done
