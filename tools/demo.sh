#!/usr/bin/env bash
# make demo: start the worker on the embedded single-machine default (bundled tiny-shapes
# model), draw a dozen fresh shape scenes with a query each (bin/genscenes), submit them,
# score the answers against the true boxes, and leave the results and overlay pictures in
# demo-out/ for a person to open. LA_DEMO_SEED=N draws the same scenes again;
# LA_DEMO_HELDOUT=1 submits the bundled model's 96 held-out scenes (testdata/heldout.jsonl)
# instead of fresh ones. Each scene is asked its own query. It ends with the found rate and
# the web console's address of the batch (docs/console.md); on a terminal the worker keeps
# serving the console until Enter or Ctrl-C (LA_DEMO_KEEP=0 stops it at once, =1 keeps it
# without a terminal too).
set -euo pipefail
cd "$(dirname "$0")/.."
out=demo-out
rm -rf "$out"
mkdir -p "$out"
nats=127.0.0.1:${LA_DEMO_NATS_PORT:-4223}

LA_DATA_DIR="$out/la-data" LA_NATS_LISTEN="$nats" LA_HTTP_ADDR=127.0.0.1:0 LA_METRICS_ADDR=off \
	bin/worker >"$out/worker.log" 2>&1 &
worker=$!
trap 'kill "$worker" 2>/dev/null; wait "$worker" 2>/dev/null || true' EXIT

for _ in $(seq 1 600); do
	grep -q "Application startup complete" "$out/worker.log" && break
	kill -0 "$worker" 2>/dev/null || { echo "worker failed to start:"; cat "$out/worker.log"; exit 1; }
	sleep 0.1
done

if [ -n "${LA_DEMO_HELDOUT:-}" ]; then
	manifest=tools/tinymodel/testdata/heldout.jsonl
	scenes=tools/tinymodel/testdata/heldout/
else
	bin/genscenes make -n "${LA_DEMO_SCENES:-12}" -seed "${LA_DEMO_SEED:-0}" -out "$out/scenes"
	manifest=$out/scenes/manifest.jsonl
	scenes=$out/scenes/
fi
rc=0
batch=demo-$(date -u +%Y%m%d-%H%M%S)
LA_NATS_URL="nats://$nats" bin/submit --overlay --batch "$batch" --out "$out" "$manifest" || rc=$?
echo
bin/genscenes score "$out/results.jsonl" || rc=$?
echo
echo "scenes: $scenes   results: $out/results.jsonl   overlays: $out/overlays/   worker log: $out/worker.log"

# The worker logs the address it serves /predict and the console on ("/predict served",
# addr, in JSON or text); the console is under /console/.
addr=$(sed -nE 's|.*/predict served.*addr"?[=:]"?([^" ]+).*|\1|p' "$out/worker.log" | head -n 1)
keep=${LA_DEMO_KEEP:-}
if [ -z "$keep" ]; then
	if [ -t 0 ]; then keep=1; else keep=0; fi
fi
if [ "$keep" = 1 ]; then
	echo "console: http://$addr/console/#/batch/$batch   (the worker serves it until Enter or Ctrl-C)"
	read -r _ || true
else
	echo "console: http://$addr/console/#/batch/$batch   (the worker stopped with the demo: LA_DEMO_KEEP=1 keeps it serving)"
fi
exit "$rc"
