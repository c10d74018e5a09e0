#!/usr/bin/env bash
# compare.sh: the CPU engine side by side with the ggml port of LocateAnything
# (locate-anything.cpp), on the same checkpoint, image, prompt and thread count, in
# alternating rounds. See bench/ggml/README.md for what it measures and why.
#
# usage: bench/ggml/compare.sh [options] [step ...]
#
# Steps, run in this order whichever order they are given (default: all of them):
#   fetch    clone the port and ggml at the pinned commits (from GitHub, or --port-src /
#            --ggml-src: a local clone, a bare mirror or another URL)
#   build    the port with cmake twice: ggml as the port ships it ("default") and with
#            ggml's LLAMAFILE matrix kernels on ("llamafile", as llama.cpp builds it);
#            bench/ggml/driver/la_stages.cpp against each; our worker for every --ours entry
#   convert  the checkpoint to an f32 GGUF with the port's own converter (Debian python3
#            with numpy and torch; bench/ggml/pyshim stands in for the `gguf` and
#            `safetensors` packages), then to q8_0 with the port's quantizer
#   run      --rounds rounds; each round runs every port configuration and every --ours
#            entry once, one after the other, each as its own process under
#            flock --lock and /usr/bin/time (peak RSS); appends to OUT/results.tsv
#   summary  medians per configuration and same-round ratios against --reference,
#            written to OUT/summary.md, with the CPU model and each row's kernel set
#            (OUT/machine.tsv, written by run)
#
# Options (defaults in brackets):
#   --work DIR        sources, builds, models, binaries [${TMPDIR:-/tmp}/la-ggml-bench]
#   --out DIR         results: results.tsv, summary.md, one log per run [WORK/results]
#   --port-src SRC    git URL or path of locate-anything.cpp [https://github.com/mudler/locate-anything.cpp]
#   --port-rev REV    commit of the port [92c1682da792c1e8a5dec91acc2be4b02c742ded]
#   --ggml-src SRC    git URL or path of ggml [https://github.com/ggml-org/ggml]
#   --ggml-rev REV    commit of ggml [7142aa6bf9fcaeec0fef8d80fcd90afe4268adf1, the port's submodule]
#   --weights DIR     the bf16 checkpoint both engines read [${TMPDIR:-/tmp}/la-random-3b]
#   --image FILE      the image, 448x448 for a 32x32 patch grid [bench/ggml/dog-448.jpg]
#   --prompt TEXT     the detection query [one category, dog: 295 prompt tokens in all]
#   --tokens N        decode steps after the prefill [64]
#   --threads N       threads of both engines [2]
#   --rounds N        alternating rounds [3]
#   --first-round N   number of the first round, to add rounds (of some configurations)
#                     to an earlier sitting's OUT/results.tsv [1]
#   --configs LIST    port configurations, of f32, q8_0, f32-llamafile, q8_0-llamafile
#                     [f32,q8_0,q8_0-llamafile]
#   --ours NAME=SRC[,VAR=VALUE|,--flag[=value]...]
#                     one configuration of our engine, repeatable: SRC is a checkout whose
#                     committed HEAD is built (git archive, so uncommitted edits of others
#                     never leak in) or a worker binary used as it is; VAR=VALUE are set in
#                     its environment (e.g. LA_WEIGHTS_QUANT=q8), --flag=value added to its
#                     `worker bench` command line (e.g. --quant=q8) [ours=<this repository>]
#   --reference NAME  the configuration ratios are taken against [the first --ours]
#   --lock FILE       flock file held around every process that loads the model
#                     [${TMPDIR:-/tmp}/bench3b.lock]
#   --python FILE     python3 with numpy and torch, for the converter [/usr/bin/python3]
#   --jobs N          parallel build jobs [nproc]
#   --parts N         parts the f32 GGUF is quantized in, to bound the quantizer's memory
#                     (it holds its whole input and output) [4]
#   --dry-run         print the commands instead of running them
#   -h, --help        print this help
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

work=${TMPDIR:-/tmp}/la-ggml-bench
out=
port_src=https://github.com/mudler/locate-anything.cpp
port_rev=92c1682da792c1e8a5dec91acc2be4b02c742ded
ggml_src=https://github.com/ggml-org/ggml
ggml_rev=7142aa6bf9fcaeec0fef8d80fcd90afe4268adf1
weights=${TMPDIR:-/tmp}/la-random-3b
image=$here/dog-448.jpg
prompt='Locate all the instances that matches the following description: dog.'
tokens=64
threads=2
rounds=3
first_round=1
configs=f32,q8_0,q8_0-llamafile
ours=()
reference=
lock=${TMPDIR:-/tmp}/bench3b.lock
python=/usr/bin/python3
jobs=$(nproc)
quant_parts=4
dry=0
steps=()

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
die() {
	echo "compare.sh: $*" >&2
	exit 1
}

# run_cmd prints a command and runs it (only prints it under --dry-run).
run_cmd() {
	printf '+'
	printf ' %q' "$@"
	printf '\n'
	((dry)) || "$@"
}

# clone_at SRC REV DIR: DIR holds SRC checked out at REV (kept when it already is).
clone_at() {
	local src=$1 rev=$2 dir=$3
	if [[ -d $dir/.git ]] && [[ $(git -C "$dir" rev-parse HEAD 2>/dev/null) == "$rev" ]]; then
		echo "$dir: already at $rev"
		return
	fi
	run_cmd rm -rf "$dir"
	run_cmd git clone --quiet --no-checkout "$src" "$dir"
	run_cmd git -C "$dir" -c advice.detachedHead=false checkout --quiet "$rev"
}

step_fetch() {
	clone_at "$port_src" "$port_rev" "$port"
	# The port vendors ggml as a git submodule at third_party/ggml; clone it there
	# ourselves so the source can come from anywhere.
	clone_at "$ggml_src" "$ggml_rev" "$port/third_party/ggml"
}

# build_port VARIANT LLAMAFILE: the port's library and CLI, then our stage driver.
build_port() {
	local dir=$port/build-$1
	run_cmd cmake -S "$port" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DLA_BUILD_CLI=ON \
		-DLA_BUILD_TESTS=OFF -DGGML_LLAMAFILE="$2"
	run_cmd cmake --build "$dir" -j "$jobs" --target locate_anything locate-anything-cli
	# la_stages links the port's library and ggml's static archives; ggml's CPU backend
	# uses OpenMP when the compiler has it (-fopenmp is harmless when it does not).
	run_cmd g++ -std=c++17 -O2 -o "$dir/la_stages" "$here/driver/la_stages.cpp" \
		-I"$port/src" -I"$port/include" -I"$port/third_party/ggml/include" \
		"$dir/liblocate_anything.a" \
		"$dir/third_party/ggml/src/libggml.a" "$dir/third_party/ggml/src/libggml-cpu.a" \
		"$dir/third_party/ggml/src/libggml-base.a" -fopenmp -lpthread -ldl -lm
}

# ours_spec NAME: prints "SRC" then one VAR=VALUE or --flag=value per line.
ours_spec() {
	local o
	for o in "${ours[@]}"; do
		if [[ ${o%%=*} == "$1" ]]; then
			local rest=${o#*=}
			tr ',' '\n' <<<"$rest"
			return
		fi
	done
}

ours_bin() { echo "$work/bin/worker-$1"; }

build_ours() {
	local name=$1 src
	src=$(ours_spec "$name" | head -n 1)
	if [[ -f $src && -x $src ]]; then
		run_cmd mkdir -p "$work/bin"
		run_cmd cp "$src" "$(ours_bin "$name")"
		return
	fi
	[[ -d $src ]] || die "--ours $name: $src is neither a worker binary nor a directory"
	local tree=$work/src-$name rev
	rev=$(git -C "$src" rev-parse HEAD) || die "--ours $name: $src is not a git checkout"
	echo "$name: building worker from $src at $rev"
	run_cmd rm -rf "$tree"
	run_cmd mkdir -p "$tree" "$work/bin"
	if ((dry)); then
		echo "+ git -C $src archive $rev | tar -x -C $tree"
	else
		git -C "$src" archive "$rev" | tar -x -C "$tree"
	fi
	run_cmd env -C "$tree" go build -o "$(ours_bin "$name")" ./cmd/worker
}

step_build() {
	build_port default OFF
	build_port llamafile ON
	local n
	for n in "${ours_names[@]}"; do build_ours "$n"; done
}

step_convert() {
	run_cmd mkdir -p "$models"
	if [[ -s $models/la-f32.gguf ]]; then
		echo "$models/la-f32.gguf: already converted"
	else
		# The port's converter imports `gguf` and `safetensors`; bench/ggml/pyshim
		# provides both (PYTHONPATH comes before site-packages).
		run_cmd flock "$lock" env PYTHONPATH="$here/pyshim" "$python" \
			"$port/scripts/convert_locateanything_to_gguf.py" --model "$weights" \
			--output "$models/la-f32.gguf"
	fi
	if [[ -s $models/la-q8_0.gguf ]]; then
		echo "$models/la-q8_0.gguf: already quantized"
		return
	fi
	# The port's quantizer holds its whole input and output in memory (about 24 GB for
	# 3B): quantize the f32 file in --parts parts and join the results (gguf_parts.py).
	local cli=$port/build-default/examples/cli/locate-anything-cli parts=() i
	run_cmd flock "$lock" "$python" "$here/gguf_parts.py" split "$models/la-f32.gguf" \
		"$models/part-f32" "$quant_parts"
	for ((i = 1; i <= quant_parts; i++)); do
		run_cmd flock "$lock" "$cli" quantize "$models/part-f32.$i.gguf" "$models/part-q8_0.$i.gguf" q8_0
		run_cmd rm -f "$models/part-f32.$i.gguf"
		parts+=("$models/part-q8_0.$i.gguf")
	done
	run_cmd "$python" "$here/gguf_parts.py" join "$models/la-q8_0.gguf" "${parts[@]}"
	run_cmd rm -f "${parts[@]}"
}

# field KEY FILE: the value of "KEY value" in a la_stages output.
field() { sed -n "s/^$1 \([0-9.x]*\)$/\1/p" "$2" | tail -n 1; }

# ms_of STAGE FILE: the milliseconds of a stage line of `worker bench`.
ms_of() { sed -n "s/^$1 .*: \([0-9.]*\) ms.*/\1/p" "$2" | head -n 1; }

# timed LOG CMD...: runs CMD under the lock and /usr/bin/time, stdout and stderr to LOG;
# fails (with a message) when CMD does.
timed() {
	local log=$1
	shift
	if ((dry)); then
		run_cmd flock "$lock" /usr/bin/time -f 'peak_rss_kb %M\nwall_s %e' "$@"
		return
	fi
	flock "$lock" /usr/bin/time -f 'peak_rss_kb %M\nwall_s %e' "$@" >"$log" 2>&1 || {
		# One failed run (say, killed for memory) costs its row, not the whole sitting.
		echo "compare.sh: $(basename "$log" .log) failed, see $log" >&2
		return 1
	}
}

# run_port ROUND CONFIG: one request through the port; appends its row.
run_port() {
	local r=$1 c=$2 quant=${2%%-*} variant=default
	[[ $c == *-llamafile ]] && variant=llamafile
	local log=$out/logs/r$r-$c.log
	timed "$log" "$port/build-$variant/la_stages" --model "$models/la-$quant.gguf" \
		--image "$image" --prompt "$prompt" --threads "$threads" --tokens "$tokens" || return 0
	((dry)) && return
	local v p d
	v=$(field vision_ms "$log") p=$(field prefill_ms "$log") d=$(field decode_ms "$log")
	field grid "$log" >"$out/grid"
	field prompt_tokens "$log" >"$out/prompt_tokens"
	row "$r" "$c" "$v" "$p" "$d" "$(field peak_rss_kb "$log")" "$(field wall_s "$log")"
	machine_row "$r" "$c" "ggml $variant build (GGML_NATIVE$([[ $variant == llamafile ]] && echo ', LLAMAFILE'))"
}

# cpu_model: the CPU's model name and the instruction sets the engines choose among.
cpu_model() {
	local name flags f have=()
	name=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
	flags=" $(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1) "
	for f in avx2 avx512f avx512_bf16 avx512_vnni amx_tile amx_bf16; do
		[[ $flags == *" $f "* ]] && have+=("$f")
	done
	[[ $flags == *" amx_tile "* ]] || have+=("no AMX")
	echo "${name:-unknown CPU} (${have[*]})"
}

# kernels_of LOG: the kernel sets a `worker bench` log names: its decode kernels and its
# prefill/vision products.
kernels_of() {
	local d p
	d=$(sed -n 's/^backend .*decode kernels \([^,]*\),.*/\1/p' "$1" | head -n 1)
	p=$(sed -n 's/^backend .*prefill\/vision products \([^,]*\).*/\1/p' "$1" | head -n 1)
	echo "decode ${d:-?}, prefill/vision ${p:-?}"
}

# machine_row ROUND CONFIG KERNELS: one line of machine.tsv, which summary reads.
machine_row() {
	[[ -s $out/machine.tsv ]] || printf 'round\tconfig\tcpu\tkernels\n' >"$out/machine.tsv"
	printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$(cpu_model)" "$3" >>"$out/machine.tsv"
}

# run_ours ROUND NAME: one `worker bench` run of our engine (a warm-up, then one timed
# run) on the port's grid and prompt length; appends its row.
run_ours() {
	local r=$1 n=$2 grid=32x32 ptok=295
	if ((!dry)); then
		[[ -s $out/grid ]] || die "run: a port configuration must run first (it gives the grid and prompt length)"
		grid=$(cat "$out/grid") ptok=$(cat "$out/prompt_tokens")
	fi
	local env_vars=() flags=()
	mapfile -t env_vars < <(ours_spec "$n" | tail -n +2 | grep -v '^--' || true)
	mapfile -t flags < <(ours_spec "$n" | tail -n +2 | grep '^--' || true)
	local log=$out/logs/r$r-$n.log
	# OpenBLAS (our prefill and vision) sizes its own pool: held to --threads like the rest.
	timed "$log" env OPENBLAS_NUM_THREADS="$threads" "${env_vars[@]}" "$(ours_bin "$n")" bench --weights "$weights" \
		--threads "$threads" --grid "$grid" --prompt "$ptok" --tokens "$tokens" --runs 1 \
		--stream-mib 32 "${flags[@]}" || return 0
	((dry)) && return
	row "$r" "$n" "$(ms_of vision "$log")" "$(ms_of prefill "$log")" "$(ms_of decode "$log")" \
		"$(field peak_rss_kb "$log")" "$(field wall_s "$log")"
	machine_row "$r" "$n" "$(kernels_of "$log")"
}

# row ROUND CONFIG VISION PREFILL DECODE RSS_KB WALL: one line of results.tsv.
row() {
	local x
	for x in "$3" "$4" "$5" "$6"; do
		[[ $x =~ ^[0-9.]+$ ]] || die "round $1, $2: a figure is missing from its log (got '$x')"
	done
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$tokens" "$threads" \
		"$6" "$7" >>"$out/results.tsv"
}

step_run() {
	run_cmd mkdir -p "$out/logs"
	((dry)) || [[ -s $out/results.tsv ]] ||
		printf 'round\tconfig\tvision_ms\tprefill_ms\tdecode_ms\ttokens\tthreads\tpeak_rss_kb\twall_s\n' \
			>"$out/results.tsv"
	local r c n last=$((first_round + rounds - 1))
	for ((r = first_round; r <= last; r++)); do
		for c in "${port_configs[@]}"; do
			echo "round $r/$last: $c ($(date -u +%H:%M:%S))"
			run_port "$r" "$c"
		done
		for n in "${ours_names[@]}"; do
			echo "round $r/$last: $n ($(date -u +%H:%M:%S))"
			run_ours "$r" "$n"
		done
	done
}

step_summary() {
	run_cmd "$python" "$here/summarize.py" --reference "$reference" "$out/results.tsv" \
		--markdown "$out/summary.md"
}

# parse_args reads the command line into the settings above and checks them.
parse_args() {
	while (($#)); do
		case $1 in
		--work) work=$2 && shift ;;
		--out) out=$2 && shift ;;
		--port-src) port_src=$2 && shift ;;
		--port-rev) port_rev=$2 && shift ;;
		--ggml-src) ggml_src=$2 && shift ;;
		--ggml-rev) ggml_rev=$2 && shift ;;
		--weights) weights=$2 && shift ;;
		--image) image=$2 && shift ;;
		--prompt) prompt=$2 && shift ;;
		--tokens) tokens=$2 && shift ;;
		--threads) threads=$2 && shift ;;
		--rounds) rounds=$2 && shift ;;
		--first-round) first_round=$2 && shift ;;
		--configs) configs=$2 && shift ;;
		--ours) ours+=("$2") && shift ;;
		--reference) reference=$2 && shift ;;
		--lock) lock=$2 && shift ;;
		--python) python=$2 && shift ;;
		--jobs) jobs=$2 && shift ;;
		--parts) quant_parts=$2 && shift ;;
		--dry-run) dry=1 ;;
		-h | --help) usage && exit 0 ;;
		fetch | build | convert | run | summary | all) steps+=("$1") ;;
		*) die "unknown argument '$1' (see --help)" ;;
		esac
		shift
	done

	# Checks that need nothing built yet.
	for n in tokens threads rounds first_round jobs quant_parts; do
		local flag=${n#quant_}
		[[ ${!n} =~ ^[1-9][0-9]*$ ]] || die "--${flag//_/-} ${!n}: want a positive integer"
	done
	((${#ours[@]})) || ours=("ours=$repo")
	out=${out:-$work/results}
	port=$work/port
	models=$work/models
	IFS=, read -r -a port_configs <<<"$configs"
	for c in "${port_configs[@]}"; do
		case $c in
		f32 | q8_0 | f32-llamafile | q8_0-llamafile) ;;
		*) die "--configs: unknown configuration '$c' (f32, q8_0, f32-llamafile, q8_0-llamafile)" ;;
		esac
	done
	ours_names=()
	for o in "${ours[@]}"; do
		[[ $o =~ ^[A-Za-z0-9_.-]+=[^,]+(,([A-Za-z_][A-Za-z0-9_]*=[^,]*|--[a-z][a-z0-9-]*(=[^,]*)?))*$ ]] ||
			die "--ours '$o': want NAME=SRC[,VAR=VALUE|,--flag[=value]...]"
		ours_names+=("${o%%=*}")
	done
	reference=${reference:-${ours_names[0]}}
	all_names=("${port_configs[@]}" "${ours_names[@]}")
	[[ " ${all_names[*]} " == *" $reference "* ]] || die "--reference $reference: not one of ${all_names[*]}"
}

main() {
	parse_args "$@"
	((${#steps[@]})) || steps=(all)
	want() { [[ " ${steps[*]} " == *" $1 "* || " ${steps[*]} " == *" all "* ]]; }
	local s
	for s in fetch build convert run summary; do
		if want "$s"; then "step_$s"; fi
	done
}

# Sourced (by the test) it only defines the functions.
# (exit here: bash reads a script as it runs, so an edit during a long run must not
# change what comes after this line.)
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	main "$@"
	exit 0
fi
