#!/usr/bin/env bash
# Instructions (and optionally cache misses and mispredicted branches) per packet-hop of a
# synthetic-traffic run, from two callgrind runs of different length, differenced so that
# set-up cancels (docs/PERFORMANCE.md, "Machine and method").
#   scripts/cost-per-hop.sh [--cache] [--branch] BINARY [SCENARIO [LOAD]]
#   scripts/cost-per-hop.sh target/release/hpcnet scenarios/torus-8x8x8.toml 0.45
# --cache simulates this machine's L1d and L2 (48 KiB 12-way, 2 MiB 16-way, 64-byte lines);
# --branch uses callgrind's branch predictor model (not the processor's). Needs valgrind.
set -euo pipefail
opts=()
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --cache) opts+=(--cache-sim=yes --D1=49152,12,64 --LL=2097152,16,64) ;;
    --branch) opts+=(--branch-sim=yes) ;;
    *) echo "cost-per-hop.sh: unknown option $1 (--cache, --branch)" >&2; exit 2 ;;
  esac
  shift
done
if [[ $# -lt 1 ]]; then
  echo "usage: cost-per-hop.sh [--cache] [--branch] BINARY [SCENARIO [LOAD]]" >&2
  exit 2
fi
command -v valgrind > /dev/null || { echo "cost-per-hop.sh: valgrind is not installed" >&2; exit 2; }
bin=$(realpath "$1")
scenario=${2:-scenarios/torus-8x8x8.toml}
load=${3:-0.45}
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for m in 20 40; do
  valgrind --tool=callgrind "${opts[@]}" --callgrind-out-file="$dir/cg$m.out" \
    "$bin" run "$scenario" --set traffic.load="$load" --set "sim.measure=\"$m us\"" --json \
    > "$dir/run$m.json" 2> "$dir/valgrind$m.log"
done
python3 - "$dir" "$scenario" "$load" <<'PY'
import json, sys
d, scenario, load = sys.argv[1:4]
def summary(m):
    events = None
    for line in open(f"{d}/cg{m}.out"):
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith("summary:"):
            return dict(zip(events, map(int, line.split()[1:])))
    raise SystemExit(f"cost-per-hop.sh: no summary in {d}/cg{m}.out")
hops = {m: json.load(open(f"{d}/run{m}.json"))["total_hops"] for m in (20, 40)}
a, b = summary(20), summary(40)
h = hops[40] - hops[20]
per = {k: (b[k] - a[k]) / h for k in a}
print(f"{scenario} at load {load}: {h} packet-hops (40 us - 20 us)")
print(f"  instructions per hop      {per['Ir']:.1f}")
if "D1mr" in per:
    print(f"  D1 misses per hop         {per['D1mr'] + per['D1mw']:.2f}")
    print(f"  LL misses per hop         {per['DLmr'] + per['DLmw']:.3f}")
    print(f"  L1i misses per hop        {per['I1mr']:.2f}")
if "Bcm" in per:
    print(f"  mispredicted branches     {per['Bcm'] + per['Bim']:.2f} per hop (conditional {per['Bcm']:.2f}, indirect {per['Bim']:.2f})")
PY
