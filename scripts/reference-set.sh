#!/usr/bin/env bash
# Results of a fixed set of runs, JSON without wall-clock fields, for checking that a change
# to the simulator's speed leaves every result byte-identical (docs/PERFORMANCE.md, "Method").
#   scripts/reference-set.sh BINARY OUTDIR
#   diff -r OUTDIR_before OUTDIR_after
set -euo pipefail
bin=$(realpath "$1"); out=$2
mkdir -p "$out"
cd "$(dirname "$0")/.."
strip() { python3 -c '
import json, sys
def clean(v):
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items()
                if not any(s in k for s in ("seconds", "wall", "per_cpu", "rss"))}
    if isinstance(v, list):
        return [clean(x) for x in v]
    return v
text = sys.stdin.read()
try:
    print(json.dumps(clean(json.loads(text)), indent=1, sort_keys=True))
except ValueError:
    print(text)
'; }
run() { local name=$1; shift; "$bin" "$@" 2>/dev/null | strip > "$out/$name.json"; }
for load in 0.2 0.45 0.9 1.0; do
  run "torus3-$load" run scenarios/torus-8x8x8.toml --set traffic.load=$load --json
done
run torus3-dateline run scenarios/torus-8x8x8.toml --set 'routing.deadlock="dateline"' --json
run torus3-random-tie run scenarios/torus-8x8x8.toml --set 'routing.tie="random"' --set traffic.load=0.6 --json
run torus2 run scenarios/torus-8x8.toml --json
run torus3-speedup2 run scenarios/torus-8x8x8.toml --set router.input_speedup=2 --json
run fattree run scenarios/fattree-4ary-3tree.toml --json
run fattree-1.0 run scenarios/fattree-4ary-3tree.toml --set traffic.load=1.0 --json
run sunway run scenarios/sunway-prototype.toml --json
run dragonfly run scenarios/dragonfly-small.toml --json
run nicevt run scenarios/nicevt-m3.toml --json
run torus2-islip run scenarios/torus-8x8.toml --set 'router.allocator="islip"' --set traffic.load=0.8 --json
run chpp-p2p p2p scenarios/chpp-pair.toml --json
run coll-torus2 coll scenarios/torus-8x8.toml --op allreduce --ranks 16 --sizes 8:64K --json
run sunway-hw coll scenarios/sunway-prototype.toml --op allreduce --algorithm hardware --ranks 256 --sizes 8:64K --json
run sunway-ring coll scenarios/sunway-prototype.toml --op allreduce --algorithm ring --ranks 64 --sizes 8:64K --json
run randomaccess shmem scenarios/nicevt-m3.toml --test randomaccess --pes 64 --updates 1024 --log-table 10 --json
