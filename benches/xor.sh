#!/usr/bin/env bash
# Benchmark: `osmeter io xor` against `dd bs=1M`, a plain single-threaded read() loop
# and fio (uncached), on one file, cached and uncached, reported as ratios.
#
#   benches/xor.sh [SIZE] [REPS]        SIZE default 2G, REPS default 3
#   OSMETER=path/to/osmeter  BENCH_DIR=parent-folder (default: current directory)
#
# The test file lives in a new folder under BENCH_DIR (refused on tmpfs: a file there
# never touches a disk) and is removed on exit, Ctrl-C or error. Runs are interleaved
# (dd, loop, xor, dd, loop, xor...) so a shared machine's drifts hit every contender;
# medians and [min-max] ranges are printed. "Cached" runs first read the file and check
# with fincore that every page is cached; "uncached" runs evict the file before each run
# (dd iflag=nocache count=0, i.e. POSIX_FADV_DONTNEED) and check that none is.
set -euo pipefail

SIZE=${1:-2G}
REPS=${2:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OSM=${OSMETER:-$ROOT/target/release/osmeter}
PARENT=${BENCH_DIR:-$PWD}

[ -x "$OSM" ] || (cd "$ROOT" && cargo build --release -q)
fstype=$(stat -f -c %T "$PARENT")
case "$fstype" in tmpfs|ramfs) echo "refusing $PARENT: $fstype never touches a disk" >&2; exit 2;; esac

DIR=$(mktemp -d "$PARENT/osmeter-xor-bench.XXXXXX")
trap 'rm -rf "$DIR"' EXIT INT TERM
F=$DIR/file
bytes=$(numfmt --from=iec "$SIZE")
free=$(df -B1 --output=avail "$DIR" | tail -1)
if [ "$bytes" -gt $((free / 2)) ]; then
  echo "not enough space in $PARENT: need $SIZE, at most half of $free bytes free" >&2; exit 1
fi

echo "# $(date -Is) $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), fs $fstype"
"$OSM" io write "$F" --block-size 1M --count $((bytes / 1048576)) --json >/dev/null

resident() { fincore -b -n -o RES "$F" | tr -d ' '; }
warm() { cat "$F" >/dev/null; [ "$(resident)" = "$bytes" ] || echo "  warning: only $(resident) of $bytes bytes cached" >&2; }
warm2() { warm; }
cold() { dd if="$F" iflag=nocache count=0 status=none; [ "$(resident)" = 0 ] || echo "  warning: $(resident) bytes still cached after eviction" >&2; }

# c_X runs contender X with its output in $DIR/out; p_X prints its bytes/s from there.
c_dd() { dd if="$F" of=/dev/null bs=1M 2>"$DIR/out"; }
p_dd() { awk '/copied/ {print $1 / $(NF-3)}' "$DIR/out"; }
c_loop() { "$OSM" io read "$F" --block-size 128K --json >"$DIR/out"; }
c_xor() { "$OSM" io xor "$F" --json >"$DIR/out"; }
p_json() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bytes_per_s"])' "$DIR/out"; }
p_loop() { p_json; }
p_xor() { cat "$DIR/out" >>"$DIR/xor.log"; p_json; }
c_fio() { fio --name=x --filename="$F" --rw=read --bs=1M --direct=1 --readonly --ioengine="$1" ${2:+--iodepth=$2} \
            --output-format=json >"$DIR/out"; }
p_fio() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobs"][0]["read"]["bw_bytes"])' "$DIR/out"; }
c_fio_psync() { c_fio psync; }
c_fio_aio() { c_fio libaio 32; }
p_fio_psync() { p_fio; }
p_fio_aio() { p_fio; }

declare -A R C
run() { # state contender...
  local state=$1; shift
  for ((i = 0; i < REPS; i++)); do
    for c in "$@"; do
      $state
      perf stat -x, -e task-clock -o "$DIR/ps" -- bash -c "$(declare -f "c_$c" c_fio); F='$F' OSM='$OSM' DIR='$DIR' c_$c"
      R[$state.$c]+="$(p_$c) "
      C[$state.$c]+="$(awk -F, -v b="$bytes" '/task-clock/ {print b / ($1 / 1000)}' "$DIR/ps") "
    done
  done
}

summ() { python3 - "$@" <<'EOF'
import sys, statistics as st
v = [float(x) for x in sys.argv[1].split()]
print(f"{st.median(v)/1e9:.2f} GB/s [{min(v)/1e9:.2f}-{max(v)/1e9:.2f}]")
EOF
}
med() { python3 -c 'import sys,statistics as s; print(s.median(float(x) for x in sys.argv[1].split()))' "$1"; }
ratio() { python3 -c 'import sys; print(f"{float(sys.argv[1])/float(sys.argv[2]):.2f}x")' "$1" "$2"; }

echo "## memory read bandwidth (sysbench, 1 and all threads)"
mem1=$(sysbench memory --memory-block-size=1G --memory-total-size=16G --memory-oper=read --threads=1 run | awk -F'[( ]' '/transferred/ {print $(NF-1) * 1048576}')
memn=$(sysbench memory --memory-block-size=1G --memory-total-size=16G --memory-oper=read --threads="$(nproc)" run | awk -F'[( ]' '/transferred/ {print $(NF-1) * 1048576}')
echo "1 thread: $(summ "$mem1"); $(nproc) threads: $(summ "$memn")"

echo "## cached ($SIZE, $REPS interleaved runs each)"
run warm dd loop xor
for c in dd loop xor; do echo "$c: $(summ "${R[warm.$c]}")   per CPU-second: $(summ "${C[warm.$c]}")"; done
threads=$(python3 -c 'import json; print(json.loads(open("'"$DIR"'/xor.log").readline())["threads"])')
limit=$(python3 -c "print(min($mem1 * $threads, max($memn, $mem1)))")
echo "xor / dd = $(ratio "$(med "${R[warm.xor]}")" "$(med "${R[warm.dd]}")") (bar >= 1.5x)"
echo "xor / read loop = $(ratio "$(med "${R[warm.xor]}")" "$(med "${R[warm.loop]}")")"
echo "xor / min(1-thread memory bw x $threads threads, all-thread bw) = $(ratio "$(med "${R[warm.xor]}")" "$limit") (bar >= 0.60x)"
echo "per CPU-second: xor / dd = $(ratio "$(med "${C[warm.xor]}")" "$(med "${C[warm.dd]}")")"
echo "xor runs: $(python3 -c 'import json,sys; print(sorted({(d["method"], d["threads"], d["block_bytes"]) for d in map(json.loads, open(sys.argv[1]))}))' "$DIR/xor.log")"
: >"$DIR/xor.log"

# The page cache now holds the folios its writer made (about 1 MiB). Reading the file
# uncached through a MADV_HUGEPAGE mapping refills it with 2 MiB folios, which io xor
# maps with one PMD entry each (see docs/IO.md).
echo "## cached, 2 MiB folios (cache refilled by an uncached io xor --method mmap)"
cold; "$OSM" io xor "$F" --method mmap >/dev/null
run warm2 dd loop xor
for c in dd loop xor; do echo "$c: $(summ "${R[warm2.$c]}")   per CPU-second: $(summ "${C[warm2.$c]}")"; done
echo "xor / dd = $(ratio "$(med "${R[warm2.xor]}")" "$(med "${R[warm2.dd]}")") (bar >= 1.5x); per CPU-second $(ratio "$(med "${C[warm2.xor]}")" "$(med "${C[warm2.dd]}")")"
echo "xor / min(1-thread memory bw x $threads threads, all-thread bw) = $(ratio "$(med "${R[warm2.xor]}")" "$limit") (bar >= 0.60x)"
echo "xor runs: $(python3 -c 'import json,sys; print(sorted({(d["method"], d["threads"], d["block_bytes"]) for d in map(json.loads, open(sys.argv[1]))}))' "$DIR/xor.log")"
: >"$DIR/xor.log"

echo "## uncached ($SIZE, evicted before each run)"
run cold dd loop xor fio_psync fio_aio
for c in dd loop xor fio_psync fio_aio; do echo "$c: $(summ "${R[cold.$c]}")   per CPU-second: $(summ "${C[cold.$c]}")"; done
best=$(python3 -c "print(max($(med "${R[cold.fio_psync]}"), $(med "${R[cold.fio_aio]}")))")
echo "xor / dd = $(ratio "$(med "${R[cold.xor]}")" "$(med "${R[cold.dd]}")")"
echo "xor / read loop = $(ratio "$(med "${R[cold.xor]}")" "$(med "${R[cold.loop]}")")"
echo "xor / best fio = $(ratio "$(med "${R[cold.xor]}")" "$best") (bar >= 0.9x)"
echo "xor runs: $(python3 -c 'import json,sys; print(sorted({(d["method"], d["threads"], d["block_bytes"]) for d in map(json.loads, open(sys.argv[1]))}))' "$DIR/xor.log")"
