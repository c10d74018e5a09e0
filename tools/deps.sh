#!/usr/bin/env bash
# tools/deps.sh [--no-recommends] PACKAGE...: install the Debian packages of the list that
# are not installed yet (make run and make test call it; run as root). Nothing happens, and
# nothing is downloaded, when all of them are there. --no-recommends leaves out what the
# packages only recommend (make run's list names everything it needs).
#
# Another apt or dpkg at work (unattended-upgrades, a second terminal) is waited for, not
# failed on: apt-get install waits for the dpkg lock up to APT_LOCK_WAIT seconds
# (DPkg::Lock::Timeout), and apt-get update, whose package-lists lock that option does not
# cover, is tried again every APT_LOCK_POLL (5) seconds for as long.
set -euo pipefail
wait_s=${APT_LOCK_WAIT:-600}
poll_s=${APT_LOCK_POLL:-5}
install_opts=()
if [ "${1:-}" = --no-recommends ]; then
	install_opts+=(--no-install-recommends)
	shift
fi

missing=()
for p in "$@"; do
	# dpkg-query says "install ok installed" only for an unpacked, configured package, not
	# for one removed with its configuration files left
	[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing Debian packages: ${missing[*]}"

apt=(apt-get -o "DPkg::Lock::Timeout=$wait_s")
deadline=$((SECONDS + wait_s))
until out=$("${apt[@]}" update -qq 2>&1); do
	if ! grep -qi "lock" <<<"$out" || [ $SECONDS -ge $deadline ]; then
		echo "$out" >&2
		echo "deps.sh: apt-get update failed" >&2
		exit 1
	fi
	echo "waiting for another apt to finish (apt-get update: $(grep -i -m1 lock <<<"$out"))"
	sleep "$poll_s"
done
if [ -n "$out" ]; then echo "$out"; fi
DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq "${install_opts[@]}" "${missing[@]}"
