#!/usr/bin/env bash
# What the network lock (src/engine/net/netlock.cc) costs to load for N connections, in the form
# cairn uses (one set of local.port.remote.port per address family, one drop rule per direction)
# and in the form it replaced (one drop rule per connection and direction): `nft -f` wall time,
# REPS times each, alternating, then the table deleted. Needs root and nftables.
#
#   sudo bash bench/nft_lock.sh [CONNS]     (default: 1000)
set -euo pipefail
conns=${1:-1000}
reps=${REPS:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"; nft delete table inet cairn_bench 2>/dev/null || true' EXIT
{
  echo "table inet cairn_bench {"
  echo "  set conns4 {"
  echo "    type ipv4_addr . inet_service . ipv4_addr . inet_service"
  printf '    elements = { '
  for ((i = 0; i < conns; i++)); do
    ((i > 0)) && printf ',\n      '
    printf '127.0.0.1 . %d . 127.0.0.1 . 6379' $((20000 + i))
  done
  printf ' }\n  }\n'
  echo "  chain input {"
  echo "    type filter hook input priority -300; policy accept;"
  echo "    ip daddr . tcp dport . ip saddr . tcp sport @conns4 drop"
  echo "  }"
  echo "  chain output {"
  echo "    type filter hook output priority -300; policy accept;"
  echo "    ip saddr . tcp sport . ip daddr . tcp dport @conns4 drop"
  echo "  }"
  echo "}"
} >"$work/set.nft"
{
  echo "table inet cairn_bench {"
  echo "  chain input {"
  echo "    type filter hook input priority -300; policy accept;"
  for ((i = 0; i < conns; i++)); do
    echo "    ip saddr 127.0.0.1 ip daddr 127.0.0.1 tcp sport 6379 tcp dport $((20000 + i)) drop"
  done
  echo "  }"
  echo "  chain output {"
  echo "    type filter hook output priority -300; policy accept;"
  for ((i = 0; i < conns; i++)); do
    echo "    ip saddr 127.0.0.1 ip daddr 127.0.0.1 tcp sport $((20000 + i)) tcp dport 6379 drop"
  done
  echo "  }"
  echo "}"
} >"$work/rules.nft"
now() { date +%s.%N; }
echo "| form | connections | nft -f s | delete s |"
echo "|---|---:|---:|---:|"
for _ in $(seq "$reps"); do
  for form in set rules; do
    t0=$(now)
    nft -f "$work/$form.nft"
    t1=$(now)
    nft delete table inet cairn_bench
    t2=$(now)
    printf '| %s | %d | %.3f | %.3f |\n' "$form" "$conns" "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)"
  done
done
