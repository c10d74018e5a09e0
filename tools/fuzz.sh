#!/usr/bin/env bash
# Runs every fuzz target of the repository (each `func FuzzXxx(f *testing.F)` in a
# *_test.go file) for FUZZTIME each, one at a time: `go test` fuzzes one target per run.
#
#   tools/fuzz.sh                    every target, FUZZTIME each (default 60s)
#   FUZZTIME=5s tools/fuzz.sh        the bounded pass `make test` runs
#   tools/fuzz.sh jobs FuzzParse     only targets whose package directory or name matches
#
# FUZZTIME is anything -fuzztime takes: a duration (30s, 2m) or a count of runs (1000x).
# FUZZMINIMIZETIME (default 100x) bounds how long the fuzzer shrinks each new input; the
# go default (60s each) stalls the image targets for minutes at a time.
#
# A failing input is written to <package>/testdata/fuzz/<FuzzXxx>/ by go test; commit it
# with the fix, and `go test` replays it as a normal test from then on. The script goes on
# with the other targets and exits 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

fuzztime="${FUZZTIME:-60s}"
minimize="${FUZZMINIMIZETIME:-100x}"
go="${GO:-go}"

# "dir name" per target, sorted; vendor and testdata trees hold no targets of ours.
targets=$(grep -rE --include='*_test.go' --exclude-dir=vendor --exclude-dir=testdata --exclude-dir=.git \
	-o '^func Fuzz[A-Za-z0-9_]*\(' . |
	sed -E 's#^\./##; s#/[^/]*_test\.go:func # #; s#^[^/ ]*_test\.go:func #. #; s#\($##' | sort -u)

selected=()
while read -r dir name; do
	[ -n "$name" ] || continue
	if [ $# -gt 0 ]; then
		match=0
		for pat in "$@"; do
			case "$dir $name" in *"$pat"*) match=1 ;; esac
		done
		[ $match = 1 ] || continue
	fi
	selected+=("$dir $name")
done <<<"$targets"

if [ ${#selected[@]} -eq 0 ]; then
	echo "fuzz.sh: no fuzz target matches: $*" >&2
	exit 2
fi

echo "fuzz.sh: ${#selected[@]} targets, ${fuzztime} each"
failed=()
start=$SECONDS
for t in "${selected[@]}"; do
	dir=${t% *}
	name=${t#* }
	t0=$SECONDS
	# Go 1.26's fuzzing coordinator can fail a target with a bare "context deadline
	# exceeded" just as -fuzztime runs out, having found nothing (go.dev/issue/75804, a race
	# between the deadline and its child context, fixed in Go 1.27; more likely on a loaded
	# machine). A real finding always writes its input first ("Failing input written to"),
	# so only that signature is run again, at most twice.
	for try in 1 2 3; do
		if out=$("$go" test -run '^$' -fuzz "^${name}\$" -fuzztime="$fuzztime" -fuzzminimizetime="$minimize" "./$dir" 2>&1); then
			ok=1
			break
		fi
		ok=0
		if ! grep -q 'context deadline exceeded' <<<"$out" || grep -q 'Failing input written to' <<<"$out"; then
			break
		fi
		echo "      $dir $name: the coordinator's deadline race (go.dev/issue/75804), no input found; run $((try + 1))"
	done
	if [ "$ok" = 1 ]; then
		echo "ok    $dir $name ($((SECONDS - t0))s)"
	else
		echo "FAIL  $dir $name ($((SECONDS - t0))s)"
		echo "$out" | tail -n 40 | sed 's/^/      /'
		failed+=("$dir $name")
	fi
done
echo "fuzz.sh: ${#selected[@]} targets in $((SECONDS - start))s"
if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz.sh: failed: ${failed[*]}" >&2
	echo "fuzz.sh: the failing inputs are under each package's testdata/fuzz/; commit them with the fix" >&2
	exit 1
fi
